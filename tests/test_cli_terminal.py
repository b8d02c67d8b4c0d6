"""Every command prints text from tools, models, plugins, the database and URLs inertly.

Hostile text (ESC sequences that clear the screen and set the title, BEL, a C1 CSI, a
bidirectional override) is planted everywhere a command's output comes from: a plugin's name
and load error, a tool's result and artifact, a write tool's preview, a scripted model's
answers and tool arguments, rows an attacker with database access rewrote, a job's URL. Then
each command's stdout and stderr are searched for the raw bytes.
"""

from __future__ import annotations

import ast
import json
import sqlite3
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import click
import pytest
import structlog
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st

import nrllm_core
import nrllm_mcp
import nrllm_repurpose
from nrllm_core import (
    DataClass,
    Effect,
    Tool,
    ToolArtifact,
    ToolContext,
    ToolResult,
    make_plugin_manager,
)
from nrllm_core._manager import PluginManager
from nrllm_core.cli import BadInput, _common, cli, echo, echo_json, printable
from nrllm_core.cli._logging import configure_for_cli
from nrllm_core.log import use_logger
from nrllm_repurpose._cli import repurpose
from nrllm_repurpose._records import ArtifactStatus, JobStatus
from nrllm_repurpose._store import JobStore

from .conftest import ToolsPlugin

HOSTILE = "A\x1b[2J\x1b]0;owned\x07\x9b31m\u202eZ"
SHOWN = "A\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202eZ"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


class EchoHostile(Tool):
    name = "echo_hostile"
    description = "Answers with hostile text."
    # Names are checked at registration; a group is any string.
    group = HOSTILE
    data_class = DataClass.PUBLIC_CONTENT
    parameters = MappingProxyType({"type": "object", "properties": {}})

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        table = ToolArtifact.table(["c"], [[HOSTILE]], label=HOSTILE)
        return ToolResult.text(f"first line\n{HOSTILE}", table)


class WriteHostile(Tool):
    name = "write_hostile"
    description = "A write whose preview is hostile."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    effect = Effect.NON_IDEMPOTENT_WRITE
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        }
    )

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text(f"wrote {arguments['text']}")

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str]:
        return [f"would write {arguments['text']}"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    folder = tmp_path / "home"
    monkeypatch.setenv("NRLLM_HOME", str(folder))
    monkeypatch.setenv("NRLLM_LOAD_PLUGINS", "")
    monkeypatch.delenv("NRLLM_STATE_KEY", raising=False)
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)

    def plugin_manager(**_: object) -> PluginManager:
        pm = make_plugin_manager(plugins=[nrllm_repurpose], load_entry_points=False)
        pm.register(ToolsPlugin(EchoHostile(), WriteHostile()), name=f"evil{HOSTILE}")
        pm.load_errors["broken"] = f"RuntimeError: {HOSTILE}"
        return pm

    monkeypatch.setattr(_common, "plugin_manager", plugin_manager)
    return folder


@pytest.fixture
def config(tmp_path: Path, home: Path) -> Path:
    path = tmp_path / "nrllm.toml"
    path.write_text(
        textwrap.dedent(
            """
            [actor]
            id = "alice"
            admin = true
            [defaults]
            provider = "model"
            [providers.model]
            kind = "scripted"
            script = "turns.json"
            trust_zone = "local"
            [privacy]
            level = "full"
            """
        )
        # A configuration is the operator's own, but its values are printed all the same.
        + f"[skills.notes]\nallowed_tools = [{json.dumps(HOSTILE)}]\n",
        encoding="utf-8",
    )
    # The configuration names the script, so it must be there; each test writes its turns.
    turns(path)
    return path


def commands() -> click.Group:
    group = type(cli)("nrllm", commands=dict(cli.commands), params=cli.params)
    group.callback = cli.callback
    group.add_command(repurpose)
    return group


def nrllm(config: Path, *args: str) -> Result:
    with structlog.testing.capture_logs():
        # As on a terminal: by default the runner has click strip the ANSI sequences it knows
        # of from all it prints, which would hide a raw one.
        return CliRunner().invoke(commands(), ["--config", str(config), *args], color=True)


def turns(config: Path, *answers: dict[str, Any]) -> None:
    (config.parent / "turns.json").write_text(json.dumps({"turns": list(answers)}), "utf-8")


def has_hostile(value: Any) -> bool:
    if isinstance(value, str):
        return HOSTILE in value
    if isinstance(value, dict):
        return any(has_hostile(v) for v in value.values())
    if isinstance(value, list):
        return any(has_hostile(v) for v in value)
    return False


def plant_in_database(home: Path) -> tuple[str, int]:
    """What an attacker with write access to the database could put there."""
    with sqlite3.connect(home / "nrllm.db") as db:
        db.execute("UPDATE runs SET provider = ?, actor = ?, skill = ?", (HOSTILE,) * 3)
        run_id, sequence, payload = db.execute(
            "SELECT run_id, sequence, payload FROM run_steps ORDER BY run_id, sequence LIMIT 1"
        ).fetchone()
        planted = {**json.loads(payload), "planted": HOSTILE}
        db.execute(
            "UPDATE run_steps SET payload = ? WHERE run_id = ? AND sequence = ?",
            (json.dumps(planted), run_id, sequence),
        )
        db.execute("UPDATE suspensions SET turn_digest = ?", (HOSTILE,))
    with JobStore.open(None, data_dir=home) as store:
        uid = store.create_job(
            owner=HOSTILE,
            source_type="url",
            source_url=f"https://example.com/{HOSTILE}?q={HOSTILE}",
            formats=("faq",),
        )
        claim = store.claim("w", lease_seconds=60)
        assert claim is not None
        store.start_generating(claim, ("faq",), lease_seconds=60)
        store.record_artifact(
            claim,
            "faq",
            status=ArtifactStatus.FAILED,
            content=HOSTILE,
            file_path=f"/tmp/{HOSTILE}",
            error=HOSTILE,
            lease_seconds=60,
        )
        store.finish(claim, JobStatus.FAILED, HOSTILE)
    return run_id, uid


def assert_inert(result: Result) -> None:
    for raw in RAW:
        assert raw not in result.stdout, result.stdout
        assert raw not in result.stderr, result.stderr
    assert b"\x1b" not in result.stdout_bytes + result.stderr_bytes
    assert b"\x07" not in result.stdout_bytes + result.stderr_bytes


def test_no_command_prints_a_raw_control_character(
    config: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text: dict[str, Result] = {}
    json_out: dict[str, Result] = {}

    def both(name: str, *args: str) -> None:
        text[name] = nrllm(config, *args)
        json_out[name] = nrllm(config, *args, "--json")

    both("plugins", "plugins")
    both("tools", "tools")
    text["config check"] = nrllm(config, "config", "check")
    both("invoke", "invoke", "echo_hostile")

    turns(config, {"content": f"# Answer\n\n{HOSTILE}"})
    both("run", "run", "hi")
    suspend = {"tool_calls": [{"name": "write_hostile", "arguments": {"text": HOSTILE}}]}
    turns(config, suspend, {"content": HOSTILE})
    text["run (suspended)"] = nrllm(config, "run", "write")
    run_id = text["run (suspended)"].stdout.split()[1]
    digest = text["run (suspended)"].stdout.split("turn digest: ")[1].split()[0]
    text["approve"] = nrllm(config, "approve", run_id, "--digest", digest)
    turns(config, suspend)
    suspended = nrllm(config, "run", "write", "--json")
    json_out["run (suspended)"] = suspended
    pending = json.loads(suspended.stdout)["run_id"]

    shown_run, uid = plant_in_database(home)
    # Without --digest only a terminal can decide; there, the turn shown comes from the
    # sealed state, and a digest planted in the database does not open it.
    with monkeypatch.context() as terminal:
        terminal.setattr("nrllm_core.cli._run._interactive", lambda: True)
        text["approve (digest from the database)"] = nrllm(config, "approve", pending)
    both("runs", "runs")
    both("runs show", "runs", "show", shown_run)
    text["purge"] = nrllm(config, "purge", "--days", "1")
    text["db upgrade"] = nrllm(config, "db", "upgrade")
    both("repurpose jobs", "repurpose", "jobs")
    both("repurpose jobs show", "repurpose", "jobs", "show", str(uid))
    text["repurpose worker"] = nrllm(config, "repurpose", "worker", "--once")

    for name, result in [*text.items(), *json_out.items()]:
        assert result.exception is None or isinstance(result.exception, SystemExit), name
        assert_inert(result)
    quiet = {"purge", "db upgrade", "repurpose worker", "approve (digest from the database)"}
    for name, result in text.items():
        # The hostile text did reach each command that shows it, escaped.
        assert (SHOWN in result.output) is (name not in quiet), (name, result.output)
    for name, result in json_out.items():
        assert has_hostile(json.loads(result.stdout)), name


def test_an_error_message_is_shown_printable_with_its_exit_status(
    config: Path, tmp_path: Path
) -> None:
    bad_kind = tmp_path / "kind.toml"
    bad_kind.write_text(f"[providers.model]\nkind = {json.dumps(HOSTILE)}\n", encoding="utf-8")

    refused = {
        "file name": nrllm(tmp_path / f"{HOSTILE}.toml", "tools"),
        "configuration value": nrllm(bad_kind, "tools"),
        "name on the command line": nrllm(config, "tools", "--provider", HOSTILE),
        # One that click itself raises, parsing the command line.
        "unknown option": nrllm(config, "tools", f"--{HOSTILE}"),
    }

    for name, result in refused.items():
        assert result.exit_code == 2, (name, result.output)
        assert_inert(result)
        assert SHOWN in result.stderr, (name, result.stderr)
        assert result.stdout == "", name
    assert refused["unknown option"].stderr.startswith("Usage: nrllm tools [OPTIONS]\n")


class Unavailable(click.ClickException):
    exit_code = 3


@pytest.mark.parametrize(
    ("error", "status"),
    [(click.ClickException, 1), (BadInput, 2), (click.UsageError, 2), (Unavailable, 3)],
)
def test_every_error_of_the_group_is_printable_and_keeps_its_status(
    error: type[click.ClickException], status: int
) -> None:
    group = type(cli)("nrllm")

    @group.command()
    def fail() -> None:
        raise error(f"cannot read {HOSTILE}")

    result = CliRunner().invoke(group, ["fail"], color=True)

    assert result.exit_code == status
    assert result.stderr.endswith(f"Error: cannot read {SHOWN}\n")
    assert_inert(result)


def test_multi_line_answers_keep_their_lines(config: Path) -> None:
    turns(config, {"content": "# Answer\n\n- one\n\t- two\r\n"})

    result = nrllm(config, "run", "hi")

    assert result.stdout == "# Answer\n\n- one\n\t- two\\x0d\n\n"


@given(st.text())
def test_printable_leaves_no_control_character(text: str) -> None:
    for multiline in (False, True):
        shown = printable(text, multiline=multiline)
        allowed = "\n\t" if multiline else ""
        assert not any(
            (ord(c) < 0x20 and c not in allowed) or 0x7F <= ord(c) <= 0x9F for c in shown
        )
        assert not any("\u202a" <= c <= "\u202e" or "\u2066" <= c <= "\u2069" for c in shown)
    if not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F or 0x202A <= ord(c) <= 0x2069 for c in text):
        assert printable(text) == text


@given(st.recursive(st.text(), lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner)))
def test_echo_json_keeps_the_value_and_escapes_every_control(value: Any) -> None:
    runner = CliRunner()
    result = runner.invoke(click.command()(lambda: echo_json(value)))

    assert json.loads(result.stdout) == value
    assert printable(result.stdout.rstrip("\n")) == result.stdout.rstrip("\n")


def test_echo_is_printable_on_either_stream() -> None:
    @click.command()
    def say() -> None:
        echo(HOSTILE)
        echo(f"a\n{HOSTILE}", multiline=True, err=True)

    result = CliRunner().invoke(say)

    assert result.stdout == f"{SHOWN}\n"
    assert result.stderr == f"a\n{SHOWN}\n"


def test_log_lines_on_stderr_are_printable(capsys: pytest.CaptureFixture[str]) -> None:
    configure_for_cli()
    try:
        nrllm_core.log.logger().error("nrllm.test.hostile", plugin=HOSTILE)
    finally:
        use_logger(None)

    err = capsys.readouterr().err
    assert "nrllm.test.hostile" in err
    assert SHOWN in err
    assert not any(raw in err for raw in RAW)


# Every module of the command but the sanitiser's own.
CLI_MODULES = [
    *sorted(
        p for p in Path(nrllm_core.cli.__file__).parent.glob("*.py") if p.name != "_terminal.py"
    ),
    Path(nrllm_repurpose.__file__).parent / "_cli.py",
    Path(nrllm_mcp.__file__).parent / "_cli.py",
]


@pytest.mark.parametrize("module", CLI_MODULES, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_commands_print_only_through_the_sanitiser(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    direct = [
        node.lineno
        for node in ast.walk(tree)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "click"
            and node.attr in {"echo", "secho", "echo_via_pager"}
        )
        or (isinstance(node, ast.Name) and node.id == "print")
    ]
    assert direct == [], f"{module.name} prints around nrllm_core.cli.echo at lines {direct}"

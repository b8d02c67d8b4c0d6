"""``nrllm tools``, ``nrllm config check`` and the gate on ``nrllm invoke --provider``.

What a command shows and how it exits is tested through the command; which tools the gate
offers, and why, through the ``nrllm`` fixture's ``offered``, on the same tools.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from click.testing import CliRunner, Result

from nrllm_core import DataClass, DenialReason, Effect, TrustZone, make_plugin_manager
from nrllm_core._manager import PluginManager
from nrllm_core.cli import _common, cli
from nrllm_core.pytest_plugin import Harness

from .conftest import Probe, ToolsPlugin

CONFIG = """
[tools]
disabled = ["off"]

[providers.home]
kind = "openai"
trust_zone = "local"

[providers.cloud]
kind = "openai"
api_key_env = "EXAMPLE_KEY"
fallback = ["home"]

[skills.writing]
allowed_tools = ["notes", "ghost"]

[actor]
id = "ann"
permissions = ["notes.read"]
"""


@pytest.fixture
def tools() -> dict[str, Probe]:
    return {
        "notes": Probe("notes", "content"),
        "secrets": Probe("secrets", "acme_vault"),
        "writer": Probe("writer", "editing", effect=Effect.IDEMPOTENT_WRITE),
        "off": Probe("off", "rag"),
        "widget": Probe("widget", "acme_widgets", data_class=DataClass.PUBLIC_CONTENT),
    }


@pytest.fixture(autouse=True)
def cli_env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, tools: dict[str, Probe]
) -> Iterator[list[dict[str, Any]]]:
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    # A manager per command, as the command makes one; the nrllm fixture's is its own host's.
    def plugin_manager(**_: object) -> PluginManager:
        return make_plugin_manager(plugins=[ToolsPlugin(*tools.values())], load_entry_points=False)

    monkeypatch.setattr(_common, "plugin_manager", plugin_manager)
    # Captured, so that log lines cannot mix into the command's stdout.
    with structlog.testing.capture_logs() as logs:
        yield logs


@pytest.fixture
def harness(nrllm: Harness, tools: dict[str, Probe]) -> Harness:
    """The nrllm fixture with the tools the commands list (``nrllm`` here runs a command)."""
    nrllm.load(ToolsPlugin(*tools.values()))
    return nrllm


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "conf" / "host.toml"
    path.parent.mkdir()
    path.write_text(CONFIG, encoding="utf-8")
    return path


def nrllm(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def tools_json(*args: str, config: Path | None = None) -> dict[str, Any]:
    before = ["--config", str(config)] if config is not None else []
    result = nrllm(*before, "tools", "--json", *args)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


# -- nrllm tools ---------------------------------------------------------------------------------


def test_tools_json_has_exactly_the_documented_shape(config_file: Path) -> None:
    result = nrllm("--config", str(config_file), "tools", "--provider", "home", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data) == ["provider", "zone", "ceiling", "skill", "tools"]
    assert (data["provider"], data["zone"], data["ceiling"], data["skill"]) == (
        "home",
        "local",
        "secretAdjacent",
        None,
    )
    by_name = {t["name"]: t for t in data["tools"]}
    assert [t["name"] for t in data["tools"]] == ["notes", "off", "secrets", "widget", "writer"]
    assert by_name["writer"] == {
        "name": "writer",
        "group": "editing",
        "data_class": "editorContent",
        "data_class_source": "group_default",
        "effect": "idempotent_write",
        "requires_approval": True,
        "offered": True,
        "reason": None,
        "detail": None,
        "observed": None,
    }
    assert by_name["off"]["reason"] == "toolDisabled"
    assert (by_name["secrets"]["data_class_source"], by_name["secrets"]["offered"]) == (
        "unknown_group",
        True,
    )


def test_a_fallback_provider_is_judged_by_its_least_trusted_hop(config_file: Path) -> None:
    data = tools_json("--provider", "cloud", config=config_file)
    by_name = {t["name"]: t for t in data["tools"]}
    assert (data["zone"], data["ceiling"]) == ("externalGlobal", "editorContent")
    assert by_name["secrets"]["offered"] is False
    assert by_name["secrets"]["reason"] == "trustZone"
    assert by_name["widget"]["offered"] is True
    assert by_name["widget"]["data_class_source"] == "declared"


def test_the_skill_narrows_the_listing(config_file: Path) -> None:
    data = tools_json("--provider", "home", "--skill", "writing", config=config_file)
    offered = [t["name"] for t in data["tools"] if t["offered"]]
    assert data["skill"] == "writing"
    assert offered == ["notes"]


def test_without_a_configuration_the_zone_is_external_global() -> None:
    data = tools_json()
    assert (data["provider"], data["zone"], data["ceiling"]) == (
        None,
        "externalGlobal",
        "editorContent",
    )


def test_the_environment_variable_names_the_configuration(
    config_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NRLLM_CONFIG", str(config_file))
    assert tools_json("--provider", "home")["zone"] == "local"


def test_the_readable_listing_shows_zone_ceiling_and_reasons(config_file: Path) -> None:
    result = nrllm("--config", str(config_file), "tools", "--provider", "cloud")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == (
        "provider: cloud  zone: externalGlobal  ceiling: editorContent  skill: (none)"
    )
    assert lines[1].split() == [
        "TOOL",
        "GROUP",
        "DATA",
        "CLASS",
        "SOURCE",
        "EFFECT",
        "APPROVAL",
        "OFFERED",
    ]
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert rows["secrets"][-2:] == ["no:", "trustZone"]
    assert rows["writer"][-2:] == ["required", "yes"]


def test_observe_mode_is_shown(tmp_path: Path) -> None:
    path = tmp_path / "observe.toml"
    path.write_text('[tools]\ndata_class_enforcement = "observe"\n', encoding="utf-8")
    data = tools_json(config=path)
    secrets = {t["name"]: t for t in data["tools"]}["secrets"]
    assert (secrets["offered"], secrets["observed"]) == (True, "trustZone")
    table = nrllm("--config", str(path), "tools").stdout
    assert "yes (observed: trustZone)" in table


# -- the gate behind the listing -----------------------------------------------------------------


def test_a_skill_offers_only_its_tools_and_says_why_not_the_others(harness: Harness) -> None:
    # The configuration the commands read: its disabled tool and its skill.
    harness.config = tomllib.loads(CONFIG)

    report = harness.offered(TrustZone.LOCAL, skill="writing")

    assert report.offered_names == ("notes",)
    reasons = {d.tool: d.reason for d in report.decisions}
    assert reasons["secrets"] is DenialReason.CONFIGURATION_GROUP
    assert reasons["off"] is DenialReason.TOOL_DISABLED


def test_external_global_offers_the_tools_up_to_editor_content(harness: Harness) -> None:
    report = harness.offered(TrustZone.EXTERNAL_GLOBAL)

    assert report.ceiling is DataClass.EDITOR_CONTENT
    assert set(report.offered_names) == {"notes", "off", "widget", "writer"}


def test_observe_mode_offers_what_the_zone_refuses_and_names_the_refusal(
    harness: Harness,
) -> None:
    harness.config = {"tools": {"data_class_enforcement": "observe"}}

    decisions = {d.tool: d for d in harness.offered(TrustZone.EXTERNAL_GLOBAL).decisions}

    secrets = decisions["secrets"]
    assert (secrets.offered, secrets.reason, secrets.observed) == (
        True,
        None,
        DenialReason.TRUST_ZONE,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["tools", "--provider", "nope"], 'no provider named "nope" is configured'),
        (["tools", "--skill", "nope"], 'no skill named "nope" is configured'),
        (["invoke", "notes", "--provider", "nope"], 'no provider named "nope" is configured'),
    ],
)
def test_an_unknown_name_exits_2(config_file: Path, args: list[str], message: str) -> None:
    result = nrllm("--config", str(config_file), *args)
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("command", [["tools"], ["config", "check"], ["invoke", "notes"]])
def test_an_invalid_configuration_exits_2_with_the_key(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[providers.p]\nkind = "x"\ntrust_zone = "moon"\n', encoding="utf-8")
    result = nrllm("--config", str(path), *command)
    assert result.exit_code == 2
    assert "invalid configuration" in result.stderr
    assert "providers.p.trust_zone" in result.stderr
    assert "accepted values: local, privateHosted, externalEu, externalGlobal" in result.stderr


def test_a_relabel_attempt_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "relabel.toml"
    path.write_text('[tools.secrets]\ndata_class = "publicContent"\n', encoding="utf-8")
    result = nrllm("--config", str(path), "tools")
    assert result.exit_code == 2
    assert "properties of the tool's code" in result.stderr


# -- nrllm config check --------------------------------------------------------------------------


def test_config_check_prints_what_it_resolved(config_file: Path) -> None:
    result = nrllm("--config", str(config_file), "config", "check")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"configuration: {config_file}"
    assert "tools.disabled: off" in lines
    assert (
        "provider cloud: kind openai, trust_zone externalGlobal, fallback home, "
        "run zone externalGlobal (ceiling editorContent), four_eyes no"
    ) in lines
    assert (
        "provider home: kind openai, trust_zone local, fallback -, "
        "run zone local (ceiling secretAdjacent), four_eyes no"
    ) in lines
    assert "skill writing: enabled yes, allowed_tools notes, ghost, four_eyes no" in lines
    assert "actor: ann ([actor]), admin no, permissions notes.read" in lines
    assert "defaults.provider: (none), zone externalGlobal (ceiling editorContent)" in lines
    assert "privacy: level metadata, retention_days 30" in lines


def test_config_check_hides_a_store_password(tmp_path: Path) -> None:
    path = tmp_path / "store.toml"
    path.write_text('[store]\nurl = "postgresql://app:hunter2@db:5432/nrllm"\n', encoding="utf-8")
    result = nrllm("--config", str(path), "config", "check")
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output
    assert "store: url postgresql://app:***@db:5432/nrllm" in result.stdout


def test_config_check_hides_a_password_or_key_in_a_urls_query(tmp_path: Path) -> None:
    path = tmp_path / "store.toml"
    url = "postgresql://db/nrllm?user=app&password=hunter2&sslmode=require"
    path.write_text(f'[store]\nurl = "{url}"\n', encoding="utf-8")
    result = nrllm("--config", str(path), "config", "check")
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output
    assert "store: url postgresql://db/nrllm?user=app&password=***&sslmode=require" in result.stdout


@pytest.mark.parametrize(
    "url",
    ["postgresql://app:hunter2@db:notaport/nrllm", "postgresql://app:hunter2@[::1/nrllm", "nrllm"],
)
def test_a_store_url_that_does_not_parse_is_a_config_error_that_never_quotes_it(
    tmp_path: Path, url: str
) -> None:
    path = tmp_path / "store.toml"
    path.write_text(f'[store]\nurl = "{url}"\n', encoding="utf-8")
    for command in (("config", "check"), ("runs",)):
        result = nrllm("--config", str(path), *command)
        assert result.exit_code == 2, result.output
        assert "store.url: not a database URL" in result.output
        assert "hunter2" not in result.output
        assert "Traceback" not in result.output


def test_a_store_that_cannot_be_reached_is_an_error_without_a_traceback(tmp_path: Path) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens there: the port was free a moment ago.
    path = tmp_path / "store.toml"
    url = f"postgresql+psycopg://app:hunter2@127.0.0.1:{port}/nrllm?connect_timeout=2"
    path.write_text(f'[store]\nurl = "{url}"\n', encoding="utf-8")
    result = nrllm("--config", str(path), "runs")
    assert result.exit_code == 1
    assert "the store cannot be opened (OperationalError)" in result.output
    assert "hunter2" not in result.output
    assert isinstance(result.exception, SystemExit)


def test_config_check_without_a_file_reports_the_defaults() -> None:
    result = nrllm("config", "check")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "configuration: (no file: every default applies)"


# -- nrllm invoke --------------------------------------------------------------------------------


def invoke_json(*args: str) -> dict[str, Any]:
    result = nrllm(*args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def test_invoke_with_a_provider_refuses_and_never_executes(
    config_file: Path, tools: dict[str, Probe]
) -> None:
    report = invoke_json("--config", str(config_file), "invoke", "secrets", "--provider", "cloud")
    assert report["wire"]["is_error"] is True
    assert report["wire"]["content"] == 'Error: tool "secrets" not permitted'
    assert tools["secrets"].calls == 0


def test_invoke_with_a_provider_refuses_a_disabled_tool(
    config_file: Path, tools: dict[str, Probe]
) -> None:
    report = invoke_json("--config", str(config_file), "invoke", "off", "--provider", "home")
    assert report["wire"]["content"] == 'Error: tool "off" not permitted'
    assert tools["off"].calls == 0


def test_invoke_with_a_provider_runs_an_offered_tool_as_the_configured_actor(
    config_file: Path, tools: dict[str, Probe]
) -> None:
    report = invoke_json("--config", str(config_file), "invoke", "secrets", "--provider", "home")
    assert report["wire"] == {
        "call_id": report["wire"]["call_id"],
        "tool_name": "secrets",
        "content": "ran for ann",
        "is_error": False,
    }
    assert tools["secrets"].calls == 1


def test_invoke_without_a_provider_is_a_direct_call_despite_a_default(
    tmp_path: Path, tools: dict[str, Probe]
) -> None:
    path = tmp_path / "default.toml"
    path.write_text(
        '[providers.cloud]\nkind = "openai"\nmodel = "m"\n'
        '[defaults]\nprovider = "cloud"\n[actor]\nid = "bob"\n',
        encoding="utf-8",
    )
    report = invoke_json("--config", str(path), "invoke", "secrets")
    assert report["wire"]["content"] == "ran for bob"
    assert tools["secrets"].calls == 1


def test_config_check_refuses_a_provider_kind_no_plugin_provides(tmp_path: Path) -> None:
    path = tmp_path / "nrllm.toml"
    path.write_text('[providers.odd]\nkind = "weird"\n', encoding="utf-8")

    result = nrllm("--config", str(path), "config", "check")

    assert result.exit_code == 2
    assert 'providers.odd.kind: unknown kind "weird"' in result.stderr
    assert "scripted" in result.stderr


@pytest.mark.parametrize(
    ("actor", "reason"),
    [
        ("alice\\u200b", "U+200B ZERO WIDTH SPACE is invisible"),
        ("\\u0430lice", "it reads as 'alice' but is spelled with U+0430 CYRILLIC SMALL LETTER A"),
        ("ivan\\u0438", "it mixes scripts or digit systems (Cyrillic, Latin)"),
        ("ali\\u0307ce", "U+0307 COMBINING DOT ABOVE is hidden by the letter it follows"),
        ("alice\\u2800", "U+2800 BRAILLE PATTERN BLANK is a format, space or blank character"),
    ],
)
def test_config_check_refuses_an_actor_name_that_reads_as_another(
    tmp_path: Path, actor: str, reason: str
) -> None:
    path = tmp_path / "nrllm.toml"
    path.write_text(f'[actor]\nid = "{actor}"\n', encoding="utf-8")

    result = nrllm("--config", str(path), "config", "check")

    assert result.exit_code == 2
    assert "invalid configuration" in result.stderr
    assert f"actor.id: refused: {reason}" in result.stderr
    assert result.stdout == ""


# Issue 33, item 7: real names, each in one script per word, refused before.
@pytest.mark.parametrize(
    ("actor", "note"),
    [
        (
            "Ayd\\u0131n",
            "it reads as 'aydin' but is spelled with U+0131 LATIN SMALL LETTER DOTLESS I",
        ),
        ("Y\\u0131ld\\u0131z", "it reads as 'yildiz' but is spelled with U+0131"),
        ("\\u00c6SA", "it reads as 'aesa' but is spelled with U+00C6 LATIN CAPITAL LETTER AE"),
        ("C\\u0153ur", "it reads as 'coeur' but is spelled with U+0153 LATIN SMALL LIGATURE OE"),
        ("O\\u2019Brien", 'it reads as "o\'brien" but is spelled with U+2019'),
        ("Anne\\u2011Marie", "but is spelled with U+2011 NON-BREAKING HYPHEN"),
        ("\\u0421\\u0430\\u0440\\u0430", "it reads as 'capa' but is spelled with U+0421"),
        ("\\u0391\\u039d\\u039d\\u0391", "it reads as 'avva' but is spelled with U+0391"),
        ("user_\\u0664\\u0662", None),
    ],
)
def test_config_check_accepts_a_real_name_and_notes_a_lookalike(
    tmp_path: Path, actor: str, note: str | None
) -> None:
    path = tmp_path / "nrllm.toml"
    path.write_text(f'[actor]\nid = "{actor}"\n', encoding="utf-8")

    result = nrllm("--config", str(path), "config", "check")

    assert result.exit_code == 0, result.output
    name = tomllib.loads(path.read_text(encoding="utf-8"))["actor"]["id"]
    assert f"actor: {name} ([actor])" in result.stdout
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: actor.id: ")]
    if note is None:
        assert notes == []
    else:
        (line,) = notes
        assert note in line
        assert line.endswith("; four-eyes takes the two for one person")


def test_config_check_shows_and_refuses_a_plugin_kinds_own_settings(tmp_path, monkeypatch):
    import attrs

    from nrllm_core import hookimpl

    @attrs.frozen(kw_only=True)
    class Regional:
        region: str = "eu-west-1"
        endpoint_url: str | None = None

    class Kind:
        @hookimpl
        def nrllm_register_providers(self, registry: Any) -> None:
            registry.register("regional", lambda *a, **k: None, settings=Regional)

    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: make_plugin_manager(plugins=[Kind()], load_entry_points=False),
    )
    config = tmp_path / "kind.toml"
    config.write_text('[providers.r]\nkind = "regional"\nregion = "us-east-1"\n', "utf-8")

    shown = nrllm("--config", str(config), "config", "check")
    config.write_text('[providers.r]\nkind = "regional"\nregion = 1\nzone = "x"\n', "utf-8")
    refused = nrllm("--config", str(config), "config", "check")

    assert shown.exit_code == 0, shown.output
    assert 'provider r regional settings: {"region":"us-east-1","endpoint_url":null}' in (
        shown.stdout
    )
    assert refused.exit_code == 2
    assert "providers.r.region: expected a string, got an integer" in refused.stderr
    assert "providers.r.zone: unknown key" in refused.stderr

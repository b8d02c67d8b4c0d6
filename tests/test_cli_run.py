"""``nrllm run`` and ``nrllm approve``: the JSON shape, exit statuses, the printed commands.

The tools are the suite's shared ``Counting`` doubles, in the plugin manager each command
makes; the printed commands run in this process, so they find the same tools.
"""

from __future__ import annotations

import json
import re
import shlex
import textwrap
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from nrllm_core import Effect, make_plugin_manager
from nrllm_core.cli import _common, cli
from nrllm_core.store import Store

from .conftest import Counting, ToolsPlugin

RUN_KEYS = {
    "run_id",
    "status",
    "termination_reason",
    "final_content",
    "pending",
    "turn_digest",
    "error",
    "truncated",
    "usage",
    "untrusted",
}
PENDING_KEYS = {"call_id", "name", "arguments", "requires_approval", "preview", "policy_reason"}

WRITE_TURN = {
    "tool_calls": [
        {"name": "write_note", "arguments": {"text": "hello"}},
        {"name": "read_notes", "arguments": {}},
    ]
}


@attrs.define
class Env:
    config: Path
    home: Path
    script: Path
    write: Counting
    read: Counting

    def turns(self, *turns: dict[str, Any]) -> None:
        self.script.write_text(json.dumps({"turns": list(turns)}), encoding="utf-8")

    @property
    def calls(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """The arguments of each execution so far: of ``write_note``, of ``read_notes``."""
        return list(self.write.calls), list(self.read.calls)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Env:
    write = Counting(
        "write_note",
        effect=Effect.NON_IDEMPOTENT_WRITE,
        previewer=lambda arguments: [f"would write: {arguments['text']}"],
    )
    read = Counting("read_notes")
    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: make_plugin_manager(
            plugins=[ToolsPlugin(write, read)], load_entry_points=False
        ),
    )
    home = tmp_path / "home"
    monkeypatch.setenv("NRLLM_HOME", str(home))
    monkeypatch.delenv("NRLLM_STATE_KEY", raising=False)
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    config = tmp_path / "conf dir" / "nrllm.toml"
    config.parent.mkdir()
    config.write_text(
        textwrap.dedent(
            """
            [actor]
            id = "alice"
            [defaults]
            provider = "model"
            [providers.model]
            kind = "scripted"
            script = "turns.json"
            trust_zone = "local"
            [providers.guarded]
            kind = "scripted"
            script = "turns.json"
            trust_zone = "local"
            four_eyes = true
            [skills.notes]
            allowed_tools = ["write_note"]
            """
        ),
        encoding="utf-8",
    )
    # The configuration names the script, so it must be there; each test writes its turns.
    (config.parent / "turns.json").write_text('{"turns": []}', encoding="utf-8")
    return Env(
        config=config, home=home, script=config.parent / "turns.json", write=write, read=read
    )


def nrllm(env: Env, *args: str) -> Result:
    # Log lines are captured, so that stdout carries only the command's output.
    with capture_logs():
        return CliRunner().invoke(cli, ["--config", str(env.config), *args])


def as_json(result: Result) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    assert set(data) == RUN_KEYS
    return data


# -- nrllm run -----------------------------------------------------------------------------------


def test_run_json_completed(env):
    env.turns({"content": "hello there"})

    result = nrllm(env, "run", "--json", "hi")

    assert result.exit_code == 0, result.output
    data = as_json(result)
    assert re.fullmatch(r"[0-9a-f]{32}", data["run_id"])
    assert {k: v for k, v in data.items() if k != "run_id"} == {
        "status": "completed",
        "termination_reason": "completed",
        "final_content": "hello there",
        "pending": [],
        "turn_digest": None,
        "error": None,
        "truncated": False,
        "usage": {
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "cached_tokens": 0,
            "reasoning_tokens": 0,
        },
        "untrusted": [],
    }


def test_run_json_awaiting_approval_lists_the_whole_turn(env):
    env.turns(WRITE_TURN, {"content": "done"})

    result = nrllm(env, "run", "--json", "write hello")

    assert result.exit_code == 0, result.output
    data = as_json(result)
    assert data["status"] == "awaiting_approval"
    assert data["error"] is None
    assert data["final_content"] == ""
    assert re.fullmatch(r"[0-9a-f]{64}", data["turn_digest"])
    assert [set(p) for p in data["pending"]] == [PENDING_KEYS, PENDING_KEYS]
    assert data["pending"] == [
        {
            "call_id": "call_0_0",
            "name": "write_note",
            "arguments": {"text": "hello"},
            "requires_approval": True,
            "preview": ["would write: hello"],
            "policy_reason": None,
        },
        {
            "call_id": "call_0_1",
            "name": "read_notes",
            "arguments": {},
            "requires_approval": False,
            "preview": [],
            "policy_reason": None,
        },
    ]
    assert env.calls == ([], [])


def test_run_json_failed_exits_1_with_the_error(env):
    env.turns({"tool_calls": [{"name": "read_notes", "arguments": {}}]})

    result = nrllm(env, "run", "--json", "hi")

    assert result.exit_code == 1
    data = as_json(result)
    assert (data["status"], data["termination_reason"]) == ("failed", "provider_failed")
    assert "ran out" in data["error"]


def test_run_readable_failure_goes_to_stderr_and_exits_1(env):
    env.turns()

    result = nrllm(env, "run", "hi")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert "failed: the model provider failed" in result.stderr


def test_run_readable_prints_the_answer(env):
    env.turns({"content": "hello there"})

    result = nrllm(env, "run", "hi")

    assert (result.exit_code, result.stdout) == (0, "hello there\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--provider", "nope"], 'provider named "nope"'),
        (["--skill", "nope"], 'skill named "nope"'),
    ],
    ids=["provider", "skill"],
)
def test_run_with_an_unknown_name_exits_2(env, args, message):
    env.turns({"content": "x"})

    result = nrllm(env, "run", *args, "hi")

    assert result.exit_code == 2
    assert message in result.stderr


@pytest.mark.parametrize(
    "text", ["[actor\nid = 1", "[surprise]\nkey = 1\n", "[providers.model]\nkind = 3\n"]
)
def test_run_with_a_bad_configuration_exits_2(env, text):
    env.config.write_text(text, encoding="utf-8")

    result = nrllm(env, "run", "hi")

    assert result.exit_code == 2
    assert "invalid configuration" in result.stderr


def test_run_clamps_max_rounds_with_a_warning(env):
    env.turns(*[{"tool_calls": [{"name": "read_notes", "arguments": {}}]}] * 22)

    with capture_logs() as logs:
        result = CliRunner().invoke(
            cli, ["--config", str(env.config), "run", "--max-rounds", "50", "--json", "hi"]
        )

    data = as_json(result)
    assert (data["status"], data["termination_reason"]) == ("completed", "max_iterations")
    assert len(env.read.calls) == 20
    assert any(e["event"] == "nrllm.loop.rounds_clamped" for e in logs)


def test_run_readable_prints_the_exact_approve_and_deny_commands(env):
    env.turns(WRITE_TURN, {"content": "done"})

    result = nrllm(env, "run", "write hello")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    run_id = lines[0].split()[1]
    digest = lines[-3].removeprefix("turn digest: ")
    base = f"nrllm --config {shlex.quote(str(env.config))}"
    assert lines == [
        f"run {run_id} is waiting for approval of this turn:",
        '  write_note (needs approval) {"text":"hello"}',
        "    | would write: hello",
        "  read_notes (runs with the turn) {}",
        f"turn digest: {digest}",
        f"approve: {base} approve {run_id} --digest {digest}",
        f"deny:    {base} approve {run_id} --deny --digest {digest}",
    ]

    # The printed command, run as printed, approves the turn.
    approve = shlex.split(lines[-2].removeprefix("approve: "))
    assert approve[0] == "nrllm"
    with capture_logs():
        done = CliRunner().invoke(cli, approve[1:])
    assert (done.exit_code, done.stdout) == (0, "done\n")
    assert env.calls == ([{"text": "hello"}], [{}])


def test_the_printed_deny_command_denies(env):
    env.turns(WRITE_TURN, {"content": "understood"})
    lines = nrllm(env, "run", "write hello").stdout.splitlines()

    deny = shlex.split(lines[-1].removeprefix("deny:    "))
    with capture_logs():
        done = CliRunner().invoke(cli, deny[1:])

    assert (done.exit_code, done.stdout) == (0, "understood\n")
    assert env.calls == ([], [])


# -- nrllm approve -------------------------------------------------------------------------------


def suspend(env: Env, *args: str) -> dict[str, Any]:
    env.turns(WRITE_TURN, {"content": "done"})
    data = as_json(nrllm(env, "run", "--json", *args, "write hello"))
    assert data["status"] == "awaiting_approval"
    return data


def test_approve_without_a_digest_off_a_terminal_exits_2_naming_digest(env):
    pending = suspend(env)

    result = nrllm(env, "approve", pending["run_id"])

    assert result.exit_code == 2
    assert "--digest" in result.stderr
    assert env.calls == ([], [])
    assert nrllm(env, "approve", pending["run_id"], "--deny").exit_code == 2


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("nrllm_core.cli._run._interactive", lambda: True)


def prompted(env: Env, *args: str, answer: str) -> Result:
    with capture_logs():
        return CliRunner().invoke(cli, ["--config", str(env.config), *args], input=answer)


@pytest.mark.usefixtures("terminal")
def test_approve_without_a_digest_on_a_terminal_shows_the_turn_and_asks(env):
    pending = suspend(env)

    result = prompted(env, "approve", pending["run_id"], answer="y\n")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines == [
        f"run {pending['run_id']} is waiting for approval of this turn:",
        '  write_note (needs approval) {"text":"hello"}',
        "    | would write: hello",
        "  read_notes (runs with the turn) {}",
        f"turn digest: {pending['turn_digest']}",
        "Approve? [y/N]: y",
        "done",
    ]
    assert env.calls == ([{"text": "hello"}], [{}])


@pytest.mark.usefixtures("terminal")
@pytest.mark.parametrize("answer", ["\n", "n\n", "no\n"])
def test_the_prompt_defaults_to_no_and_decides_nothing(env, answer):
    pending = suspend(env)

    result = prompted(env, "approve", pending["run_id"], answer=answer)

    assert result.exit_code == 1
    assert "Approve? [y/N]" in result.stdout
    assert "nothing was decided" in result.stderr
    assert env.calls == ([], [])
    again = nrllm(env, "approve", pending["run_id"], "--digest", pending["turn_digest"])
    assert again.exit_code == 0, again.output


@pytest.mark.usefixtures("terminal")
def test_a_denial_on_a_terminal_asks_too(env):
    pending = suspend(env)

    result = prompted(env, "approve", pending["run_id"], "--deny", "--json", answer="y\n")

    assert result.exit_code == 0, result.output
    assert as_json(result)["status"] == "completed"
    # With --json the turn and the question go to stderr: stdout stays one JSON object.
    assert f"turn digest: {pending['turn_digest']}" in result.stderr
    assert "Deny? [y/N]" in result.stderr
    assert env.calls == ([], [])


def test_the_terminal_check_is_stdin_being_a_tty(monkeypatch):
    import io

    from nrllm_core.cli._run import _interactive

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", io.StringIO())
    assert _interactive() is False
    monkeypatch.setattr("sys.stdin", Tty())
    assert _interactive() is True


def test_a_state_put_back_after_the_run_exits_1_as_stale(env):
    import sqlite3

    pending = suspend(env)
    database = env.home / "nrllm.db"
    with sqlite3.connect(database) as db:
        (sealed,) = db.execute("SELECT sealed FROM suspensions").fetchone()
    decide = ("approve", pending["run_id"], "--digest", pending["turn_digest"], "--json")
    assert nrllm(env, *decide).exit_code == 0
    with sqlite3.connect(database) as db:
        db.execute(
            "UPDATE suspensions SET sealed = ?, decided_at = NULL, decision = NULL", (sealed,)
        )
        db.execute("UPDATE runs SET status = 'awaiting_approval', ended_at = NULL")
    db.close()

    result = nrllm(env, *decide)

    assert result.exit_code == 1
    assert "stale" in as_json(result)["error"]
    assert env.calls == ([{"text": "hello"}], [{}])


def test_approve_json_prints_the_outcome(env):
    pending = suspend(env)

    result = nrllm(env, "approve", pending["run_id"], "--digest", pending["turn_digest"], "--json")

    assert result.exit_code == 0, result.output
    data = as_json(result)
    assert (data["run_id"], data["status"], data["final_content"]) == (
        pending["run_id"],
        "completed",
        "done",
    )
    assert result.stderr == ""


def test_approve_deny_executes_nothing(env):
    pending = suspend(env)

    result = nrllm(
        env, "approve", pending["run_id"], "--deny", "--digest", pending["turn_digest"], "--json"
    )

    assert as_json(result)["status"] == "completed"
    assert env.calls == ([], [])


@pytest.mark.parametrize("case", ["unknown-run", "stale-digest", "replayed"])
def test_a_refused_approval_exits_1_with_the_reason(env, case):
    pending = suspend(env)
    run_id, digest = pending["run_id"], pending["turn_digest"]
    if case == "unknown-run":
        run_id = "f" * 32
    elif case == "stale-digest":
        digest = "0" * 64
    else:
        assert nrllm(env, "approve", run_id, "--digest", digest).exit_code == 0
    calls_before = env.calls

    result = nrllm(env, "approve", run_id, "--digest", digest, "--json")

    assert result.exit_code == 1
    data = as_json(result)
    # A refusal changes nothing: the status is the run's own (none for an unknown run).
    expected_status = {"unknown-run": None, "stale-digest": "awaiting_approval"}
    assert data["status"] == expected_status.get(case, "completed")
    assert data["run_id"] == run_id
    expected = {"unknown-run": "not awaiting approval", "stale-digest": "stale"}
    assert expected.get(case, "not awaiting approval") in data["error"]
    assert env.calls == calls_before


def test_a_refused_approval_is_readable_on_stderr(env):
    result = nrllm(env, "approve", "f" * 32, "--digest", "0" * 64)

    assert result.exit_code == 1
    assert "approval refused:" in result.stderr


def test_approve_as_names_the_approver_and_four_eyes_applies(env):
    pending = suspend(env, "--provider", "guarded")
    decide = ("approve", pending["run_id"], "--digest", pending["turn_digest"], "--json")

    for spelling in ("alice", "alice\u200b", "\u0430lice"):
        refused = nrllm(env, *decide, "--as", spelling)
        assert refused.exit_code == 1
        assert "four-eyes" in as_json(refused)["error"]
    refused_default = nrllm(env, *decide)
    assert refused_default.exit_code == 1
    assert env.calls == ([], [])

    done = nrllm(env, *decide, "--as", "bob")

    assert done.exit_code == 0, done.output
    assert as_json(done)["status"] == "completed"
    store = Store.open(None, data_dir=env.home)
    try:
        steps = store.get_run(pending["run_id"]).steps
    finally:
        store.close()
    (approval,) = [s for s in steps if s.kind == "approval"]
    assert approval.payload["approver"] == "bob"


# Issue 33, item 2: spellings of alice that passed four-eyes as someone else.
@pytest.mark.parametrize(
    "spelling",
    [
        "ali\u0307ce",  # a dot above on the i, which has one
        "alice\u2800",  # braille pattern blank
        "alice\ufff9",  # interlinear annotation anchor
        "alice\U0001d159",  # musical symbol null notehead
        "alice\x01",
        "alice\x7f",
        "alice\x9b",
    ],
)
def test_approve_as_a_blank_or_hidden_spelling_of_the_initiator_is_four_eyes_refused(env, spelling):
    pending = suspend(env, "--provider", "guarded")
    decide = ("approve", pending["run_id"], "--digest", pending["turn_digest"], "--json")

    refused = nrllm(env, *decide, "--as", spelling)

    assert refused.exit_code == 1
    assert "four-eyes" in as_json(refused)["error"]
    assert env.calls == ([], [])


def test_approve_as_bytes_that_are_not_utf8_is_a_clear_error(env):
    pending = suspend(env, "--provider", "guarded")
    decide = ("approve", pending["run_id"], "--digest", pending["turn_digest"])
    # What Python makes of the argument bytes b"al\xffce" on a UTF-8 system.
    undecodable = b"al\xffce".decode("utf-8", "surrogateescape")

    refused = nrllm(env, *decide, "--as", undecodable)

    assert refused.exit_code == 2
    assert "--as: not valid UTF-8" in refused.stderr
    assert "Traceback" not in refused.output
    assert refused.exception is None or isinstance(refused.exception, SystemExit)
    assert env.calls == ([], [])


def test_cancel_as_bytes_that_are_not_utf8_is_a_clear_error_and_cancels_nothing(env):
    pending = suspend(env, "--provider", "guarded")
    undecodable = b"al\xffce".decode("utf-8", "surrogateescape")

    refused = nrllm(env, "runs", "cancel", pending["run_id"], "--as", undecodable)

    assert refused.exit_code == 2
    assert "--as: not valid UTF-8" in refused.stderr
    assert "Traceback" not in refused.output
    # Still waiting: it can be decided.
    listed = nrllm(env, "runs", "--status", "awaiting_approval", "--json")
    assert pending["run_id"] in listed.stdout


@pytest.mark.parametrize("nobody", ["", " ", "\u200b", "\u2060\ufeff", "\u2800", "\x01"])
@pytest.mark.parametrize("guard", [[], ["--provider", "guarded"]])
def test_approve_as_nobody_is_refused(env, nobody, guard):
    pending = suspend(env, *guard)
    decide = ("approve", pending["run_id"], "--digest", pending["turn_digest"])

    refused = nrllm(env, *decide, "--as", nobody)

    assert refused.exit_code == 1
    assert "approval refused: the approver names nobody" in refused.stderr
    assert "Traceback" not in refused.output
    assert env.calls == ([], [])
    assert nrllm(env, *decide, "--as", "bob").exit_code == 0


def test_model_text_cannot_repaint_the_terminal(env):
    env.turns({"content": "done\x1b[2J\x1b[1;1Happroved by security\u202e"})

    result = nrllm(env, "run", "hi")

    assert result.exit_code == 0
    assert "\x1b" not in result.stdout
    assert "\u202e" not in result.stdout
    assert "done\\x1b[2J\\x1b[1;1Happroved by security\\u202e" in result.stdout


@pytest.mark.parametrize("rounds", ["0", "-3"])
def test_max_rounds_below_one_is_bad_input(env, rounds):
    env.turns({"content": "x"})

    result = nrllm(env, "run", "--max-rounds", rounds, "hi")

    assert result.exit_code == 2
    assert "max rounds must be at least 1" in result.stderr


def test_approving_an_unknown_run_without_a_digest_names_the_real_reason(env, monkeypatch):
    monkeypatch.setattr("nrllm_core.cli._run._interactive", lambda: True)

    result = nrllm(env, "approve", "f" * 32, "--json")

    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"] == f'run "{"f" * 32}" is not awaiting approval'


# -- nrllm runs cancel ---------------------------------------------------------------------------


def test_runs_cancel_ends_a_suspended_run_and_a_later_approval_is_refused(env):
    pending = suspend(env)

    cancelled = nrllm(env, "runs", "cancel", pending["run_id"], "--as", "carol")
    again = nrllm(env, "runs", "cancel", pending["run_id"])
    approved = nrllm(env, "approve", pending["run_id"], "--digest", pending["turn_digest"])

    assert (cancelled.exit_code, cancelled.stdout) == (0, f'run "{pending["run_id"]}" cancelled\n')
    assert again.exit_code == 1
    assert "is not awaiting approval" in again.stderr
    assert approved.exit_code == 1
    assert "was cancelled; it can no longer be decided" in approved.stderr
    assert env.calls == ([], [])


def test_a_turn_the_policy_sent_to_a_person_says_why_and_runs_show_prints_the_label(env):
    # read_notes declares no integrity: what it returns is untrusted, so the write of the
    # next turn waits for a person for that reason.
    env.turns(
        {"tool_calls": [{"name": "read_notes", "arguments": {}}]},
        {"tool_calls": [{"name": "write_note", "arguments": {"text": "hello"}}]},
        {"content": "done"},
    )

    result = nrllm(env, "run", "read, then write")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    run_id = lines[0].split()[1]
    assert lines[1] == (
        '  write_note (needs approval: the run has read untrusted text) {"text":"hello"}'
    )
    shown = nrllm(env, "runs", "show", run_id)
    assert "  label: publicContent, untrusted (untrusted text from: read_notes)" in (
        shown.stdout.splitlines()
    )
    data = json.loads(nrllm(env, "runs", "show", run_id, "--json").stdout)
    assert data["label"] == {
        "data_class": "publicContent",
        "integrity": "untrusted",
        "untrusted_from": ["read_notes"],
    }

"""Approval through ``Host``: suspension before any call, previews, decisions bound to a digest,
four-eyes, live re-gating, the audit first, resume in a second process, and concurrency."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    ApprovalRefused,
    AuditRecord,
    Effect,
    StepKind,
    Tool,
    ToolContext,
    ToolResult,
    Usage,
    hookimpl,
)
from nrllm_core._host import Host
from nrllm_core._preview import PREVIEW_MAX_LINE_CHARS, PREVIEW_MAX_LINES
from nrllm_core.store import Store

from .conftest import Counting, ToolsPlugin

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")

SECRET = "sk-live-PREVIEW-SECRET-0123456789"


class FailingAudit:
    """An audit sink that fails for steps of one kind (and, optionally, one tool only)."""

    def __init__(self, kind: StepKind, tool: str | None = None) -> None:
        self.kind = kind
        self.tool = tool

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        if record.kind is self.kind and self.tool in (None, record.payload.get("tool_name")):
            raise RuntimeError("audit storage is down")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def config_data(script: Path) -> dict[str, Any]:
    """A configuration of a host built by hand, for what the nrllm fixture does not set: its
    environment, its store."""
    return {
        "providers": {"model": {"kind": "scripted", "script": str(script), "trust_zone": "local"}},
        "defaults": {"provider": "model"},
        "actor": {"id": "alice"},
    }


def write_script(path: Path, turns: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return path


def tool_messages(nrllm: Any) -> list[tuple[str | None, str]]:
    """The tool messages of the last request the nrllm fixture's model received."""
    messages, _ = nrllm.requests[-1]
    return [(m.tool_call_id, m.content) for m in messages if m.role.value == "tool"]


def write_turn(*names: str) -> dict[str, Any]:
    return {"tool_calls": [call(n, text=f"{n} arg") for n in names], "content": "working"}


# -- suspension ----------------------------------------------------------------------------------


def test_a_turn_with_a_write_suspends_before_any_of_its_calls_runs(nrllm):
    read = Counting("read_notes")
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    flagged = Counting("send_mail", requires_approval=True)
    nrllm.load(ToolsPlugin(read, write, flagged))
    host = nrllm.host

    turn = write_turn("read_notes", "write_note", "send_mail", "read_notes")

    outcome = nrllm.run("go", script=[turn])

    assert outcome.status == "awaiting_approval"
    assert outcome.termination_reason == "awaiting_approval"
    assert (len(read.calls), len(write.calls), len(flagged.calls)) == (0, 0, 0)
    assert [(p.name, p.requires_approval) for p in outcome.pending] == [
        ("read_notes", False),
        ("write_note", True),
        ("send_mail", True),
        ("read_notes", False),
    ]
    assert [p.call_id for p in outcome.pending] == [f"call_0_{i}" for i in range(4)]
    assert outcome.turn_digest is not None
    assert len(outcome.turn_digest) == 64
    assert [r.status for r in host.runs()] == ["awaiting_approval"]
    assert host.store.suspension(outcome.run_id).turn_digest == outcome.turn_digest


def test_an_idempotent_write_and_a_declared_approval_each_suspend(nrllm):
    tools = (
        Counting("put_note", effect=Effect.IDEMPOTENT_WRITE),
        Counting("ask_first", requires_approval=True),
    )
    nrllm.load(ToolsPlugin(*tools))
    for tool in tools:
        assert nrllm.run("go", script=[write_turn(tool.name)]).status == "awaiting_approval"
        assert tool.calls == []


def test_previews_are_shown_and_bounded(nrllm):
    long_lines = [f"line  {i}\n\twith   spaces" for i in range(25)]
    tools = [
        Counting("many", effect=Effect.IDEMPOTENT_WRITE, previewer=lambda a: long_lines),
        Counting("wide", requires_approval=True, previewer=lambda a: ["x" * 900]),
        Counting("plain", requires_approval=True),
        Counting("echo", requires_approval=True, previewer=lambda a: [f"will write {a['text']}"]),
    ]
    nrllm.load(ToolsPlugin(*tools))
    turn = write_turn("many", "wide", "plain", "echo")

    previews = {p.name: p.preview for p in nrllm.run("go", script=[turn]).pending}

    # At most 20 lines in all, the last one saying how many were left out.
    assert len(previews["many"]) == PREVIEW_MAX_LINES
    assert previews["many"][0] == "line 0 with spaces"
    assert previews["many"][-1] == "… and 6 more line(s), not shown."
    assert previews["wide"] == ("x" * PREVIEW_MAX_LINE_CHARS,)
    assert previews["plain"] == ()
    assert previews["echo"] == ("will write echo arg",)


def _raise(arguments: dict[str, Any]) -> list[str]:
    raise RuntimeError(f"cannot connect with {SECRET}")


@pytest.mark.parametrize(
    ("previewer", "expected"),
    [
        (
            _raise,
            "The preview for this call failed, so it shows nothing about what the call would do.",
        ),
        (lambda a: [], "The tool produced no usable preview for this call."),
        (lambda a: "not a list", "The tool produced no usable preview for this call."),
        (lambda a: ["ok", 3], "The tool produced no usable preview for this call."),
    ],
    ids=["raises", "empty", "not-a-list", "not-strings"],
)
def test_a_failing_preview_shows_a_fixed_message(nrllm, previewer, expected):
    nrllm.load(
        ToolsPlugin(Counting("risky", effect=Effect.NON_IDEMPOTENT_WRITE, previewer=previewer))
    )

    (pending,) = nrllm.run("go", script=[write_turn("risky")]).pending

    assert pending.preview == (expected,)
    assert pending.preview_failed is True
    assert SECRET not in json.dumps(list(pending.preview))


# -- decisions -----------------------------------------------------------------------------------


def test_approval_resumes_the_run_to_completion(nrllm):
    read = Counting("read_notes")
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    usage = {"prompt_tokens": 7, "completion_tokens": 2}
    turns = [
        {**write_turn("read_notes", "write_note"), "usage": usage},
        {"content": "saved", "usage": usage},
    ]
    nrllm.load(ToolsPlugin(read, write))
    suspended = nrllm.run("go", script=turns)
    assert suspended.usage == Usage(prompt_tokens=7, completion_tokens=2)

    done = nrllm.approve(suspended)

    assert (done.status, done.termination_reason, done.final_content) == (
        "completed",
        "completed",
        "saved",
    )
    assert (len(read.calls), len(write.calls)) == (1, 1)
    assert write.calls == [{"text": "write_note arg"}]
    assert done.usage == Usage(prompt_tokens=14, completion_tokens=4)
    assert tool_messages(nrllm) == [
        ("call_0_0", "read_notes done"),
        ("call_0_1", "write_note done"),
    ]
    assert [r.status for r in nrllm.host.runs()] == ["completed"]
    assert nrllm.host.store.suspension(suspended.run_id) is None


def test_denial_tells_the_model_and_executes_nothing(nrllm):
    read = Counting("read_notes")
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(read, write))
    turns = [write_turn("write_note", "read_notes"), {"content": "understood"}]

    done = nrllm.deny(nrllm.run("go", script=turns))

    assert (done.status, done.final_content) == ("completed", "understood")
    assert (read.calls, write.calls) == ([], [])
    assert tool_messages(nrllm) == [
        ("call_0_0", 'Error: tool "write_note" was denied by the operator.'),
        ("call_0_1", 'Error: tool "read_notes" was denied by the operator.'),
    ]


@pytest.mark.parametrize("digest", [None, "", "0" * 64], ids=["missing", "empty", "forged"])
def test_a_missing_or_forged_digest_is_refused_and_nothing_runs(nrllm, digest):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    suspended = nrllm.run("go", script=[write_turn("write_note"), {"content": "done"}])

    with pytest.raises(ApprovalRefused):
        nrllm.host.approve(suspended.run_id, approver="bob", turn_digest=digest)

    assert write.calls == []
    assert [r.status for r in nrllm.host.runs()] == ["awaiting_approval"]
    # The refusal consumed nothing: the right digest still works.
    assert nrllm.approve(suspended).status == "completed"
    assert len(write.calls) == 1


def test_a_stale_digest_from_an_earlier_suspension_is_refused(nrllm):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    first = nrllm.run(
        "go", script=[write_turn("write_note"), write_turn("write_note"), {"content": "ok"}]
    )
    second = nrllm.approve(first)
    assert second.status == "awaiting_approval"
    assert second.run_id == first.run_id
    assert second.turn_digest != first.turn_digest
    assert len(write.calls) == 1

    with pytest.raises(ApprovalRefused, match="stale"):
        nrllm.approve(first)

    assert len(write.calls) == 1
    done = nrllm.approve(second)
    assert done.status == "completed"
    assert len(write.calls) == 2


def test_a_replayed_approval_is_refused(nrllm):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    suspended = nrllm.run("go", script=[write_turn("write_note"), {"content": "done"}])
    nrllm.approve(suspended)

    with pytest.raises(ApprovalRefused, match="not awaiting approval"):
        nrllm.approve(suspended)

    assert len(write.calls) == 1


def test_concurrent_approvals_of_one_turn_apply_exactly_once(nrllm):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    suspended = nrllm.run("go", script=[write_turn("write_note"), {"content": "done"}])
    barrier = threading.Barrier(8)
    results: list[str] = []

    def approve() -> None:
        barrier.wait()
        try:
            results.append(nrllm.approve(suspended).status)
        except ApprovalRefused:
            results.append("refused")

    threads = [threading.Thread(target=approve) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == ["completed"] + ["refused"] * 7
    assert len(write.calls) == 1


def test_an_unknown_run_is_refused(nrllm):
    with pytest.raises(ApprovalRefused, match="not awaiting approval"):
        nrllm.host.approve("no-such-run", approver="bob", turn_digest="0" * 64)


@pytest.mark.parametrize("where", ["provider", "skill"])
def test_four_eyes_refuses_the_initiator_and_accepts_another_approver(nrllm, tmp_path, where):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    script = write_script(
        tmp_path / "four-eyes.json", [write_turn("write_note"), {"content": "done"}]
    )
    provider = {"kind": "scripted", "script": str(script), "trust_zone": "local"}
    nrllm.config = {
        "providers": {"model": {**provider, "four_eyes": where == "provider"}},
        "skills": {"notes": {"allowed_tools": ["write_note"], "four_eyes": where == "skill"}},
    }
    suspended = nrllm.host.run("go", provider="model", skill="notes")

    # The fixture approves as its own actor, who started the run.
    with pytest.raises(ApprovalRefused, match="four-eyes"):
        nrllm.approve(suspended)
    assert write.calls == []

    done = nrllm.host.approve(suspended.run_id, approver="carol", turn_digest=suspended.turn_digest)
    assert done.status == "completed"
    assert len(write.calls) == 1


def test_without_four_eyes_the_initiator_may_approve(nrllm):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    suspended = nrllm.run("go", script=[write_turn("write_note"), {"content": "done"}])

    # The fixture approves as its own actor, who started the run.
    done = nrllm.approve(suspended)

    assert done.status == "completed"


def test_a_tool_disabled_between_suspend_and_resume_is_not_executed(nrllm):
    read = Counting("read_notes")
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(read, write))
    suspended = nrllm.run("go", script=[write_turn("write_note", "read_notes"), {"content": "ok"}])
    # The host reads its configuration again at the decision, as it reads a changed file.
    nrllm.config = {"tools": {"disabled": ["write_note"]}}

    done = nrllm.approve(suspended)

    assert done.status == "completed"
    assert write.calls == []
    assert len(read.calls) == 1
    assert tool_messages(nrllm) == [
        ("call_0_0", 'Error: tool "write_note" is no longer permitted and was not executed.'),
        ("call_0_1", "read_notes done"),
    ]


# -- the audit comes first -----------------------------------------------------------------------


def test_the_approval_is_audited_before_the_write_executes(nrllm):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    suspended = nrllm.run("go", script=[write_turn("write_note"), {"content": "done"}])
    nrllm.host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)

    steps = nrllm.host.store.get_run(suspended.run_id).steps

    (approval,) = [s for s in steps if s.kind == "approval"]
    (tool_step,) = [s for s in steps if s.kind == "tool"]
    assert approval.sequence < tool_step.sequence
    assert approval.payload["decision"] == "approved"
    assert approval.payload["approver"] == "bob"
    assert approval.payload["turn_digest"] == suspended.turn_digest
    assert [s.sequence for s in steps] == list(range(1, len(steps) + 1))


def test_when_the_approval_cannot_be_audited_nothing_executes(nrllm):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    nrllm.load(FailingAudit(StepKind.APPROVAL))
    suspended = nrllm.run("go", script=[write_turn("write_note"), {"content": "done"}])

    done = nrllm.approve(suspended)

    assert (done.status, done.termination_reason) == ("failed", "audit_unavailable")
    assert done.error == "the approval could not be written to the audit; nothing was executed"
    assert write.calls == []
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("failed", "audit_unavailable")


def test_a_write_whose_tool_step_cannot_be_audited_stops_the_run(nrllm):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))
    nrllm.load(FailingAudit(StepKind.TOOL, tool="write_note"))
    suspended = nrllm.run("go", script=[write_turn("write_note"), {"content": "never asked"}])
    asked_before = len(nrllm.requests)

    done = nrllm.approve(suspended)

    assert (done.status, done.termination_reason) == ("failed", "audit_unavailable")
    assert "write_note" in (done.error or "")
    assert len(nrllm.requests) == asked_before
    assert [r.status for r in nrllm.host.runs()] == ["failed"]


def test_a_read_whose_tool_step_cannot_be_audited_does_not_stop_the_run(nrllm):
    nrllm.load(ToolsPlugin(Counting("read_notes")))
    nrllm.load(FailingAudit(StepKind.TOOL))

    outcome = nrllm.run("go", script=[write_turn("read_notes"), {"content": "fine"}])

    assert (outcome.status, outcome.final_content) == ("completed", "fine")


# -- the state store at suspension ----------------------------------------------------------------


def test_a_state_store_failure_at_suspension_fails_the_run(nrllm, monkeypatch):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(write))

    def broken(self: Store, run_id: str, *, sealed: bytes, turn_digest: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(Store, "suspend_run", broken)
    outcome = nrllm.run("go", script=[write_turn("write_note"), {"content": "done"}])

    assert (outcome.status, outcome.termination_reason) == ("failed", "suspend_failed")
    assert outcome.pending == ()
    assert outcome.turn_digest is None
    assert outcome.error == "the run could not be suspended: its state could not be stored"
    assert write.calls == []
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("failed", "suspend_failed")
    assert nrllm.host.store.suspension(outcome.run_id) is None


def test_an_unusable_state_key_at_suspension_fails_the_run(tmp_path):
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    script = write_script(tmp_path / "k.json", [write_turn("write_note")])
    # Built by hand: the nrllm fixture's host has an empty environment.
    host = Host.from_config(
        data=config_data(script),
        plugins=[ToolsPlugin(write)],
        load_entry_points=False,
        data_dir=tmp_path / "home",
        # The audit chain has a key of its own, so only sealing meets the unusable one.
        environ={"NRLLM_STATE_KEY": "too-short", "NRLLM_AUDIT_KEY": "A" * 43},
    )
    try:
        outcome = host.run("go")
    finally:
        host.store.close()

    assert (outcome.status, outcome.termination_reason) == ("failed", "suspend_failed")
    assert write.calls == []


# -- a second OS process -------------------------------------------------------------------------

PLUGIN_MODULE = '''
"""An in-test plugin with a writing tool that appends a line to a file."""

from pathlib import Path

from nrllm_core import DataClass, Effect, ToolRegistry, ToolResult, hookimpl, tool


@tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE, data_class=DataClass.PUBLIC_CONTENT)
def append_line(path: str, text: str) -> ToolResult:
    """Append a line of text to a file."""
    with Path(path).open("a", encoding="utf-8") as handle:
        handle.write(text + "\\n")
    return ToolResult.text("appended")


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    registry.register(append_line)
'''


def install_plugin(site: Path, name: str) -> None:
    """A distribution on ``sys.path`` without pip: a module and its ``.dist-info``."""
    site.mkdir(parents=True, exist_ok=True)
    (site / f"{name}.py").write_text(PLUGIN_MODULE, encoding="utf-8")
    info = site / f"{name}-0.0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(f"[nrllm]\n{name} = {name}\n", encoding="utf-8")


def test_a_run_suspended_here_is_approved_and_completed_by_another_process(tmp_path, monkeypatch):
    # Built by hand: the other process finds the plugin through its installed entry point.
    name = f"nrllm_e2e_{uuid.uuid4().hex[:8]}"
    home = tmp_path / "home"
    site = tmp_path / "site"
    install_plugin(site, name)
    monkeypatch.syspath_prepend(str(site))
    import importlib

    plugin = importlib.import_module(name)
    target = tmp_path / "written.txt"
    script = tmp_path / "turns.toml"
    script.write_text(
        textwrap.dedent(
            f"""
            [[turns]]
            content = "appending"
            tool_calls = [
                {{name = "append_line", arguments = {{path = "{target}", text = "hello"}}}},
            ]
            [[turns]]
            content = "the line is written"
            """
        ),
        encoding="utf-8",
    )
    config = tmp_path / "nrllm.toml"
    config.write_text(
        textwrap.dedent(
            """
            [actor]
            id = "alice"
            [defaults]
            provider = "model"
            [providers.model]
            kind = "scripted"
            script = "turns.toml"
            trust_zone = "local"
            """
        ),
        encoding="utf-8",
    )
    host = Host.from_config(
        config, plugins=[plugin], load_entry_points=False, data_dir=home, environ={}
    )
    try:
        suspended = host.run("write it")
        assert suspended.status == "awaiting_approval"
        assert not target.exists()

        env = {k: v for k, v in os.environ.items() if not k.startswith("NRLLM_")}
        env.update(NRLLM_HOME=str(home), NRLLM_LOAD_PLUGINS=name, PYTHONPATH=str(site))
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "nrllm_core",
                "--config",
                str(config),
                "approve",
                suspended.run_id,
                "--digest",
                suspended.turn_digest,
                "--as",
                "bob",
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["status"] == "completed"
        assert report["final_content"] == "the line is written"
        assert report["run_id"] == suspended.run_id
        assert target.read_text(encoding="utf-8") == "hello\n"
        (info,) = host.runs()
        assert info.status == "completed"
        steps = host.store.get_run(suspended.run_id).steps
        assert [s.kind for s in steps] == [
            "start",
            "gate",
            "request",
            "llm",
            "suspension",
            "start",
            "approval",
            "tool",
            "request",
            "llm",
            "finish",
        ]
        assert [s.sequence for s in steps] == list(range(1, 12))
    finally:
        host.store.close()


# -- concurrency ---------------------------------------------------------------------------------


def test_twenty_runs_at_once_against_one_store_all_complete_gap_free(backend, tmp_path):
    read = Counting("read_notes")
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
    turns = [write_turn("read_notes"), write_turn("write_note"), {"content": "done"}]
    data = config_data(write_script(tmp_path / "many.json", turns))
    # Built by hand: the nrllm fixture's store is SQLite only.
    data["store"] = {"url": backend.url} if backend.url else {}
    host = Host.from_config(
        data=data,
        plugins=[ToolsPlugin(read, write)],
        load_entry_points=False,
        data_dir=backend.data_dir,
        environ={},
    )
    barrier = threading.Barrier(20)
    outcomes: list[Any] = []
    errors: list[BaseException] = []

    def one_run() -> None:
        try:
            barrier.wait()
            suspended = host.run("go")
            outcomes.append(
                host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)
            )
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=one_run) for _ in range(20)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

        assert errors == []
        assert [o.status for o in outcomes] == ["completed"] * 20
        assert (len(read.calls), len(write.calls)) == (20, 20)
        runs = host.runs()
        assert len(runs) == 20
        for info in runs:
            assert info.status == "completed"
            steps = host.store.get_run(info.run_id).steps
            assert [s.sequence for s in steps] == list(range(1, len(steps) + 1))
            assert [s.kind for s in steps].count("approval") == 1
            assert info.steps == len(steps) == 14
    finally:
        host.store.close()


def test_a_gated_direct_call_records_the_gate_decision_then_the_refusal(nrllm):
    class Secrets(Tool):
        name = "secrets"
        description = "Reads the vault."
        group = "accounts"
        executed = 0

        def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
            Secrets.executed += 1
            return ToolResult.text("the vault")

    nrllm.load(ToolsPlugin(Secrets()))

    wire = nrllm.host.invoke("secrets", {}, provider=nrllm.scripted([]))

    assert (wire.content, wire.is_error) == ('Error: tool "secrets" not permitted', True)
    assert Secrets.executed == 0
    (info,) = nrllm.host.runs()
    detail = nrllm.host.store.get_run(info.run_id)
    assert detail is not None
    assert [s.kind for s in detail.steps] == ["start", "gate", "tool", "finish"]
    assert [(d.tool, d.reason, d.zone) for d in detail.decisions] == [
        ("secrets", "trustZone", "externalGlobal")
    ]


# -- hardening: what a reviewer broke, pinned -----------------------------------------------------


def test_a_write_switched_on_mid_turn_still_waits_for_approval(nrllm):
    """The approval scan asks what the run was offered, not the live configuration: a tool
    switched on between the scan and execution can never run unapproved."""
    wipe = Counting("wipe", effect=Effect.NON_IDEMPOTENT_WRITE)

    class Enabler(Counting):
        def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
            # The host reads its configuration on each use, as it reads a changed file.
            nrllm.config = {"tools": {"disabled": []}}
            return super().execute(arguments, context)

    nrllm.config = {"tools": {"disabled": ["wipe"]}}
    slow_read = Enabler("slow_read")
    nrllm.load(ToolsPlugin(slow_read, wipe))

    outcome = nrllm.run(
        "go", script=[{"tool_calls": [call("slow_read"), call("wipe")]}, {"content": "done"}]
    )

    assert len(slow_read.calls) == 1
    assert wipe.calls == []
    assert outcome.status == "completed"
    (info,) = nrllm.host.runs()
    steps = nrllm.host.store.get_run(info.run_id).steps
    tool_steps = [s.payload for s in steps if s.kind == "tool"]
    assert [p["tool_name"] for p in tool_steps] == ["slow_read", "wipe"]
    assert tool_steps[1]["tool_is_error"] is True


def test_a_denied_turns_state_put_back_cannot_be_approved_later(nrllm):
    wipe = Counting("wipe_prod", effect=Effect.NON_IDEMPOTENT_WRITE)
    touch = Counting("touch_file", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(wipe, touch))
    first = nrllm.run(
        "go",
        script=[
            {"tool_calls": [call("wipe_prod")]},
            {"tool_calls": [call("touch_file")]},
            {"content": "done"},
        ],
    )
    old_sealed = nrllm.host.store.suspension(first.run_id).sealed
    second = nrllm.deny(first)
    assert second.status == "awaiting_approval"
    # Someone with write access to the database, but not the key, puts the old state back.
    with sqlite3.connect(nrllm.folder / "nrllm.db") as db:
        db.execute("UPDATE suspensions SET sealed = ? WHERE run_id = ?", (old_sealed, first.run_id))
    db.close()

    with pytest.raises(ApprovalRefused, match="cannot be opened"):
        nrllm.approve(second)
    assert wipe.calls == []
    assert touch.calls == []


def test_a_failing_live_viewer_cannot_keep_a_step_from_the_audit(nrllm):
    nrllm.load(ToolsPlugin(Counting("lookup")))
    model = nrllm.scripted([{"tool_calls": [call("lookup")]}, {"content": "done"}])

    def viewer(event: Any) -> None:
        if event.step.kind is StepKind.TOOL:
            raise RuntimeError("the browser went away")

    outcome = nrllm.host.run("go", provider=model, on_event=viewer)

    assert outcome.status == "completed"
    detail = nrllm.host.store.get_run(outcome.run_id)
    assert "tool" in [s.kind for s in detail.steps]


def test_a_refusal_sent_to_the_model_is_bounded_and_reaches_the_wire_sinks(nrllm):
    nrllm.load(ToolsPlugin(Counting("wipe", effect=Effect.NON_IDEMPOTENT_WRITE)))
    invented = "x" * 200_000
    outcome = nrllm.run(
        "go",
        script=[
            {"tool_calls": [call("wipe"), {"name": invented, "arguments": {}}]},
            {"content": "ok"},
        ],
    )
    nrllm.deny(outcome)

    sizes = [len(content.encode()) for _, content in tool_messages(nrllm)]
    assert max(sizes) <= 50_000
    assert len(nrllm.sinks.wire) == 2
    assert all(w.is_error for w in nrllm.sinks.wire)


def test_an_unexpected_failure_settles_the_run_instead_of_leaving_it_running(nrllm, monkeypatch):
    nrllm.load(ToolsPlugin(Counting("lookup")))

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk unplugged at /secret/path")

    # A failure outside every guard of the loop: the store refuses a write mid-run.
    monkeypatch.setattr(Store, "record_decisions", broken)
    outcome = nrllm.run("go", script=[{"tool_calls": [call("lookup")]}, {"content": "done"}])

    assert (outcome.status, outcome.termination_reason) == ("failed", "internal_error")
    assert outcome.error == "the run failed unexpectedly (OSError); the log has the details"
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("failed", "internal_error")


def test_a_configuration_file_that_disappears_refuses_every_tool(tmp_path, monkeypatch):
    from nrllm_core._config import ConfigError, config_loader

    monkeypatch.chdir(tmp_path)
    (tmp_path / "nrllm.toml").write_text('[tools]\ndisabled = ["wipe"]\n', encoding="utf-8")
    load = config_loader()
    assert list(load().tools.disabled) == ["wipe"]
    (tmp_path / "nrllm.toml").unlink()
    with pytest.raises(ConfigError, match="gone"):
        load()


def test_a_model_chosen_tool_name_is_masked_in_the_metadata_audit(nrllm):
    secret = "sk-proj-" + "A1b2C3d4" * 5
    nrllm.load(ToolsPlugin(Counting("lookup")))
    outcome = nrllm.run(
        "go",
        script=[
            {"tool_calls": [{"id": "call-1", "name": f"tool-{secret}", "arguments": {}}]},
            {"content": "done"},
        ],
    )
    stored = json.dumps([s.payload for s in nrllm.host.store.get_run(outcome.run_id).steps])
    assert secret not in stored
    assert "***" in stored

"""When each audit step becomes durable: the guarded steps commit before what they guard, the
others ride with the run's next guarded write; how many transactions a run makes; and what a
process killed at random points leaves behind (on SQLite and PostgreSQL)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text
from structlog.testing import capture_logs

from nrllm_core import (
    DataClass,
    Host,
    RunRecorder,
    RunStep,
    StepKind,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
    tool,
)
from nrllm_core._privacy import PrivacyLevel, audit_view_for
from nrllm_core.store import GateDecisionRecord, RunStatus, Store, StoreAuditSink

ROOT = Path(__file__).resolve().parents[1]

LOOKUP_TURNS = [
    {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"term": "pluggy"}}]},
    {"content": "pluggy: found"},
]


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
def lookup(term: str) -> ToolResult:
    """Look a term up."""
    return ToolResult.text(f"{term}: found")


@tool(group="content", data_class=DataClass.SOURCE_CODE)
def read_source(path: str) -> ToolResult:
    """Read a source file (withheld from an external zone: a gate decision to store)."""
    return ToolResult.text(path)


class _Tools:
    def __init__(self, *tools: Any) -> None:
        self.tools = tools

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        for each in self.tools:
            registry.register(each)


def _host(backend: Any, *tools: Any) -> Host:
    script = backend.data_dir / "script.json"
    script.write_text(json.dumps({"turns": LOOKUP_TURNS}), encoding="utf-8")
    return Host.from_config(
        data={
            "providers": {
                "model": {"kind": "scripted", "script": str(script), "trust_zone": "externalGlobal"}
            },
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
            "privacy": {"level": "metadata"},
            **({"store": {"url": backend.url}} if backend.url else {}),
        },
        pm=make_plugin_manager(plugins=[_Tools(*tools)], load_entry_points=False),
        data_dir=backend.data_dir,
        environ={},
    )


@pytest.fixture
def host(backend: Any) -> Iterator[Host]:
    opened = _host(backend, lookup)
    yield opened
    opened.store.close()


@pytest.fixture
def sync_store(backend: Any) -> Iterator[Store]:
    opened = backend.open()
    yield opened
    opened.close()


# The run's start; the request (with the start and gate steps and the gate decisions); the
# model's answer naming the call; the call's step; the second request; the run's settling (with
# the final answer and the finish step). Each guarded step commits before what it guards.
# Before: 8 and 9, the answers and the finish step each on their own; then 6 and 7, the gate
# decisions on their own.
@pytest.mark.usefixtures("driven")
@pytest.mark.parametrize("withheld", [False, True])
def test_a_run_with_a_tool_call_makes_six_transactions(backend: Any, withheld: bool) -> None:
    host = _host(backend, lookup, *([read_source] if withheld else []))
    try:
        host.run("look up pluggy")
        commits: list[object] = []
        event.listen(host.store._engine, "commit", commits.append)

        outcome = host.run("look up pluggy")

        assert outcome.status == "completed"
        assert len(commits) == 6
        detail = host.store.get_run(outcome.run_id)
        assert detail is not None
        kinds = [s.kind for s in detail.steps]
        assert kinds == ["start", "gate", "request", "llm", "tool", "request", "llm", "finish"]
        assert [d.tool for d in detail.decisions] == (["read_source"] if withheld else [])
        assert host.store.verify(outcome.run_id).broken == ()
    finally:
        host.store.close()


def test_a_gated_direct_call_stores_its_gate_decisions_with_its_call(backend: Any) -> None:
    host = _host(backend, read_source)
    try:
        host.invoke("read_source", {"path": "a.py"}, provider="model")
        commits: list[object] = []
        event.listen(host.store._engine, "commit", commits.append)

        wire = host.invoke("read_source", {"path": "a.py"}, provider="model")

        assert wire.is_error
        # The run's start; the refused call's step (with the start and gate steps and the gate
        # decision); the settling (with the finish step). Before: 4, the decision on its own.
        assert len(commits) == 3
        run_id = host.runs()[0].run_id
        detail = host.store.get_run(run_id)
        assert detail is not None
        assert [s.kind for s in detail.steps] == ["start", "gate", "tool", "finish"]
        assert [(d.tool, d.reason) for d in detail.decisions] == [("read_source", "trustZone")]
    finally:
        host.store.close()


@pytest.mark.usefixtures("driven")
def test_the_final_step_is_durable_when_the_run_returns(host: Host, backend: Any) -> None:
    outcome = host.run("look up pluggy")

    # Read through another store on the same database: nothing of the run waits in memory.
    other = backend.open()
    try:
        detail = other.get_run(outcome.run_id)
        assert other.verify(outcome.run_id).broken == ()
    finally:
        other.close()
    assert detail is not None
    assert detail.run.status is RunStatus.COMPLETED
    assert [s.kind for s in detail.steps][-2:] == ["llm", "finish"]
    assert detail.steps[-1].payload["status"] == "completed"


def _break_head(host: Host, run_id: str) -> None:
    with host.store._engine.begin() as connection:
        connection.execute(
            text("UPDATE runs SET chain_head = :h WHERE id = :r"), {"h": "0" * 64, "r": run_id}
        )


@pytest.mark.usefixtures("driven")
def test_a_settle_whose_waiting_steps_cannot_be_stored_still_commits(
    host: Host, backend: Any
) -> None:
    """The final answer waits for the settling; a chain head broken meanwhile fails that
    write. The settle is tried again alone, and the run ends failed, never left running."""

    def breaking(event: Any) -> None:
        if event.step.kind is StepKind.LLM and not event.step.fields.get("requested_tool_calls"):
            _break_head(host, event.run_id)

    with capture_logs() as logs:
        outcome = host.run("look up pluggy", on_event=breaking)

    assert (outcome.status, outcome.termination_reason) == ("failed", "audit_unavailable")
    assert outcome.error == "the run's last steps could not be written to the audit"
    (info,) = host.runs()
    assert (info.status, info.termination_reason) == (RunStatus.FAILED, "audit_unavailable")
    (lost,) = [e for e in logs if e["event"] == "nrllm.store.steps_unstored"]
    assert (lost["kinds"], lost["count"]) == (["llm", "finish"], 2)
    # Names and numbers only: nothing of the answer reaches the log.
    assert "pluggy" not in repr(lost)
    assert host.store.unstored_steps == 2


def test_a_failing_settle_after_a_crash_still_settles(backend: Any) -> None:
    """A run that was failing already keeps its own reason."""
    store = backend.open()
    try:
        pm = make_plugin_manager(plugins=[StoreAuditSink(store)], load_entry_points=False)
        store.start_run("r1")
        RunRecorder(pm, "r1").record(_step(StepKind.START, run_kind="run"))
        with store._engine.begin() as connection:
            connection.execute(text("UPDATE runs SET chain_head = 'x' WHERE id = 'r1'"))
        with pytest.raises(ValueError, match="does not hold"):
            store.finish_run("r1", RunStatus.FAILED, "internal_error")
        # The failed write took the waiting step with it: the settle alone commits.
        assert store.finish_run("r1", RunStatus.FAILED, "internal_error")
        detail = store.get_run("r1")
        assert detail is not None
        assert (detail.run.status, detail.run.termination_reason) == (
            RunStatus.FAILED,
            "internal_error",
        )
    finally:
        store.close()


def _step(kind: StepKind, **fields: Any) -> RunStep:
    return RunStep(kind=kind, round=1, duration_ms=1.0, fields=fields)


_CALLS = [{"id": "c1", "name": "lookup", "arguments": {"term": "x"}}]
# (step, committed at once): the guarded steps, then those that guard nothing.
_STEPS = [
    (_step(StepKind.REQUEST, messages_sent=[], tool_specs=[], tool_choice="auto"), True),
    (_step(StepKind.LLM, content="", requested_tool_calls=_CALLS), True),
    (_step(StepKind.TOOL, tool_call_id="c1", tool_name="lookup", tool_is_error=False), True),
    (_step(StepKind.APPROVAL, decision="approved", approver="bob", turn_digest="d"), True),
    (_step(StepKind.SUSPENSION, turn_digest="d", pending_calls=[]), True),
    (_step(StepKind.START, run_kind="run"), False),
    (_step(StepKind.GATE, offered=["lookup"]), False),
    (_step(StepKind.LLM, content="the answer", requested_tool_calls=None), False),
    (_step(StepKind.FINISH, status="completed", termination_reason="completed"), False),
]


@pytest.mark.parametrize("level", list(PrivacyLevel))
@pytest.mark.parametrize(
    ("step", "guarded"), _STEPS, ids=[f"{s.kind}-{'guarded' if g else 'waits'}" for s, g in _STEPS]
)
def test_the_audit_sink_commits_a_guarded_step_before_it_returns(
    sync_store: Store, level: PrivacyLevel, step: RunStep, guarded: bool
) -> None:
    pm = make_plugin_manager(plugins=[StoreAuditSink(sync_store)], load_entry_points=False)
    sync_store.start_run("r1")
    recorder = RunRecorder(pm, "r1", audit_view=audit_view_for(level))

    assert recorder.record(step)

    stored = sync_store.get_run("r1")
    assert stored is not None
    assert [s.kind for s in stored.steps] == ([step.kind.value] if guarded else [])
    # One that waited is committed with the run's settling.
    sync_store.finish_run("r1", RunStatus.COMPLETED)
    stored = sync_store.get_run("r1")
    assert stored is not None
    assert [s.kind for s in stored.steps] == [step.kind.value]
    assert sync_store.verify("r1").broken == ()


def test_whether_a_step_waits_is_read_from_the_step_not_from_what_the_filter_kept(
    sync_store: Store,
) -> None:
    pm = make_plugin_manager(plugins=[StoreAuditSink(sync_store)], load_entry_points=False)
    sync_store.start_run("r1")
    # A filter that keeps none of the keys that name the calls.
    recorder = RunRecorder(pm, "r1", audit_view=lambda step: {"kept": "nothing"})

    assert recorder.record(_step(StepKind.LLM, content="", requested_tool_calls=_CALLS))

    stored = sync_store.get_run("r1")
    assert stored is not None
    assert [s.kind for s in stored.steps] == ["llm"]


def test_closing_the_store_commits_the_steps_waiting_for_their_runs_next_write(
    sync_store: Store, backend: Any
) -> None:
    for run_id in ("r1", "r2"):
        sync_store.start_run(run_id)
        sync_store.record_step(_record(run_id, 1), deferred=True)
        sync_store.record_step(_record(run_id, 2), deferred=True)

    sync_store.close()

    reopened = backend.open()
    try:
        for run_id in ("r1", "r2"):
            detail = reopened.get_run(run_id)
            assert detail is not None
            assert [s.sequence for s in detail.steps] == [1, 2]
        assert reopened.verify().broken == ()
    finally:
        reopened.close()


def test_closing_the_store_commits_the_gate_decisions_waiting_for_their_runs_next_write(
    sync_store: Store, backend: Any
) -> None:
    decisions = [GateDecisionRecord(tool="wipe", reason="disabled")]
    sync_store.start_run("r1")
    sync_store.record_decisions("r1", decisions, deferred=True)

    sync_store.close()

    reopened = backend.open()
    try:
        detail = reopened.get_run("r1")
        assert detail is not None
        assert list(detail.decisions) == decisions
    finally:
        reopened.close()


def test_closing_the_store_commits_each_run_on_its_own(sync_store: Store, backend: Any) -> None:
    sync_store.start_run("r1")
    sync_store.start_run("r2")
    sync_store.record_step(_record("r1", 1))
    # Taken already: this run's waiting steps fail, the other run's are still committed.
    sync_store.record_step(_record("r1", 1), deferred=True)
    sync_store.record_step(_record("r2", 1), deferred=True)

    with capture_logs() as logs:
        sync_store.close()

    assert [(e["event"], e["run_id"]) for e in logs] == [("nrllm.store.unstored_at_close", "r1")]

    reopened = backend.open()
    try:
        r2 = reopened.get_run("r2")
        assert r2 is not None
        assert [s.sequence for s in r2.steps] == [1]
        assert reopened.verify().broken == ()
    finally:
        reopened.close()


def test_a_purged_run_leaves_no_step_waiting(backend: Any) -> None:
    now = datetime(2030, 6, 1, tzinfo=UTC)
    store = backend.open(clock=lambda: now)
    store.start_run("dead")
    store.record_step(_record("dead", 1), deferred=True)
    now += timedelta(days=3)

    assert store.purge(1, 1).unfinished == 1
    with capture_logs() as logs:
        store.close()

    assert logs == []


def test_every_statement_of_a_run_is_built_and_compiled_once(
    backend: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from nrllm_core.store import _operations

    host = _host(backend, lookup, read_source)
    host.run("look up pluggy")
    built: list[list[object]] = []
    executed: list[tuple[str, str, bool]] = []
    # The statements every step makes go through ``execute_rows``: on SQLite past SQLAlchemy's
    # execution, through the driver's cursor, with the SQL compiled once.
    rows_of: list[tuple[object, int]] = []

    def statement(conn: Any, element: Any, *args: Any) -> None:
        built[-1].append(element)

    def compiled(conn: Any, cursor: Any, text: str, params: Any, context: Any, many: Any) -> None:
        executed.append((text.split()[0], context._get_cache_stats(), many))

    def execute_rows(connection: Any, element: Any, rows: Any) -> int:
        built[-1].append(element)
        rows_of.append((element, len(rows)))
        return real_execute_rows(connection, element, rows)

    real_execute_rows = _operations.execute_rows
    monkeypatch.setattr(_operations, "execute_rows", execute_rows)
    event.listen(host.store._engine, "before_execute", statement)
    event.listen(host.store._engine, "after_cursor_execute", compiled)
    try:
        for _ in range(2):
            built.append([])
            host.run("look up pluggy")
    finally:
        host.store.close()

    # The same statement objects each run: none is composed again per call.
    assert len(built[0]) == len(built[1]) > 0
    assert all(a is b for a, b in zip(*built, strict=True))
    assert all(stats.startswith("cached since") for _, stats, _ in executed), executed
    # The steps a transaction commits go in one statement: the first request carries three.
    assert (_operations._INSERT_STEP, 3) in rows_of
    if backend.url is not None:
        assert any(verb == "INSERT" and many for verb, _, many in executed)


def _record(run_id: str, sequence: int) -> Any:
    from nrllm_core import AuditRecord

    return AuditRecord(
        run_id=run_id,
        sequence=sequence,
        kind=StepKind.TOOL,
        round=1,
        duration_ms=1.0,
        payload={"kind": "tool", "round": 1},
    )


# The child: hosts doing runs in a loop, printing a line once each guarded step's commit has
# returned (a sink called after the store's), and once each run has returned.
_CHILD = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path

    import anyio

    from nrllm_core import (
        AsyncHost, DataClass, Effect, Host, Tool, ToolRegistry, ToolResult, hookimpl,
        make_plugin_manager, tool,
    )

    url, folder = sys.argv[1] or None, Path(sys.argv[2])
    GUARDED = {"request", "tool", "approval", "suspension"}

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    def lookup(term: str) -> ToolResult:
        "Look a term up."
        return ToolResult.text(f"{term}: found")

    class Write(Tool):
        name = "write_note"
        description = "Writes a note."
        group = "content"
        data_class = DataClass.EDITOR_CONTENT
        effect = Effect.NON_IDEMPOTENT_WRITE
        requires_approval = True
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

        def execute(self, arguments, context):
            return ToolResult.text("written")

    class Printer:
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(lookup)
            registry.register(Write())

        @hookimpl(trylast=True)
        def nrllm_audit(self, record) -> None:
            kind = record.kind.value
            if kind in GUARDED or (kind == "llm" and record.payload.get("requested_tool_names")):
                print("step", record.run_id, record.sequence, kind, flush=True)
                # The kill most likely lands here, just after a promise.
                time.sleep(0.01)

    def script(name, turns):
        path = folder / f"{name}.json"
        path.write_text(json.dumps({"turns": turns}), encoding="utf-8")
        return {"kind": "scripted", "script": str(path)}

    call = {"id": "c1", "name": "lookup", "arguments": {"term": "pluggy"}}
    write = {"id": "w1", "name": "write_note", "arguments": {"text": "a note"}}
    host = Host.from_config(
        data={
            "providers": {
                "model": script("model", [{"tool_calls": [call]}, {"content": "found"}]),
                "writer": script("writer", [{"tool_calls": [write]}, {"content": "done"}]),
            },
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
            **({"store": {"url": url}} if url else {}),
        },
        pm=make_plugin_manager(plugins=[Printer()], load_entry_points=False),
        data_dir=folder,
        environ={},
    )

    def settled(outcome):
        print("run", outcome.run_id, outcome.status, flush=True)

    while True:
        settled(host.run("look up pluggy"))
        settled(anyio.run(AsyncHost(host).run, "look up pluggy"))
        host.invoke("lookup", {"term": "direct"})
        suspended = host.run("write a note", provider="writer")
        settled(suspended)
        settled(host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest))
    """
)


def _killed(child: str, backend: Any, lines: int, delay: float = 0.0) -> list[list[str]]:
    """Start ``child`` on ``backend``, SIGKILL it ``delay`` seconds after it has printed
    ``lines`` lines, and return every complete line it printed before it died, split."""
    with subprocess.Popen(
        [sys.executable, "-c", child, backend.url or "", str(backend.data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as process:
        assert process.stdout is not None
        assert process.stderr is not None
        printed = []
        try:
            for line in process.stdout:
                printed.append(line)
                if len(printed) >= lines:
                    time.sleep(delay)
                    break
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=60)
        # Under load the child runs ahead of this reader: what it printed before the kill is
        # still in the pipe.
        printed.extend(process.stdout)
        stderr = process.stderr.read()
    assert process.returncode == -signal.SIGKILL, stderr
    assert len(printed) >= lines, stderr
    # A line cut short by the kill was never fully printed, so never promised.
    return [line.split() for line in printed if line.endswith("\n")]


_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from nrllm_core import AuditRecord, StepKind
    from nrllm_core.store import Store

    url = sys.argv[1] or None
    store = Store.open(url, data_dir=Path(sys.argv[2]), lease_seconds=1)
    store.start_run("victim")
    sequence = 0
    while True:
        sequence += 1
        store.record_step(
            AuditRecord(
                run_id="victim", sequence=sequence, kind=StepKind.TOOL, round=1,
                duration_ms=1.0, payload={"kind": "tool", "n": sequence, "pad": "x" * 500},
            )
        )
        print(sequence, flush=True)
    """
)


def test_a_killed_run_keeps_every_committed_step_and_shows_interrupted(backend: Any) -> None:
    committed = max(int(number) for (number,) in _killed(_KILLED_WRITER, backend, 300))
    assert committed >= 300

    if backend.name == "sqlite":
        with sqlite3.connect(backend.data_dir / "nrllm.db") as connection:
            assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    later = datetime.now(UTC) + timedelta(hours=1)
    store = backend.open(clock=lambda: later)
    try:
        detail = store.get_run("victim")
    finally:
        store.close()
    assert detail is not None
    assert detail.run.status is RunStatus.INTERRUPTED
    sequences = [s.sequence for s in detail.steps]
    # Every step reported as recorded is there; one more may have committed before the kill.
    assert sequences == list(range(1, len(sequences) + 1))
    assert len(sequences) in (committed, committed + 1)
    assert all(s.payload["n"] == s.sequence for s in detail.steps)


def test_a_process_killed_at_random_points_loses_no_guarded_step(backend: Any) -> None:
    seed = random.randrange(2**32)
    chosen = random.Random(seed)
    printed = [
        line
        for delay in (0.0, chosen.uniform(0, 0.05), chosen.uniform(0, 0.2))
        for line in _killed(_CHILD, backend, chosen.randint(5, 100), delay)
    ]

    # Later than any lease: a run a kill cut short now shows as interrupted.
    later = datetime.now(UTC) + timedelta(hours=1)
    store = backend.open(clock=lambda: later)
    try:
        check = store.verify()
        runs = {run.run_id: store.get_run(run.run_id) for run in store.list_runs()}
    finally:
        store.close()
    assert check.broken == (), seed
    assert check.runs_checked == len(runs) > 4, seed
    for line in printed:
        if line[0] == "step":
            _, run_id, sequence, kind = line
            detail = runs[run_id]
            assert detail is not None, (seed, line)
            assert len(detail.steps) >= int(sequence), (seed, line)
            assert detail.steps[int(sequence) - 1].kind == kind, (seed, line)
        else:
            _, run_id, status = line
            detail = runs[run_id]
            assert detail is not None, (seed, line)
            last = detail.steps[-1]
            if status == "completed":
                assert last.kind == "finish", (seed, line)
            else:
                assert status == "awaiting_approval", (seed, line)
                assert any(s.kind == "suspension" for s in detail.steps), (seed, line)
    for detail in runs.values():
        assert detail is not None
        # What a kill took is the end of a run, never a step in its middle.
        assert [s.sequence for s in detail.steps] == list(range(1, detail.run.steps + 1)), seed
        assert detail.run.status in {
            RunStatus.COMPLETED,
            RunStatus.AWAITING_APPROVAL,
            RunStatus.INTERRUPTED,
        }, seed

"""The audit store, the same suite on SQLite and on PostgreSQL."""

from __future__ import annotations

import math
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from nrllm_core import AuditRecord, RunRecorder, StepKind, make_plugin_manager
from nrllm_core._privacy import PrivacyLevel, audit_view_for, privacy_view
from nrllm_core.store import (
    GateDecisionRecord,
    RunKind,
    RunStatus,
    SchemaOutdatedError,
    Store,
    StoreAuditSink,
)

ROOT = Path(__file__).resolve().parents[1]


class Clock:
    """A settable clock, so leases and retention windows need no sleeping."""

    def __init__(self) -> None:
        self.now = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(backend: Any, clock: Clock) -> Iterator[Store]:
    opened = backend.open(lease_seconds=60, clock=clock)
    yield opened
    opened.close()


def record(run_id: str, sequence: int, **payload: Any) -> AuditRecord:
    return AuditRecord(
        run_id=run_id,
        sequence=sequence,
        kind=StepKind.TOOL,
        round=1,
        duration_ms=2.5,
        payload={"kind": "tool", "round": 1, **payload},
    )


def test_a_new_database_is_created_at_the_latest_schema(backend: Any) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import inspect

    from nrllm_core.store._database import head_revisions
    from nrllm_core.store._models import METADATA

    store = backend.open()
    try:
        with store._engine.connect() as connection:
            context = MigrationContext.configure(connection)
            assert set(context.get_current_heads()) == head_revisions()
            # The shipped migrations and the models describe the same tables; the tool-name
            # index is an expression per backend, which the models leave to migration 0007.
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", ".*expression-based index ix_run_steps_tool")
                differences = compare_metadata(context, METADATA)
            # PostgreSQL reflects the expression index, which the models do not hold.
            assert [
                d
                for d in differences
                if not (d[0] == "remove_index" and d[1].name == "ix_run_steps_tool_name")
            ] == []
            # Reflection skips an expression index: the catalogue is asked by name.
            catalogue = (
                "SELECT indexname FROM pg_indexes WHERE tablename = 'run_steps'"
                if connection.dialect.name == "postgresql"
                else "SELECT name FROM sqlite_master WHERE tbl_name = 'run_steps'"
            )
            assert "ix_run_steps_tool_name" in connection.exec_driver_sql(catalogue).scalars().all()
            # The comparison leaves out an index's condition: the expiry index is partial, on
            # open turns, on each backend.
            definition = (
                "SELECT indexdef FROM pg_indexes"
                if connection.dialect.name == "postgresql"
                else "SELECT sql FROM sqlite_master"
            )
            where = "indexname" if connection.dialect.name == "postgresql" else "name"
            (expiry,) = connection.exec_driver_sql(
                f"{definition} WHERE {where} = 'ix_suspensions_open_expires_at'"
            ).scalars()
            # PostgreSQL writes the condition in parentheses, SQLite as it was given.
            assert "WHERE decided_at IS NULL" in expiry.replace("(", "").replace(")", ""), expiry
            columns = {c["name"] for c in inspect(connection).get_columns("gate_decisions")}
    finally:
        store.close()
    assert columns == {
        "id",
        "run_id",
        "tool",
        "reason",
        "zone",
        "ceiling",
        "observed",
        "decided_at",
    }


def test_an_outdated_database_is_refused(backend: Any) -> None:
    from sqlalchemy import text

    store = backend.open()
    with store._engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    store.close()

    with pytest.raises(SchemaOutdatedError, match="nrllm db upgrade"):
        backend.open()


def test_steps_read_back_in_order_with_run_totals(store: Store, clock: Clock) -> None:
    store.start_run("r1", provider="ollama", zone="local", skill="edit", actor="ana")
    for sequence in (1, 2, 3):
        clock.advance(seconds=1)
        store.record_step(record("r1", sequence, prompt_tokens=10, completion_tokens=sequence))
    store.record_step(record("r1", 4, prompt_tokens=True, completion_tokens=-5))

    detail = store.get_run("r1")

    assert detail is not None
    assert [s.sequence for s in detail.steps] == [1, 2, 3, 4]
    first = detail.steps[0]
    assert (first.kind, first.round, first.duration_ms) == ("tool", 1, 2.5)
    assert first.payload == {
        "kind": "tool",
        "round": 1,
        "prompt_tokens": 10,
        "completion_tokens": 1,
    }
    # Each step keeps when it was written, in UTC; to_dict gives it in ISO 8601.
    start = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
    assert [s.recorded_at for s in detail.steps] == [
        start + timedelta(seconds=1),
        start + timedelta(seconds=2),
        start + timedelta(seconds=3),
        start + timedelta(seconds=3),
    ]
    assert first.to_dict() == {
        "sequence": 1,
        "kind": "tool",
        "round": 1,
        "duration_ms": 2.5,
        "payload": dict(first.payload),
        "recorded_at": "2030-06-01T12:00:01+00:00",
    }
    run = detail.run
    assert (run.run_id, run.kind, run.status) == ("r1", RunKind.RUN, RunStatus.RUNNING)
    assert (run.provider, run.zone, run.skill, run.actor) == ("ollama", "local", "edit", "ana")
    assert (run.steps, run.prompt_tokens, run.completion_tokens) == (4, 30, 6)
    assert run.started_at == datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
    assert run.ended_at is None


def test_a_step_that_cannot_be_stored_raises(store: Store) -> None:
    store.start_run("r1")
    store.record_step(record("r1", 1))

    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store.record_step(record("r1", 1))
    with pytest.raises(LookupError, match='no run "nope"'):
        store.record_step(record("nope", 1))
    with pytest.raises(ValueError, match="NaN"):
        store.record_step(record("r1", 2, cost=math.nan))
    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store.start_run("r1")

    detail = store.get_run("r1")
    assert detail is not None
    assert [s.sequence for s in detail.steps] == [1]
    assert detail.run.steps == 1


def test_the_sink_writes_through_the_store_and_reports_a_failure(store: Store) -> None:
    pm = make_plugin_manager(plugins=[StoreAuditSink(store)], load_entry_points=False)
    store.start_run("r1")

    assert pm.emit_audit(record("r1", 1, tool_name="x"))
    with capture_logs() as logs:
        assert not pm.emit_audit(record("unknown-run", 1))

    detail = store.get_run("r1")
    assert detail is not None
    assert [s.payload["tool_name"] for s in detail.steps] == ["x"]
    assert [e["event"] for e in logs] == ["nrllm.sink.failed"]
    assert logs[0]["hook"] == "nrllm_audit"


@pytest.mark.parametrize("level", list(PrivacyLevel))
def test_each_privacy_level_persists_exactly_the_filtered_step(
    store: Store, level: PrivacyLevel
) -> None:
    from nrllm_core import RunStep, ToolArtifact

    step = RunStep(
        kind=StepKind.TOOL,
        round=3,
        duration_ms=4.25,
        fields={
            "tool_name": "read_records",
            "tool_arguments": {"q": "owner=bob@example.com"},
            "tool_result": "1 row",
            "tool_is_error": False,
        },
        tool_artifacts=(
            ToolArtifact.table(["key"], [["sk-abcdefghijklmnopqrstuv"]], label="Keys"),
        ),
    )
    pm = make_plugin_manager(plugins=[StoreAuditSink(store)], load_entry_points=False)
    store.start_run("r1")
    recorder = RunRecorder(pm, "r1", audit_view=audit_view_for(level))

    assert recorder.record(step)

    detail = store.get_run("r1")
    assert detail is not None
    (stored,) = detail.steps
    assert (stored.sequence, stored.kind, stored.round, stored.duration_ms) == (1, "tool", 3, 4.25)
    assert stored.payload == privacy_view(step, level)
    secret_kept = "sk-abcdefghijklmnopqrstuv" in str(stored.payload)
    assert secret_kept is (level is PrivacyLevel.FULL)


def test_a_silent_run_is_interrupted_until_its_next_heartbeat(store: Store, clock: Clock) -> None:
    store.start_run("r1")
    store.start_run("r2")
    clock.advance(seconds=61)
    store.record_step(record("r2", 1))

    assert {r.run_id: r.status for r in store.list_runs()} == {
        "r1": RunStatus.INTERRUPTED,
        "r2": RunStatus.RUNNING,
    }
    assert [r.run_id for r in store.list_runs(RunStatus.INTERRUPTED)] == ["r1"]
    assert [r.run_id for r in store.list_runs(RunStatus.RUNNING)] == ["r2"]

    assert store.heartbeat("r1")
    assert [r.run_id for r in store.list_runs(RunStatus.INTERRUPTED)] == []
    assert not store.heartbeat("missing")


def test_settling_a_run(store: Store, clock: Clock) -> None:
    for run_id in ("done", "broke", "parked"):
        store.start_run(run_id)
    clock.advance(minutes=5)

    assert store.finish_run("done", RunStatus.COMPLETED, "final_answer")
    assert store.finish_run("broke", RunStatus.FAILED, "audit_unavailable")
    assert store.finish_run("parked", RunStatus.AWAITING_APPROVAL, "approval_required")
    assert not store.finish_run("done", RunStatus.FAILED, "late")
    assert not store.finish_run("missing", RunStatus.COMPLETED)
    assert not store.heartbeat("parked")
    with pytest.raises(ValueError, match="interrupted"):
        store.finish_run("parked", RunStatus.INTERRUPTED)
    with pytest.raises(ValueError, match="running"):
        store.finish_run("parked", RunStatus.RUNNING)

    clock.advance(hours=1)
    runs = {r.run_id: r for r in store.list_runs()}
    assert runs["done"].status is RunStatus.COMPLETED
    assert runs["done"].termination_reason == "final_answer"
    assert runs["done"].ended_at == datetime(2030, 6, 1, 12, 5, tzinfo=UTC)
    assert runs["broke"].status is RunStatus.FAILED
    # A parked run waits for a person: it is neither finished nor interrupted.
    assert runs["parked"].status is RunStatus.AWAITING_APPROVAL
    assert runs["parked"].ended_at is None
    assert [r.run_id for r in store.list_runs(RunStatus.COMPLETED)] == ["done"]

    assert store.finish_run("parked", RunStatus.COMPLETED, "approved")
    assert store.get_run("parked").run.status is RunStatus.COMPLETED  # type: ignore[union-attr]


def test_runs_are_listed_newest_first(store: Store, clock: Clock) -> None:
    for run_id in ("a", "b", "c"):
        store.start_run(run_id, kind=RunKind.INVOKE if run_id == "b" else RunKind.RUN)
        clock.advance(seconds=1)

    runs = store.list_runs()

    assert [r.run_id for r in runs] == ["c", "b", "a"]
    assert runs[1].kind is RunKind.INVOKE
    assert store.get_run("missing") is None


def test_gate_decisions_are_kept_without_content(store: Store) -> None:
    store.start_run("r1")
    decisions = [
        GateDecisionRecord(
            tool="get_env", reason="data_class", zone="externalGlobal", ceiling="editorContent"
        ),
        GateDecisionRecord(tool="rm", reason="disabled", observed=True),
        GateDecisionRecord(tool="read_records", reason=None, zone="local"),
    ]

    store.record_decisions("r1", decisions)
    store.record_decisions("r1", [])

    detail = store.get_run("r1")
    assert detail is not None
    assert list(detail.decisions) == decisions


def test_purge_deletes_old_finished_and_abandoned_runs_with_their_rows(
    store: Store, clock: Clock
) -> None:
    def run(run_id: str, status: RunStatus | None) -> None:
        store.start_run(run_id)
        store.record_step(record(run_id, 1))
        store.record_decisions(run_id, [GateDecisionRecord(tool="t", reason="r")])
        if status is not None:
            store.finish_run(run_id, status, "x")

    run("old-done", RunStatus.COMPLETED)
    run("old-failed", RunStatus.FAILED)
    run("old-parked", RunStatus.AWAITING_APPROVAL)
    run("old-dead", None)
    run("old-alive", None)
    clock.advance(days=20)
    run("recent-done", RunStatus.COMPLETED)
    run("recent-parked", RunStatus.AWAITING_APPROVAL)
    clock.advance(days=11)
    # Still heart-beating after a month: never purged while it lives.
    assert store.heartbeat("old-alive")

    nothing = store.purge(32, 32)
    assert (nothing.finished, nothing.unfinished) == (0, 0)
    result = store.purge(30, 15)

    assert (result.finished, result.unfinished) == (2, 2)
    remaining = {r.run_id for r in store.list_runs()}
    assert remaining == {"recent-done", "recent-parked", "old-alive"}
    assert store.get_run("old-done") is None
    from sqlalchemy import func, select

    from nrllm_core.store._models import DECISIONS, STEPS

    with store._engine.connect() as connection:
        steps = connection.execute(select(func.count()).select_from(STEPS)).scalar()
        decisions = connection.execute(select(func.count()).select_from(DECISIONS)).scalar()
    assert (steps, decisions) == (3, 3)


@pytest.mark.parametrize(("days", "unfinished"), [(0, 7), (30, 0), (-1, 7)])
def test_purge_refuses_a_window_below_one_day(store: Store, days: int, unfinished: int) -> None:
    store.start_run("r1")
    store.finish_run("r1", RunStatus.COMPLETED)

    with pytest.raises(ValueError, match="at least 1"):
        store.purge(days, unfinished)
    assert [r.run_id for r in store.list_runs()] == ["r1"]


def test_a_deferred_step_is_committed_with_the_runs_next_write(store: Store) -> None:
    store.start_run("r1")
    store.record_step(record("r1", 1), deferred=True)
    store.record_step(record("r1", 2), deferred=True)
    assert [s.sequence for s in steps_of(store, "r1")] == []

    store.record_step(record("r1", 3))

    detail = store.get_run("r1")
    assert detail is not None
    assert [s.sequence for s in detail.steps] == [1, 2, 3]
    assert detail.run.steps == 3
    assert store.verify("r1").broken == ()


@pytest.mark.parametrize("write", ["decisions", "finish", "suspend"])
def test_every_write_of_the_run_commits_its_deferred_steps(store: Store, write: str) -> None:
    store.start_run("r1")
    store.record_step(record("r1", 1), deferred=True)

    if write == "decisions":
        store.record_decisions("r1", [GateDecisionRecord(tool="wipe", reason="disabled")])
    elif write == "finish":
        store.finish_run("r1", RunStatus.COMPLETED)
    else:
        store.suspend_run("r1", sealed=b"state", turn_digest="d1")

    assert [s.sequence for s in steps_of(store, "r1")] == [1]
    assert store.verify("r1").broken == ()


def test_deferred_gate_decisions_are_committed_with_the_runs_next_write(store: Store) -> None:
    decisions = [
        GateDecisionRecord(tool="wipe", reason="disabled"),
        GateDecisionRecord(tool="get_env", reason="data_class", zone="externalGlobal"),
    ]
    store.start_run("r1")
    store.start_run("r2")
    store.record_step(record("r1", 1), deferred=True)
    store.record_decisions("r1", decisions, deferred=True)
    # Neither a heartbeat nor another run's write carries them.
    assert store.heartbeat("r1")
    store.record_step(record("r2", 1))
    detail = store.get_run("r1")
    assert detail is not None
    assert (detail.steps, detail.decisions) == ((), ())

    store.record_step(record("r1", 2))

    detail = store.get_run("r1")
    assert detail is not None
    assert [s.sequence for s in detail.steps] == [1, 2]
    assert list(detail.decisions) == decisions
    assert store.verify("r1").broken == ()


def test_a_heartbeat_and_another_runs_writes_leave_deferred_steps_deferred(
    store: Store,
) -> None:
    # A heartbeat's failure is only logged: it must never be what a step's failure hides in.
    store.start_run("r1")
    store.start_run("r2")
    store.record_step(record("r1", 1), deferred=True)
    assert store.heartbeat("r1")
    store.record_step(record("r2", 1))
    store.finish_run("r2", RunStatus.COMPLETED)
    assert steps_of(store, "r1") == ()

    store.record_step(record("r1", 2))
    assert [s.sequence for s in steps_of(store, "r1")] == [1, 2]


def test_a_deferred_step_fails_with_the_write_that_carries_it(store: Store) -> None:
    store.start_run("r1")
    store.record_step(record("r1", 1))
    store.record_step(record("r1", 2), deferred=True)

    with pytest.raises(Exception, match=r"(?i)unique|duplicate"):
        store.record_step(record("r1", 1))

    # Gone with the write that failed, whose caller learnt of it: the gap shows the loss.
    assert [s.sequence for s in steps_of(store, "r1")] == [1]
    store.record_step(record("r1", 3))
    assert [s.sequence for s in steps_of(store, "r1")] == [1, 3]
    assert store.verify("r1").broken == ()


def test_a_deferred_step_with_no_canonical_form_raises_at_once(store: Store) -> None:
    store.start_run("r1")
    with pytest.raises(ValueError, match="NaN"):
        store.record_step(record("r1", 1, cost=math.nan), deferred=True)

    store.record_step(record("r1", 2))
    assert [s.sequence for s in steps_of(store, "r1")] == [2]


def queued_writes(store: Store, count: int, write: Any) -> dict[int, BaseException | None]:
    """Run ``write(index)`` on ``count`` threads while the writer's turn is held, so that
    they all wait together; their outcomes by index."""
    outcomes: dict[int, BaseException | None] = {}

    def work(index: int) -> None:
        try:
            write(index)
        except Exception as exc:
            outcomes[index] = exc
        else:
            outcomes[index] = None

    threads = [threading.Thread(target=work, args=(i,)) for i in range(count)]
    with store._write_lock:
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 10
        while len(store._queue) < count and time.monotonic() < deadline:
            time.sleep(0.01)
    for thread in threads:
        thread.join()
    return outcomes


def test_writes_that_wait_together_are_committed_in_one_transaction(store: Store) -> None:
    from sqlalchemy import event

    for index in range(8):
        store.start_run(f"r{index}")
    store.record_step(record("r0", 1))
    store.record_step(record("r1", 1), deferred=True)
    commits: list[object] = []
    event.listen(store._engine, "commit", commits.append)

    outcomes = queued_writes(store, 8, lambda i: store.record_step(record(f"r{i}", 2)))

    assert outcomes == dict.fromkeys(range(8))
    assert len(commits) == 1
    assert [s.sequence for s in steps_of(store, "r0")] == [1, 2]
    assert [s.sequence for s in steps_of(store, "r1")] == [1, 2]
    assert [s.sequence for s in steps_of(store, "r5")] == [2]
    assert store.verify().broken == ()


def test_a_write_that_fails_among_others_waiting_fails_alone(store: Store) -> None:
    for index in range(6):
        store.start_run(f"r{index}")
        store.record_step(record(f"r{index}", 1))

    def write(index: int) -> None:
        if index == 3:
            store.record_step(record("r3", 1))  # taken already
        elif index == 4:
            store.finish_run("r4", RunStatus.COMPLETED)
        else:
            store.record_step(record(f"r{index}", 2))

    outcomes = queued_writes(store, 6, write)

    assert {i for i, failure in outcomes.items() if failure is not None} == {3}
    assert "unique" in str(outcomes[3]).lower() or "duplicate" in str(outcomes[3]).lower()
    for index in (0, 1, 2, 5):
        assert [s.sequence for s in steps_of(store, f"r{index}")] == [1, 2]
    assert [s.sequence for s in steps_of(store, "r3")] == [1]
    info = {run.run_id: run.status for run in store.list_runs()}
    assert info["r4"] is RunStatus.COMPLETED
    assert store.verify().broken == ()


def steps_of(store: Store, run_id: str) -> tuple[Any, ...]:
    detail = store.get_run(run_id)
    assert detail is not None
    return detail.steps


@pytest.mark.parametrize("shared", [True, False], ids=["one-store", "store-per-thread"])
def test_concurrent_runs_lose_nothing_and_leave_no_gaps(backend: Any, shared: bool) -> None:
    threads, steps = 8, 200
    store = backend.open()
    errors: list[BaseException] = []
    start = threading.Barrier(threads)

    def writer(index: int) -> None:
        run_id = f"run-{index}"
        # A store of its own per thread contends like separate processes do.
        own = store if shared else backend.open()
        try:
            own.start_run(run_id)
            start.wait()
            for sequence in range(1, steps + 1):
                own.record_step(record(run_id, sequence, thread=index, n=sequence))
            own.finish_run(run_id, RunStatus.COMPLETED)
        except BaseException as exc:
            errors.append(exc)
        finally:
            if own is not store:
                own.close()

    workers = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    try:
        assert errors == []
        for index in range(threads):
            detail = store.get_run(f"run-{index}")
            assert detail is not None
            assert [s.sequence for s in detail.steps] == list(range(1, steps + 1))
            assert {s.payload["thread"] for s in detail.steps} == {index}
            assert [s.payload["n"] for s in detail.steps] == list(range(1, steps + 1))
            assert detail.run.steps == steps
            assert detail.run.status is RunStatus.COMPLETED
        assert store.verify().broken == ()
    finally:
        store.close()


def test_the_embedded_database_lives_in_nrllm_home_in_wal_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))

    store = Store.open(None)
    try:
        store.start_run("r1")
        with store._engine.connect() as connection:
            foreign_keys = connection.exec_driver_sql("PRAGMA foreign_keys").scalar()
            synchronous = connection.exec_driver_sql("PRAGMA synchronous").scalar()
    finally:
        store.close()

    database = tmp_path / "home" / "nrllm.db"
    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    assert (foreign_keys, synchronous) == (1, 1)


def test_without_nrllm_home_the_platform_data_folder_is_used(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import platformdirs

    from nrllm_core.store._database import default_data_dir

    monkeypatch.delenv("NRLLM_HOME", raising=False)

    assert default_data_dir() == Path(platformdirs.user_data_dir("nrllm", appauthor=False))


@pytest.mark.parametrize(
    ("program", "unloaded"),
    [
        (
            "import nrllm_core, nrllm_core.cli, nrllm_core._privacy",
            "m.split('.')[0] in ('sqlalchemy', 'alembic', 'psycopg', 'platformdirs') "
            "or m == 'nrllm_core.store'",
        ),
        (
            "import tempfile\nfrom nrllm_core.store import Store\n"
            "Store.open(None, data_dir=tempfile.mkdtemp()).close()",
            "m.startswith(('aiosqlite', 'sqlalchemy.ext.asyncio'))",
        ),
    ],
    ids=["nrllm_core-and-its-cli-load-no-database-library", "store-loads-no-asyncio-library"],
)
def test_importing_nrllm_core_and_its_cli_loads_no_database_library(
    program: str, unloaded: str
) -> None:
    code = f"import sys\n{program}\nprint(sorted(m for m in sys.modules if {unloaded}))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"


def test_the_audit_store_has_one_executor_and_core_no_asyncio_driver() -> None:
    # AsyncHost records through the sync Store in worker threads; an async store beside it
    # would be a second public way to write the audit that no host uses (issue 22).
    import tomllib

    import nrllm_core.store

    assert [name for name in nrllm_core.store.__all__ if name.endswith("Store")] == ["Store"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = " ".join(project["dependencies"])
    assert "aiosqlite" not in needed
    assert "sqlalchemy[" not in needed


def test_the_wheel_ships_the_migrations(tmp_path: Path) -> None:
    import zipfile

    from hatchling.builders.wheel import WheelBuilder

    wheel = Path(next(iter(WheelBuilder(str(ROOT)).build(directory=str(tmp_path)))))

    names = set(zipfile.ZipFile(wheel).namelist())
    migrations = "nrllm_core/store/migrations/"
    assert {
        migrations + "env.py",
        migrations + "script.py.mako",
        migrations + "versions/0001_audit_tables.py",
    } <= names


def test_a_leased_run_stays_running_through_a_long_call_and_goes_quiet_after(backend):
    # The store's clock jumps past the lease rather than the test sleeping through it; what
    # the test waits for is the renewals, three per lease on the real clock.
    ahead = [timedelta(0)]
    store = backend.open(lease_seconds=1, clock=lambda: datetime.now(UTC) + ahead[0])
    store.start_run("r-long")
    with store.leased("r-long"):
        ahead[0] = timedelta(seconds=5)  # longer than the lease: only the renewals keep it alive
        time.sleep(1.0)
        (info,) = store.list_runs()
        assert info.status is RunStatus.RUNNING
    # A renewal still going after the block would write this later time and show it running.
    ahead[0] = timedelta(seconds=10)
    time.sleep(1.0)
    (info,) = store.list_runs()
    assert info.status is RunStatus.INTERRUPTED
    store.close()


def test_a_suspended_turn_is_claimed_once_and_its_nonce_never_again(store: Store) -> None:
    from nrllm_core.store import ClaimRefused

    store.start_run("r1")
    store.start_run("r2")
    assert store.suspension("r1") is None
    store.suspend_run("r1", sealed=b"state-1", turn_digest="d1")
    with pytest.raises(ClaimRefused) as parked:
        store.suspend_run("r1", sealed=b"again", turn_digest="d1")
    assert parked.value.reason == "not_running"
    pending = store.suspension("r1")
    assert pending is not None
    assert (pending.run_id, pending.sealed, pending.turn_digest) == ("r1", b"state-1", "d1")
    assert store.get_run("r1").run.status is RunStatus.AWAITING_APPROVAL  # type: ignore[union-attr]

    def claim(run_id: str, digest: str, nonce: str) -> Any:
        return store.claim_suspension(
            run_id, turn_digest=digest, nonce=nonce, decision="approve", approver="bob"
        )

    with pytest.raises(ClaimRefused) as stale:
        claim("r1", "other-digest", "n1")
    assert stale.value.reason == "already_decided"
    assert claim("r1", "d1", "n1") == b"state-1"
    assert store.suspension("r1") is None
    assert store.get_run("r1").run.status is RunStatus.RUNNING  # type: ignore[union-attr]
    with pytest.raises(ClaimRefused) as twice:
        claim("r1", "d1", "n1")
    assert twice.value.reason == "already_decided"

    # The nonce is spent even on a fresh suspension of another run.
    store.suspend_run("r2", sealed=b"state-2", turn_digest="d2")
    with pytest.raises(ClaimRefused) as replayed:
        claim("r2", "d2", "n1")
    assert replayed.value.reason == "replayed"
    # Refused in one transaction: the turn is still open, the run still waits.
    assert store.suspension("r2") is not None
    assert claim("r2", "d2", "n2") == b"state-2"

    # A run settled while it waited cannot be reopened by a claim, nor its nonce spent.
    store.suspend_run("r2", sealed=b"state-3", turn_digest="d3")
    assert store.finish_run("r2", RunStatus.FAILED, "gave_up")
    with pytest.raises(ClaimRefused) as settled:
        claim("r2", "d3", "n3")
    assert settled.value.reason == "not_awaiting"
    store.start_run("r3")
    store.suspend_run("r3", sealed=b"state-4", turn_digest="d4")
    assert claim("r3", "d4", "n3") == b"state-4"


def test_due_suspensions_lists_the_open_turns_of_a_kind_that_expired_or_say_no_expiry(
    store: Store, clock: Clock
) -> None:
    from nrllm_core.store import RunKind

    now = clock()
    turns = {
        "due": now + timedelta(minutes=5),
        "later": now + timedelta(minutes=30),
        "unknown": None,
        "decided": now + timedelta(minutes=1),
        "other-kind": now + timedelta(minutes=1),
        "settled": now + timedelta(minutes=1),
    }
    for run_id, expires_at in turns.items():
        kind = RunKind.RUN if run_id == "other-kind" else RunKind.MCP
        store.start_run(run_id, kind=kind)
        store.suspend_run(run_id, sealed=b"s", turn_digest=run_id, expires_at=expires_at)
        clock.advance(seconds=1)
    store.claim_suspension(
        "decided", turn_digest="decided", nonce="n1", decision="approve", approver="bob"
    )
    assert store.finish_run("settled", RunStatus.CANCELLED, "cancelled")

    # Before any expiry only the turn whose expiry is not known is worth opening.
    assert store.due_suspensions(RunKind.MCP) == ["unknown"]
    clock.advance(minutes=5)
    assert store.due_suspensions(RunKind.MCP) == ["due", "unknown"]
    assert store.due_suspensions(RunKind.RUN) == ["other-kind"]
    clock.advance(minutes=30)
    assert store.due_suspensions(RunKind.MCP) == ["due", "later", "unknown"]


def test_the_store_is_one_class() -> None:
    # What a second store class once shared lives in Store itself.
    assert Store.__bases__ == (object,)


def test_execute_rows_on_sqlite_stores_what_sqlalchemy_would(tmp_path: Path) -> None:
    from sqlalchemy import bindparam, create_engine, insert, select, update

    from nrllm_core.store._database import execute_rows
    from nrllm_core.store._models import METADATA, RUNS

    engine = create_engine(f"sqlite+pysqlite:///{tmp_path / 'rows.db'}")
    METADATA.create_all(engine)
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    row = {
        "kind": "run",
        "status": "running",
        "provider": None,
        "zone": None,
        "skill": None,
        "actor": "alice",
        "started_at": now,
        "ended_at": None,
        "heartbeat_at": now,
        "termination_reason": None,
        "steps": 0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "last_mac": None,
        "chain_head": None,
    }
    with engine.begin() as connection:
        connection.execute(insert(RUNS), [{**row, "id": "through-sqlalchemy"}])
        assert execute_rows(connection, insert(RUNS), [{**row, "id": "through-the-driver"}]) == 1
        stored = connection.exec_driver_sql("SELECT * FROM runs ORDER BY id").all()
        assert stored[0][1:] == stored[1][1:]
        read = connection.execute(select(RUNS.c.started_at)).scalars().all()
        assert read == [now, now]
        # A parameter no row names (a literal the statement fixes) is refused, not guessed.
        fixed = update(RUNS).where(RUNS.c.id == bindparam("target")).values(status="failed")
        with pytest.raises(TypeError, match="status"):
            execute_rows(connection, fixed, [{"target": "through-the-driver"}])
    engine.dispose()

"""The runs listing's filters and keyset pages in the store, and the indexes they read."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nrllm_core._payloads import AuditRecord, StepKind
from nrllm_core.store import RunCursor, RunFilter, RunKind, RunStatus, Store
from nrllm_core.store import _operations as ops

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@pytest.fixture
def listed(tmp_path: Path) -> Iterator[Store]:
    now = [T0]
    store = Store.open(None, data_dir=tmp_path, environ={}, clock=lambda: now[0])
    for n in range(12):
        now[0] = T0 + timedelta(minutes=n // 2)  # two runs to each start time
        run_id = f"r{n:02d}"
        store.start_run(run_id, kind=RunKind.INVOKE if n % 3 else RunKind.RUN, actor=f"a{n % 2}")
        store.record_step(
            AuditRecord(
                run_id=run_id,
                sequence=1,
                kind=StepKind.TOOL,
                round=1,
                duration_ms=1.0,
                payload={"kind": "tool", "round": 1, "tool_name": f"t{n % 4}"},
            )
        )
        store.finish_run(run_id, RunStatus.COMPLETED)
    yield store
    store.close()


def test_pages_of_a_filtered_listing_meet_end_to_end(listed: Store) -> None:
    everything = [r.run_id for r in listed.list_runs(where=RunFilter(actor="a1"))]
    assert everything == ["r11", "r09", "r07", "r05", "r03", "r01"]
    pages: list[list[str]] = []
    after: RunCursor | None = None
    while True:
        page = listed.list_runs(where=RunFilter(actor="a1"), after=after, limit=4)
        pages.append([r.run_id for r in page])
        if len(page) < 4:
            break
        after = RunCursor(started_at=page[-1].started_at, run_id=page[-1].run_id)
    assert pages == [["r11", "r09", "r07", "r05"], ["r03", "r01"]]


def test_a_cursor_between_two_runs_of_one_start_time_splits_them_by_id(listed: Store) -> None:
    r07 = next(r for r in listed.list_runs() if r.run_id == "r07")
    after = RunCursor(started_at=r07.started_at, run_id="r07")
    assert [r.run_id for r in listed.list_runs(after=after, limit=2)] == ["r06", "r05"]


def test_the_positional_status_and_actor_narrow_a_filter(listed: Store) -> None:
    found = listed.list_runs(RunStatus.COMPLETED, actor="a0", where=RunFilter(tool="t2"))
    assert [r.run_id for r in found] == ["r10", "r06", "r02"]


def plan(store: Store, where: RunFilter, after: RunCursor | None) -> str:
    captured: list[Any] = []
    with store._engine.connect() as connection:
        real = connection.execute

        def grab(statement: Any, *args: Any, **kwargs: Any) -> Any:
            captured.append(statement)
            return real(statement, *args, **kwargs)

        connection.execute = grab  # type: ignore[method-assign]
        now = datetime.now(UTC)
        ops.list_runs(connection, where, now=now, lease=timedelta(minutes=1), after=after, limit=5)
        sql = captured[0].compile(
            dialect=connection.dialect, compile_kwargs={"literal_binds": True}
        )
        rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}").all()
    return "\n".join(row[-1] for row in rows)


@pytest.mark.parametrize(
    ("where", "index"),
    [
        (RunFilter(), "ix_runs_started_at_id"),
        (RunFilter(status=RunStatus.FAILED), "ix_runs_status_started_at"),
        (RunFilter(actor="a1"), "ix_runs_actor_started_at"),
        (RunFilter(provider="p"), "ix_runs_provider_started_at"),
        (RunFilter(started_after=T0, started_before=T0 + timedelta(hours=1)), "ix_runs_started"),
        (RunFilter(tool="t1"), "ix_run_steps_tool_name"),
    ],
)
def test_each_filter_reads_an_index_on_sqlite(listed: Store, where: RunFilter, index: str) -> None:
    after = RunCursor(started_at=T0 + timedelta(minutes=3), run_id="r07")
    for cursor in (None, after):
        shown = plan(listed, where, cursor)
        assert index in shown, shown
        # No step of the plan reads a whole table.
        assert all("USING" in line for line in shown.splitlines() if line.startswith("SCAN")), shown

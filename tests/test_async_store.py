"""What only the async store has to show: many runs from one event loop, races between tasks,
cancellation, and how it is opened. Everything it shares with ``Store`` is checked by the store
and audit chain suites, which run against both. On SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from sqlalchemy import event, text
from sqlalchemy.engine import make_url

from nrllm_core import AuditRecord, StepKind
from nrllm_core.store import AsyncStore, ClaimRefused, RunStatus, SchemaOutdatedError
from nrllm_core.store._database import async_engine_for

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def record(run_id: str, sequence: int) -> AuditRecord:
    return AuditRecord(
        run_id=run_id,
        sequence=sequence,
        kind=StepKind.TOOL,
        round=1,
        duration_ms=1.5,
        payload={"kind": "tool", "run": run_id, "n": sequence},
    )


async def open_async(backend: Any, **kwargs: Any) -> AsyncStore:
    return await AsyncStore.open(backend.url, data_dir=backend.data_dir, **kwargs)


async def test_many_runs_record_at_once_from_one_event_loop(backend: Any) -> None:
    runs, steps = 100, 8
    astore = await open_async(backend)

    async def run(index: int) -> None:
        run_id = f"run-{index}"
        await astore.start_run(run_id)
        for sequence in range(1, steps + 1):
            await astore.record_step(record(run_id, sequence))
        assert await astore.finish_run(run_id, RunStatus.COMPLETED, "final_answer")

    try:
        async with anyio.create_task_group() as runs_group:
            for index in range(runs):
                runs_group.start_soon(run, index)
        listed = await astore.list_runs(RunStatus.COMPLETED)
        detail = await astore.get_run("run-42")
    finally:
        await astore.close()

    assert len(listed) == runs
    assert {(r.steps, r.status) for r in listed} == {(steps, RunStatus.COMPLETED)}
    assert detail is not None
    assert [(s.sequence, s.payload["run"]) for s in detail.steps] == [
        (n, "run-42") for n in range(1, steps + 1)
    ]
    store = backend.open()
    try:
        check = store.verify()
    finally:
        store.close()
    assert (check.runs_checked, check.broken) == (runs, ())


async def test_a_head_moved_by_another_writer_is_read_again_not_forked(backend: Any) -> None:
    store = backend.open()
    one, two = AsyncStore.for_store(store), AsyncStore.for_store(store)
    try:
        await one.start_run("r1")
        await one.record_step(record("r1", 1))
        # ``two`` moves the head that ``one`` remembers; ``one`` must chain from the new one.
        await two.record_step(record("r1", 2))
        await one.record_step(record("r1", 3))
        store.record_step(record("r1", 4))
        await two.record_step(record("r1", 5))
        detail = await two.get_run("r1")
    finally:
        await one.close()
        await two.close()
    try:
        assert store.verify("r1").broken == ()
    finally:
        store.close()
    assert detail is not None
    assert [s.sequence for s in detail.steps] == [1, 2, 3, 4, 5]
    assert detail.run.steps == 5


@pytest.mark.parametrize("nonce", ["shared", "own"], ids=["one-nonce", "a-nonce-each"])
async def test_of_many_tasks_claiming_one_turn_exactly_one_succeeds(
    backend: Any, nonce: str
) -> None:
    astore = await open_async(backend)
    claimed: list[bytes] = []
    refused: list[str] = []

    async def claim(index: int) -> None:
        try:
            claimed.append(
                await astore.claim_suspension(
                    "r1",
                    turn_digest="d1",
                    nonce="n" if nonce == "shared" else f"n{index}",
                    decision="approve",
                    approver=f"person-{index}",
                )
            )
        except ClaimRefused as exc:
            refused.append(exc.reason)

    try:
        await astore.start_run("r1")
        await astore.suspend_run("r1", sealed=b"the state", turn_digest="d1")
        async with anyio.create_task_group() as claims:
            for index in range(20):
                claims.start_soon(claim, index)
        status = (await astore.get_run("r1")).run.status  # type: ignore[union-attr]
    finally:
        await astore.close()

    assert claimed == [b"the state"]
    assert len(refused) == 19
    assert set(refused) <= {"already_decided", "replayed"}
    assert status is RunStatus.RUNNING


async def test_an_error_in_a_leased_block_comes_out_as_it_was_raised(backend: Any) -> None:
    astore = await open_async(backend)
    try:
        await astore.start_run("r1")
        with pytest.raises(KeyError, match="from the block"):
            async with astore.leased("r1"):
                raise KeyError("from the block")
        with anyio.move_on_after(0.05) as scope:
            async with astore.leased("r1"):
                await anyio.sleep(5)
        assert scope.cancelled_caught
    finally:
        await astore.close()


async def test_a_write_under_way_is_committed_before_a_cancellation_lands(backend: Any) -> None:
    astore = await open_async(backend)
    try:
        await astore.start_run("r1")
        with anyio.CancelScope() as scope:

            def cancel_mid_write(*args: Any) -> None:
                if "INSERT INTO run_steps" in args[2]:
                    scope.cancel()

            event.listen(astore._engine.sync_engine, "before_cursor_execute", cancel_mid_write)
            await astore.record_step(record("r1", 1))
            # The write ran to its commit; the cancellation lands at the next checkpoint.
            await anyio.lowlevel.checkpoint()
            pytest.fail("the cancellation never landed")
        event.remove(astore._engine.sync_engine, "before_cursor_execute", cancel_mid_write)
        detail = await astore.get_run("r1")
    finally:
        await astore.close()
    assert scope.cancelled_caught
    assert detail is not None
    assert [s.sequence for s in detail.steps] == [1]
    assert detail.run.steps == 1


async def test_open_creates_the_schema_and_refuses_an_outdated_one(backend: Any) -> None:
    astore = await open_async(backend, lease_seconds=5)
    async with astore._engine.begin() as connection:
        revisions = (
            await connection.execute(text("SELECT version_num FROM alembic_version"))
        ).all()
        await connection.execute(text("UPDATE alembic_version SET version_num = '0000'"))
    await astore.close()
    assert revisions

    with pytest.raises(SchemaOutdatedError, match="nrllm db upgrade"):
        await open_async(backend)
    with pytest.raises(ValueError, match="at least 1"):
        await open_async(backend, lease_seconds=0)


async def test_for_store_shares_the_key_lease_and_clock_and_leaves_the_store_open(
    backend: Any,
) -> None:
    from datetime import UTC, datetime

    def clock() -> datetime:
        return datetime(2031, 1, 1, tzinfo=UTC)

    store = backend.open(clock=clock, lease_seconds=7, environ={})
    store.start_run("sync-run")
    astore = AsyncStore.for_store(store)
    try:
        await astore.start_run("async-run")
        await astore.record_step(record("async-run", 1))
        info = (await astore.get_run("async-run")).run  # type: ignore[union-attr]
    finally:
        await astore.close()
    try:
        assert info.started_at == clock()
        assert store.verify().broken == ()
        assert [r.run_id for r in store.list_runs()] == ["async-run", "sync-run"]
    finally:
        store.close()


async def test_the_embedded_database_is_set_up_as_the_sync_engine_sets_it_up(
    tmp_path: Path,
) -> None:
    astore = await AsyncStore.open(None, data_dir=tmp_path)
    try:
        await astore.start_run("r1")
        async with astore._engine.connect() as connection:
            pragmas = [
                (await connection.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in ("journal_mode", "foreign_keys", "synchronous", "busy_timeout")
            ]
    finally:
        await astore.close()
    assert pragmas == ["wal", 1, 1, 30_000]
    assert (tmp_path / "nrllm.db").stat().st_mode & 0o777 == 0o600


def test_a_database_with_no_asyncio_driver_is_refused() -> None:
    with pytest.raises(ValueError, match="mysql"):
        async_engine_for(make_url("mysql+pymysql://db/audit"))

"""The audit store for an event loop: Store's operations, awaited over an asyncio engine."""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Self, final

import anyio

from nrllm_core.log import logger
from nrllm_core.store import _operations as ops
from nrllm_core.store._database import async_engine_for
from nrllm_core.store._records import (
    GateDecisionRecord,
    RunDetail,
    RunInfo,
    RunKind,
    RunStatus,
    Suspension,
)
from nrllm_core.store._store import Store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from nrllm_core._payloads import AuditRecord
    from nrllm_core.store._chain import ChainKey

__all__ = ["AsyncStore"]


@final
class AsyncStore(ops.StoreCore):
    """The audit database, awaited: every write is committed before its coroutine returns.

    The same operations as :class:`Store`, on the same tables and the same audit chain, for a
    host running on an event loop: SQLite through aiosqlite, PostgreSQL through psycopg's async
    mode. Build it with :meth:`open`, or with :meth:`for_store` next to a :class:`Store` that
    is already open. It belongs to the event loop that first uses it; :meth:`close` it there.
    """

    __slots__ = ("_engine", "_write_lock")

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        lease: timedelta,
        clock: Callable[[], datetime],
        environ: Mapping[str, str] | None,
    ) -> None:
        super().__init__(lease=lease, clock=clock, environ=environ)
        self._engine = engine
        # One writer at a time on SQLite, as Store queues its threads: the tasks of this loop
        # wait here rather than in SQLite's busy handler.
        self._write_lock: contextlib.AbstractAsyncContextManager[Any] = (
            anyio.Lock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()
        )

    @classmethod
    async def open(
        cls,
        url: str | None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        lease_seconds: int = 60,
        clock: Callable[[], datetime] = ops.utcnow,
        environ: Mapping[str, str] | None = None,
    ) -> Self:
        """Connect to ``url`` as :meth:`Store.open` does, which it runs in a worker thread
        first: a new database is created at the latest schema, an outdated one raises
        :class:`SchemaOutdatedError`. Migrations only ever run through the sync engine."""
        store = await anyio.to_thread.run_sync(
            functools.partial(
                Store.open,
                url,
                data_dir=data_dir,
                lease_seconds=lease_seconds,
                clock=clock,
                environ=environ,
            )
        )
        try:
            return cls.for_store(store)
        finally:
            store.close()

    @classmethod
    def for_store(cls, store: Store) -> Self:
        """An async store for ``store``'s database, with its chain key source, lease and clock.

        Cheap, and no connection is made until first use; ``store`` stays the caller's to
        close. Its schema was checked when it was opened.
        """
        opened = cls(
            async_engine_for(store._engine.url),
            lease=store._lease,
            clock=store._clock,
            environ=store._environ,
        )
        opened._chain_key = store._chain_key
        return opened

    async def close(self) -> None:
        await self._engine.dispose()

    @contextlib.asynccontextmanager
    async def _writer(self) -> AsyncIterator[AsyncConnection]:
        """A connection of this loop's one writer, in a transaction that commits when the
        operation returns and rolls back when it raises.

        Once the write has its turn, cancelling the caller waits for the commit or the
        rollback: the audit never holds a write its caller could not know the outcome of.
        """
        async with self._write_lock:
            with anyio.CancelScope(shield=True):
                async with self._engine.begin() as connection:
                    yield connection

    async def _key(self) -> ChainKey:
        if self._chain_key is None:
            async with self._engine.connect() as connection:
                self._chain_key = await connection.run_sync(ops.read_chain_key, self._environ)
        return self._chain_key

    # -- writing -----------------------------------------------------------------------------

    async def start_run(
        self,
        run_id: str,
        *,
        kind: RunKind = RunKind.RUN,
        provider: str | None = None,
        zone: str | None = None,
        skill: str | None = None,
        actor: str | None = None,
    ) -> None:
        """As :meth:`Store.start_run`."""
        now, key = self._clock(), await self._key()
        async with self._writer() as connection:
            await connection.run_sync(
                ops.start_run,
                key,
                self._heads,
                run_id,
                kind=kind,
                provider=provider,
                zone=zone,
                skill=skill,
                actor=actor,
                now=now,
            )

    async def record_step(self, record: AuditRecord) -> None:
        """As :meth:`Store.record_step`: committed, chained and the lease renewed, or raises."""
        key = await self._key()
        step = ops.NewStep.of(record, self._clock())
        async with self._writer() as connection:
            await connection.run_sync(ops.record_steps, key, self._heads, [step])

    async def record_decisions(self, run_id: str, decisions: Iterable[GateDecisionRecord]) -> None:
        """As :meth:`Store.record_decisions`."""
        rows = ops.decision_rows(run_id, decisions, self._clock())
        if rows:
            async with self._writer() as connection:
                await connection.run_sync(ops.record_decisions, rows)

    @contextlib.asynccontextmanager
    async def leased(self, run_id: str) -> AsyncIterator[None]:
        """As :meth:`Store.leased`: a task renews the run's lease while the block runs."""
        failure: BaseException | None = None
        async with anyio.create_task_group() as renewals:
            renewals.start_soon(self._renew_lease, run_id)
            try:
                yield
            except BaseException as exc:
                # Raised again below, as it is: inside the task group it would reach the
                # caller wrapped in an exception group.
                failure = exc
            finally:
                renewals.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _renew_lease(self, run_id: str) -> None:
        interval = ops.renewal_interval(self._lease)
        while True:
            await anyio.sleep(interval)
            try:
                await self.heartbeat(run_id)
            except Exception:
                logger().warning("nrllm.store.heartbeat_failed", run_id=run_id, exc_info=True)

    async def heartbeat(self, run_id: str) -> bool:
        """As :meth:`Store.heartbeat`."""
        async with self._writer() as connection:
            return await connection.run_sync(ops.heartbeat, run_id, self._clock())

    async def finish_run(
        self, run_id: str, status: RunStatus, termination_reason: str | None = None
    ) -> bool:
        """As :meth:`Store.finish_run`."""
        now = self._clock()
        async with self._writer() as connection:
            return await connection.run_sync(
                ops.finish_run, run_id, status, termination_reason, now
            )

    async def suspend_run(
        self,
        run_id: str,
        *,
        sealed: bytes,
        turn_digest: str,
        trace_context: Mapping[str, str] | None = None,
    ) -> None:
        """As :meth:`Store.suspend_run`."""
        now = self._clock()
        async with self._writer() as connection:
            await connection.run_sync(
                ops.suspend_run,
                run_id,
                sealed=sealed,
                turn_digest=turn_digest,
                trace_context=trace_context,
                now=now,
            )

    async def claim_suspension(
        self, run_id: str, *, turn_digest: str, nonce: str, decision: str, approver: str
    ) -> bytes:
        """As :meth:`Store.claim_suspension`: one claim of a turn succeeds, whoever races it."""
        now = self._clock()
        async with self._writer() as connection:
            return await connection.run_sync(
                ops.claim_suspension,
                run_id,
                turn_digest=turn_digest,
                nonce=nonce,
                decision=decision,
                approver=approver,
                now=now,
            )

    # -- reading -----------------------------------------------------------------------------

    async def suspension(self, run_id: str) -> Suspension | None:
        """As :meth:`Store.suspension`."""
        async with self._engine.connect() as connection:
            return await connection.run_sync(ops.suspension, run_id)

    async def last_sequence(self, run_id: str) -> int:
        """As :meth:`Store.last_sequence`."""
        async with self._engine.connect() as connection:
            return await connection.run_sync(ops.last_sequence, run_id)

    async def list_runs(self, status: RunStatus | None = None) -> list[RunInfo]:
        """As :meth:`Store.list_runs`."""
        async with self._engine.connect() as connection:
            return await connection.run_sync(
                ops.list_runs, status, now=self._clock(), lease=self._lease
            )

    async def get_run(self, run_id: str) -> RunDetail | None:
        """As :meth:`Store.get_run`."""
        async with self._engine.connect() as connection:
            return await connection.run_sync(
                ops.get_run, run_id, now=self._clock(), lease=self._lease
            )

"""The audit store: runs, their privacy-filtered steps and gate decisions, each write committed
before it returns (the writes of threads waiting at once share one commit), but for a step or
gate decisions that guard nothing: those wait for their run's next write."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final, Generic, Self, TypeVar, final

import attrs
from sqlalchemy import ColumnElement, and_, delete, or_, select
from sqlalchemy.engine import Connection, Engine

from nrllm_core._payloads import AuditRecord
from nrllm_core.log import logger
from nrllm_core.store import _operations as ops
from nrllm_core.store._chain import (
    STEP_FIELDS,
    ChainBreak,
    ChainCheck,
    ChainKey,
    Problem,
    derived_key,
    find_break,
)
from nrllm_core.store._database import (
    HEAD_REVISION,
    SchemaOutdatedError,
    current_revisions,
    engine_for,
    run_upgrade,
)
from nrllm_core.store._models import DECISIONS, RUNS, STEPS, SUSPENSIONS
from nrllm_core.store._records import (
    GateDecisionRecord,
    PurgeResult,
    RunCursor,
    RunDetail,
    RunFilter,
    RunInfo,
    RunKind,
    RunStatus,
    Suspension,
)

__all__ = ["Store"]

T = TypeVar("T")

_FINISHED: Final = tuple(s.value for s in RunStatus if s.is_finished)
_PURGE_CHUNK: Final = 500


@final
class Store:
    """The audit database. Every write is committed before the method returns (a step or gate
    decisions recorded as deferred: with the run's next write, see :meth:`record_step`;
    :meth:`close` commits those still waiting).

    Build it with :meth:`open`. A run's lease is its last heartbeat: a run still marked
    ``running`` whose heartbeat is older than ``lease_seconds`` is reported ``interrupted``.
    """

    __slots__ = (
        "_chain_key",
        "_clock",
        "_connection",
        "_deferred",
        "_engine",
        "_environ",
        "_heads",
        "_lease",
        "_leased",
        "_leased_lock",
        "_queue",
        "_queue_lock",
        "_renewing",
        "_write_lock",
        "unstored_steps",
    )

    def __init__(
        self,
        engine: Engine,
        *,
        lease_seconds: int,
        clock: Callable[[], datetime],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._environ = os.environ if environ is None else environ
        # Derived on first use, then fixed: a run's chain never changes key halfway.
        self._chain_key: ChainKey | None = None
        self._heads = ops.ChainHeads()
        self._lease = timedelta(seconds=lease_seconds)
        self._clock = clock
        self._engine = engine
        # One writer at a time in this process: SQLite has only one anyway (queueing here is
        # fairer and much faster than SQLite's busy handler), and the writes that wait while
        # one commits are then committed together, by the next writer, in one transaction.
        self._write_lock = threading.Lock()
        # The writes waiting for it, and the steps and gate decisions deferred to each run's
        # next write; both under ``_queue_lock``, so a run's steps join its writes in the order
        # they came.
        self._queue: list[_Write[Any]] = []
        self._deferred: dict[str, _Deferred] = {}
        self._queue_lock = threading.Lock()
        # SQLite's writer keeps its connection: checking one out and back in costs more than
        # the commit, and a file's connection cannot go stale as a server's can.
        self._connection: Connection | None = None
        # Runs this process is working on; one background thread renews all their leases.
        self._leased: set[str] = set()
        self._leased_lock = threading.Lock()
        self._renewing = False
        # Steps lost with a write that carried them (see ``_write``): the log names each.
        self.unstored_steps = 0

    @classmethod
    def open(
        cls,
        url: str | None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        lease_seconds: int = 60,
        clock: Callable[[], datetime] = ops.utcnow,
        environ: Mapping[str, str] | None = None,
    ) -> Self:
        """Connect to ``url`` (``None``: ``nrllm.db`` in ``data_dir``, WAL-mode SQLite).

        A new, empty database is brought to the latest schema. One made by an older nrllm
        raises :class:`SchemaOutdatedError` until ``nrllm db upgrade`` has run, so that many
        hosts sharing one database never race to migrate it. ``environ`` (default: the
        process environment, read when first needed) holds the audit chain's key variables.
        """
        store = cls.connect(
            url, data_dir=data_dir, lease_seconds=lease_seconds, clock=clock, environ=environ
        )
        current = current_revisions(store._engine)
        if not current:
            store.upgrade()
        elif current != {HEAD_REVISION}:
            store.close()
            raise SchemaOutdatedError(
                f"the audit database is at revision {', '.join(sorted(current))}; "
                "run `nrllm db upgrade`"
            )
        return store

    @classmethod
    def connect(
        cls,
        url: str | None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        lease_seconds: int = 60,
        clock: Callable[[], datetime] = ops.utcnow,
        environ: Mapping[str, str] | None = None,
    ) -> Self:
        """Like :meth:`open`, without looking at the schema: for :meth:`upgrade` itself."""
        if lease_seconds < 1:
            raise ValueError("lease_seconds must be at least 1")
        return cls(
            engine_for(url, data_dir), lease_seconds=lease_seconds, clock=clock, environ=environ
        )

    def upgrade(self) -> None:
        """Apply the shipped migrations up to the latest; steps stored before the audit chain
        existed are chained, and heads stored before they were authenticated are
        authenticated, with this store's key."""
        with self._write_lock:
            run_upgrade(self._engine, self._environ)

    def derived_key(self, purpose: str) -> bytes:
        """A key for ``purpose`` (a plugin's own label) alone, derived from the audit chain's
        key: a plugin authenticates rows of its own with it, as the chain does its steps,
        without holding the chain's key. Like the chain, it resists someone who can write the
        database only when the key comes from the environment."""
        return derived_key(self._key(), purpose)

    def close(self) -> None:
        """Commit the steps and gate decisions waiting for their run's next write (each run's
        on its own, should one fail), then let go of the database."""
        with self._queue_lock:
            waiting = {
                run_id: _Write(deferred.steps, _nothing, deferred.decisions)
                for run_id, deferred in self._deferred.items()
            }
            self._deferred.clear()
        with self._write_lock:
            if waiting:
                self._commit(list(waiting.values()))
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        self._engine.dispose()
        for run_id, write in waiting.items():
            try:
                write.outcome()
            except Exception:
                logger().error("nrllm.store.unstored_at_close", run_id=run_id, exc_info=True)

    def _write(
        self,
        run_id: str | None,
        operation: Callable[[Connection], T],
        steps: Sequence[ops.NewStep] = (),
    ) -> T:
        """Commit ``steps`` then ``operation`` in one transaction, preceded by the steps and
        gate decisions of ``run_id`` deferred until its next write, and return what
        ``operation`` returned (or raise what it raised, nothing of it committed).

        Writes that arrive while another commits wait, and the first of them to get its turn
        commits them all in one transaction; should any of them raise, each is committed
        again alone, so that a write fails only of its own failure.
        """
        with self._queue_lock:
            deferred = self._deferred.pop(run_id, None) if run_id is not None else None
            if deferred is None:
                write: _Write[T] = _Write([*steps], operation)
            else:
                write = _Write([*deferred.steps, *steps], operation, deferred.decisions)
            self._queue.append(write)
        with self._write_lock:
            if not write.done:
                with self._queue_lock:
                    batch, self._queue = self._queue, []
                self._commit(batch)
        try:
            return write.outcome()
        except Exception as exc:
            if deferred is not None:
                self._lost(run_id, deferred, exc)
            raise

    def _lost(self, run_id: str | None, deferred: _Deferred, error: Exception) -> None:
        """Say which of a run's waiting steps went down with the write that carried them:
        their kinds and numbers, never their content."""
        with self._queue_lock:
            self.unstored_steps += len(deferred.steps)
        logger().error(
            "nrllm.store.steps_unstored",
            run_id=run_id,
            kinds=[step.row["kind"] for step in deferred.steps],
            sequences=[step.row["sequence"] for step in deferred.steps],
            count=len(deferred.steps),
            decisions=len(deferred.decisions),
            error=type(error).__name__,
        )

    def _run_write(self, operation: Callable[..., T], run_id: str, **arguments: Any) -> T:
        """``operation`` on the run ``run_id`` as one of its writes, carrying what of the run
        was deferred."""
        return self._write(run_id, functools.partial(operation, run_id=run_id, **arguments))

    def _commit(self, batch: list[_Write[Any]]) -> None:
        try:
            if len(batch) > 1 and self._commit_together(batch):
                return
            for write in batch:
                try:
                    with self._transaction() as connection:
                        (value,) = self._apply(connection, [write])
                except Exception as exc:
                    write.fail(exc)
                else:
                    write.settle(value)
        finally:
            for write in batch:
                if not write.done:
                    # This thread was interrupted: the transaction rolled back.
                    write.fail(RuntimeError("the write was interrupted before its commit"))

    def _commit_together(self, batch: list[_Write[Any]]) -> bool:
        try:
            with self._transaction() as connection:
                values = self._apply(connection, batch)
        except Exception:
            # One of them failed (or the commit did): rolled back, each is tried alone.
            return False
        for write, value in zip(batch, values, strict=True):
            write.settle(value)
        return True

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[Connection]:
        """A transaction of the writer (under ``_write_lock``): committed when the block
        ends, rolled back when it raises."""
        if self._engine.dialect.name != "sqlite":
            with self._engine.begin() as connection:
                yield connection
            return
        if self._connection is None:
            self._connection = self._engine.connect()
        try:
            with self._connection.begin():
                yield self._connection
        except BaseException:
            # The next write starts on a fresh connection, whatever this failure left.
            self._connection.close()
            self._connection = None
            raise

    def _apply(self, connection: Connection, writes: list[_Write[Any]]) -> list[Any]:
        """Chain the steps of ``writes``, insert their deferred gate decisions, then run their
        operations, in order. Writes that waited together are concurrent: any order of them is
        one they could have had, and each one's steps still come before its operation."""
        steps = [step for write in writes for step in write.steps]
        if steps:
            ops.record_steps(connection, self._key(), self._heads, steps)
        decisions = [row for write in writes for row in write.decisions]
        if decisions:
            ops.record_decisions(connection, decisions)
        return [write.operation(connection) for write in writes]

    def _key(self) -> ChainKey:
        if self._chain_key is None:
            with self._engine.connect() as connection:
                self._chain_key = ops.read_chain_key(connection, self._environ)
        return self._chain_key

    # -- writing -----------------------------------------------------------------------------

    def start_run(
        self,
        run_id: str,
        *,
        kind: RunKind = RunKind.RUN,
        provider: str | None = None,
        zone: str | None = None,
        skill: str | None = None,
        actor: str | None = None,
    ) -> None:
        """Record a new run as ``running``; a run id that exists already raises."""
        now, key = self._clock(), self._key()
        self._write(
            None,
            functools.partial(
                ops.start_run,
                key=key,
                heads=self._heads,
                run_id=run_id,
                kind=kind,
                provider=provider,
                zone=zone,
                skill=skill,
                actor=actor,
                now=now,
            ),
        )

    def record_step(self, record: AuditRecord, *, deferred: bool = False) -> None:
        """Persist one step, chained to its run's head, and renew the run's lease, in one
        committed transaction.

        Raises when the step cannot be stored: an unknown run, a sequence number already
        taken, a payload with no canonical JSON form, a run whose chain head is gone or does
        not hold (its steps or count changed by hand), or a database error.

        ``deferred`` is for a step that guards nothing (nothing waits for it to be durable):
        it is chained and committed with the run's next write through this store (its next
        step or gate decisions not deferred, its settling, suspension or claim), in that
        write's transaction, and a failure to store it is that write's failure; :meth:`close`
        commits those still waiting. Only a payload with no canonical JSON form raises here.
        """
        step = ops.NewStep.of(record, self._clock())
        # Derived here, not in the writer's turn, where every waiting write would wait for it.
        self._key()
        if deferred:
            with self._queue_lock:
                self._deferred.setdefault(record.run_id, _Deferred()).steps.append(step)
            return
        self._write(record.run_id, _nothing, [step])

    def record_decisions(
        self, run_id: str, decisions: Iterable[GateDecisionRecord], *, deferred: bool = False
    ) -> None:
        """Persist a turn's gate decisions together.

        ``deferred`` is as for :meth:`record_step`: the gate's decisions guard nothing (the
        run's next record, its request or its call, is the guarded write), so they may be
        committed with the run's next write, and a failure to store them is that write's.
        """
        rows = ops.decision_rows(run_id, decisions, self._clock())
        if not rows:
            return
        if deferred:
            with self._queue_lock:
                self._deferred.setdefault(run_id, _Deferred()).decisions.extend(rows)
            return
        self._write(run_id, functools.partial(ops.record_decisions, rows=rows))

    @contextlib.contextmanager
    def leased(self, run_id: str) -> Iterator[None]:
        """Keep renewing the run's lease while the block runs, so a run inside a long model or
        tool call is never shown as ``interrupted``; a dead process stops renewing."""
        with self._leased_lock:
            self._leased.add(run_id)
            start, self._renewing = not self._renewing, True
        if start:
            threading.Thread(target=self._renew_leases, name="nrllm-leases", daemon=True).start()
        try:
            yield
        finally:
            with self._leased_lock:
                self._leased.discard(run_id)

    def _renew_leases(self) -> None:
        interval = ops.renewal_interval(self._lease)
        while True:
            time.sleep(interval)
            with self._leased_lock:
                runs = sorted(self._leased)
                if not runs:
                    self._renewing = False
                    return
            for run_id in runs:
                try:
                    self.heartbeat(run_id)
                except Exception:
                    logger().warning("nrllm.store.heartbeat_failed", run_id=run_id, exc_info=True)

    def heartbeat(self, run_id: str) -> bool:
        """Renew a running run's lease; ``False`` when no running run has that id."""
        # Not the run's own write: a heartbeat that fails is only logged, so it never carries
        # the run's deferred steps.
        return self._write(None, functools.partial(ops.heartbeat, run_id=run_id, now=self._clock()))

    def finish_run(
        self, run_id: str, status: RunStatus, termination_reason: str | None = None
    ) -> bool:
        """Settle a running or suspended run; ``False`` when there was no such run to settle.

        ``completed`` and ``failed`` are final and stamp ``ended_at``; ``awaiting_approval``
        parks the run until a decision.
        """
        return self._run_write(
            ops.finish_run,
            run_id,
            status=status,
            termination_reason=termination_reason,
            now=self._clock(),
        )

    def suspend_run(
        self,
        run_id: str,
        *,
        sealed: bytes,
        turn_digest: str,
        trace_context: Mapping[str, str] | None = None,
        expires_at: datetime | None = None,
    ) -> None:
        """Park a running run on a turn that waits for a person, with its sealed state and,
        next to it, the W3C ``trace_context`` its resumption continues and when the turn
        expires (as its sealed state says; ``None``: not known, so
        :meth:`due_suspensions` lists it).

        Raises unless the run was running: a state that is not stored is never promised.
        """
        self._run_write(
            ops.suspend_run,
            run_id,
            sealed=sealed,
            turn_digest=turn_digest,
            trace_context=trace_context,
            expires_at=expires_at,
            now=self._clock(),
        )

    def due_suspensions(self, kind: RunKind) -> list[str]:
        """The runs of ``kind`` waiting on a turn that has expired by now, oldest first, and
        those whose turn's expiry was not stored (suspended before store revision 0008).

        What the stored expiry says only picks the turns worth opening: the turn's sealed
        state is what decides (:meth:`Host.pending` refuses an expired one).
        """
        with self._engine.connect() as connection:
            return ops.due_suspensions(connection, kind.value, self._clock())

    def suspension(self, run_id: str) -> Suspension | None:
        """The run's undecided suspended turn, or ``None``."""
        with self._engine.connect() as connection:
            return ops.suspension(connection, run_id)

    def claim_suspension(
        self, run_id: str, *, turn_digest: str, nonce: str, decision: str, approver: str
    ) -> bytes:
        """Record who decided what on which turn, consume the sealed state's ``nonce`` and
        reopen the run, in one transaction, and return the sealed state that was claimed.

        Exactly one claim of a turn succeeds, across processes and machines: a second one, or
        one naming another digest, raises :class:`ClaimRefused`; so does a nonce consumed
        before (``replayed``), even if the suspension's row was put back since.
        """
        return self._run_write(
            ops.claim_suspension,
            run_id,
            turn_digest=turn_digest,
            nonce=nonce,
            decision=decision,
            approver=approver,
            now=self._clock(),
        )

    def cancel_suspension(self, run_id: str, *, by: str) -> bool:
        """End a suspended run: its open turn decided ``cancelled`` by ``by``, the run settled
        ``cancelled`` and its sealed state blanked, in one transaction; ``False`` when the run
        has no undecided turn (unknown, running, decided or finished)."""
        return self._write(
            None, functools.partial(ops.cancel_suspension, run_id=run_id, by=by, now=self._clock())
        )

    def last_sequence(self, run_id: str) -> int:
        """The highest stored step number of the run (0 when none)."""
        with self._engine.connect() as connection:
            return ops.last_sequence(connection, run_id)

    def purge(self, days: int, unfinished_days: int) -> PurgeResult:
        """Delete finished runs that ended more than ``days`` ago, and unfinished runs started
        more than ``unfinished_days`` ago, with their steps and decisions.

        A run that is still alive (its lease is current) is never purged. A window below one
        day is refused: zero must never mean "everything".
        """
        if days < 1 or unfinished_days < 1:
            raise ValueError("retention windows are whole days, at least 1")
        now = self._clock()
        finished = and_(RUNS.c.status.in_(_FINISHED), RUNS.c.ended_at < now - timedelta(days=days))
        unfinished = and_(
            RUNS.c.status.in_(ops.OPEN),
            RUNS.c.started_at < now - timedelta(days=unfinished_days),
            or_(RUNS.c.status != RunStatus.RUNNING.value, RUNS.c.heartbeat_at < now - self._lease),
        )
        with self._write_lock, self._engine.begin() as connection:
            done = _delete_runs(connection, finished)
            abandoned = _delete_runs(connection, unfinished)
        # What still waits for a deleted run's next write has nothing left to join.
        with self._queue_lock:
            for run_id in (*done, *abandoned):
                self._deferred.pop(run_id, None)
        return PurgeResult(finished=len(done), unfinished=len(abandoned))

    # -- reading -----------------------------------------------------------------------------

    def verify(self, run_id: str | None = None) -> ChainCheck:
        """Check the audit chain of the run ``run_id``, or of every stored run (``None``).

        A run that is not there is reported missing when it is named; purged runs are simply
        gone. Each run is read in one statement, so a run being written is seen consistently.
        """
        key = self._key()
        query = (
            select(
                RUNS.c.id.label("chained_run"),
                RUNS.c.chain_head,
                RUNS.c.steps,
                *(STEPS.c[name] for name in STEP_FIELDS),
                STEPS.c.mac,
            )
            .select_from(RUNS)
            .outerjoin(STEPS, STEPS.c.run_id == RUNS.c.id)
            .order_by(RUNS.c.id, STEPS.c.sequence)
        )
        if run_id is not None:
            query = query.where(RUNS.c.id == run_id)
        checked, broken = 0, []
        with self._engine.connect() as connection:
            rows = connection.execution_options(yield_per=1_000).execute(query).mappings()
            for chained_run, group in itertools.groupby(rows, key=lambda r: r["chained_run"]):
                first = next(group)
                steps = [r for r in itertools.chain([first], group) if r["run_id"] is not None]
                checked += 1
                found = find_break(
                    key, chained_run, head=first["chain_head"], count=first["steps"], rows=steps
                )
                if found is not None:
                    broken.append(found)
        if run_id is not None and not checked:
            checked = 1
            broken.append(ChainBreak(run_id=run_id, sequence=1, problem=Problem.MISSING))
        return ChainCheck(runs_checked=checked, broken=tuple(broken), key_source=key.source)

    def list_runs(
        self,
        status: RunStatus | None = None,
        *,
        actor: str | None = None,
        where: RunFilter | None = None,
        after: RunCursor | None = None,
        limit: int | None = None,
    ) -> list[RunInfo]:
        """Runs, newest first (ties by run id, descending); ``status`` filters on the status as
        reported, ``actor`` on the id the run acted for, exactly as stored (either, given,
        replaces the one of ``where``), and ``where`` on any of its fields.

        ``after`` continues a listing past the run it names, ``limit`` caps its length: a page
        is the next ``limit`` runs after the last one of the page before.
        """
        where = where or RunFilter()
        if status is not None:
            where = attrs.evolve(where, status=status)
        if actor is not None:
            where = attrs.evolve(where, actor=actor)
        with self._engine.connect() as connection:
            return ops.list_runs(
                connection, where, now=self._clock(), lease=self._lease, after=after, limit=limit
            )

    def get_run(self, run_id: str) -> RunDetail | None:
        """A run with every stored step in sequence order, or ``None`` for an unknown id."""
        with self._engine.connect() as connection:
            return ops.get_run(connection, run_id, now=self._clock(), lease=self._lease)


@final
class _Deferred:
    """What of a run waits for its next write: its steps and gate decisions that guard
    nothing, in the order they came."""

    __slots__ = ("decisions", "steps")

    def __init__(self) -> None:
        self.steps: list[ops.NewStep] = []
        self.decisions: list[dict[str, Any]] = []


@final
class _Write(Generic[T]):
    """A write waiting for its commit: the steps it chains and the gate decisions it inserts,
    then its operation; settled by whichever thread commits it."""

    __slots__ = ("_error", "_value", "decisions", "done", "operation", "steps")

    def __init__(
        self,
        steps: list[ops.NewStep],
        operation: Callable[[Connection], T],
        decisions: list[dict[str, Any]] | None = None,
    ) -> None:
        self.steps = steps
        self.decisions = decisions or []
        self.operation = operation
        self.done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def settle(self, value: T) -> None:
        self._value, self.done = value, True

    def fail(self, error: BaseException) -> None:
        self._error, self.done = error, True

    def outcome(self) -> T:
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]


def _nothing(connection: Connection) -> None:
    """The operation of a write that only chains its steps."""


def _delete_runs(connection: Connection, condition: ColumnElement[bool]) -> list[str]:
    # The ids are fixed first so that the steps, decisions and runs deleted are the same runs
    # even if another host settles one of them meanwhile.
    doomed = list(connection.execute(select(RUNS.c.id).where(condition)).scalars())
    for start in range(0, len(doomed), _PURGE_CHUNK):
        chunk = doomed[start : start + _PURGE_CHUNK]
        connection.execute(delete(STEPS).where(STEPS.c.run_id.in_(chunk)))
        connection.execute(delete(DECISIONS).where(DECISIONS.c.run_id.in_(chunk)))
        connection.execute(delete(SUSPENSIONS).where(SUSPENSIONS.c.run_id.in_(chunk)))
        connection.execute(delete(RUNS).where(RUNS.c.id.in_(chunk)))
    return doomed

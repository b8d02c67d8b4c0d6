"""The audit store: runs, their privacy-filtered steps and gate decisions, one commit per write."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Self, final

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    and_,
    bindparam,
    delete,
    func,
    insert,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError

from nrllm_core import _json
from nrllm_core._payloads import AuditRecord
from nrllm_core._trace_context import checked_trace_context
from nrllm_core.log import logger
from nrllm_core.store._chain import (
    STEP_FIELDS,
    ChainBreak,
    ChainCheck,
    ChainKey,
    Problem,
    chain_key,
    find_break,
    initial_mac,
    step_mac,
)
from nrllm_core.store._database import (
    SchemaOutdatedError,
    current_revisions,
    engine_for,
    head_revisions,
    run_upgrade,
)
from nrllm_core.store._models import (
    AuditKeyRow,
    ConsumedApprovalRow,
    DecisionRow,
    RunRow,
    StepRow,
    SuspensionRow,
    UTCDateTime,
)
from nrllm_core.store._records import (
    GateDecisionRecord,
    PurgeResult,
    RunDetail,
    RunInfo,
    RunKind,
    RunStatus,
    StoredStep,
    Suspension,
)

__all__ = ["Store"]

_SETTLED: Final = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.AWAITING_APPROVAL}
)
_OPEN: Final = (RunStatus.RUNNING.value, RunStatus.AWAITING_APPROVAL.value)
_FINISHED: Final = tuple(s.value for s in RunStatus if s.is_finished)
_PURGE_CHUNK: Final = 500
# How many runs' heads a store remembers; past it, it forgets them all and reads them again.
_HEADS_KEPT: Final = 1_024

# Built once: composing a statement costs more than executing it on SQLite.
_INSERT_STEP: Final = insert(StepRow)
# FOR UPDATE: two writers of one run on PostgreSQL never chain from the same head (SQLite
# has one writer at a time already).
_CHAIN_HEAD: Final = (
    select(RunRow.chain_head).where(RunRow.id == bindparam("target")).with_for_update()
)
# Moves the head only from the one the step was chained to: a compare-and-set, so a head this
# store remembered but another writer moved meanwhile is caught, never forked.
_COUNT_STEP: Final = (
    update(RunRow)
    .where(RunRow.id == bindparam("target"), RunRow.chain_head == bindparam("previous"))
    .values(
        steps=RunRow.steps + 1,
        chain_head=bindparam("head"),
        heartbeat_at=bindparam("now", type_=UTCDateTime),
        prompt_tokens=RunRow.prompt_tokens + bindparam("prompt", type_=BigInteger),
        completion_tokens=RunRow.completion_tokens + bindparam("completion", type_=BigInteger),
    )
)

_SETTLE: Final = (
    update(RunRow)
    .where(RunRow.id == bindparam("target"), RunRow.status.in_(_OPEN))
    .values(
        status=bindparam("new_status"),
        termination_reason=bindparam("new_reason"),
        heartbeat_at=bindparam("now", type_=UTCDateTime),
        ended_at=bindparam("ended", type_=UTCDateTime),
    )
)
_BLANK_STATE: Final = (
    update(SuspensionRow).where(SuspensionRow.run_id == bindparam("target")).values(sealed=b"")
)


def _utcnow() -> datetime:
    return datetime.now(UTC)


class _HeadMoved(Exception):
    """The run's head is not the one this store remembered: another writer moved it."""


class ClaimRefused(Exception):
    """A suspension or a decision the store cannot accept; ``reason`` is ``not_running`` (a
    suspension), or ``not_awaiting``, ``already_decided`` or ``replayed`` (a claim)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@final
class Store:
    """The audit database. Every write is committed before the method returns.

    Build it with :meth:`open`. A run's lease is its last heartbeat: a run still marked
    ``running`` whose heartbeat is older than ``lease_seconds`` is reported ``interrupted``.
    """

    __slots__ = (
        "_chain_key",
        "_clock",
        "_engine",
        "_environ",
        "_heads",
        "_lease",
        "_leased",
        "_leased_lock",
        "_renewing",
        "_write_lock",
    )

    def __init__(
        self,
        engine: Engine,
        *,
        lease_seconds: int,
        clock: Callable[[], datetime],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._engine = engine
        self._environ = os.environ if environ is None else environ
        # Derived on first use, then fixed: a run's chain never changes key halfway.
        self._chain_key: ChainKey | None = None
        # The head each run had after this store's last write to it: a step then needs no
        # read of the run row first (see _COUNT_STEP for why a stale one is harmless).
        self._heads: dict[str, str] = {}
        self._lease = timedelta(seconds=lease_seconds)
        self._clock = clock
        # SQLite has one writer at a time; queueing this process's threads here is fairer and
        # much faster than letting them poll SQLite's busy handler.
        self._write_lock: contextlib.AbstractContextManager[Any] = (
            threading.Lock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()
        )
        # Runs this process is working on; one background thread renews all their leases.
        self._leased: set[str] = set()
        self._leased_lock = threading.Lock()
        self._renewing = False

    @classmethod
    def open(
        cls,
        url: str | None,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        lease_seconds: int = 60,
        clock: Callable[[], datetime] = _utcnow,
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
        elif current != head_revisions():
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
        clock: Callable[[], datetime] = _utcnow,
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
        existed are chained with this store's key."""
        with self._write_lock:
            run_upgrade(self._engine, self._environ)

    def close(self) -> None:
        self._engine.dispose()

    @contextlib.contextmanager
    def _write(self) -> Iterator[Connection]:
        with self._write_lock, self._engine.begin() as connection:
            yield connection

    def _key(self) -> ChainKey:
        if self._chain_key is None:
            self._chain_key = chain_key(self._environ, self._stored_key)
        return self._chain_key

    def _stored_key(self) -> bytes:
        with self._engine.connect() as connection:
            secret = connection.execute(
                select(AuditKeyRow.secret).where(AuditKeyRow.id == 1)
            ).scalar_one_or_none()
        if not secret:
            # Never made up again: a new key would turn every stored chain into a break.
            raise LookupError("the audit database has lost its chain key (table audit_keys)")
        return bytes(secret)

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
        now = self._clock()
        head = initial_mac(self._key(), run_id)
        with self._write() as connection:
            connection.execute(
                insert(RunRow),
                {
                    "id": run_id,
                    "kind": RunKind(kind).value,
                    "status": RunStatus.RUNNING.value,
                    "provider": provider,
                    "zone": zone,
                    "skill": skill,
                    "actor": actor,
                    "started_at": now,
                    "ended_at": None,
                    "heartbeat_at": now,
                    "termination_reason": None,
                    "steps": 0,
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "chain_head": head,
                },
            )
        self._remember(run_id, head)

    def record_step(self, record: AuditRecord) -> None:
        """Persist one step, chained to its run's head, and renew the run's lease, in one
        committed transaction.

        Raises when the step cannot be stored: an unknown run, a sequence number already
        taken, a payload with no canonical JSON form, a run whose chain head is gone, or a
        database error.
        """
        key = self._key()
        row = {
            "run_id": record.run_id,
            "sequence": record.sequence,
            "kind": record.kind.value,
            "round": record.round,
            # As the column reads it back, so that the mac checks out later.
            "duration_ms": float(record.duration_ms),
            "payload": _json.dumps(dict(record.payload)).decode(),
            "recorded_at": self._clock(),
        }
        try:
            mac = self._chain_step(record, key, row, remembered=True)
        except _HeadMoved:
            mac = self._chain_step(record, key, row, remembered=False)
        self._remember(record.run_id, mac)

    def _chain_step(
        self, record: AuditRecord, key: ChainKey, row: dict[str, Any], *, remembered: bool
    ) -> str:
        with self._write() as connection:
            previous = self._heads.get(record.run_id) if remembered else None
            if previous is None:
                run = connection.execute(_CHAIN_HEAD, {"target": record.run_id}).one_or_none()
                if run is None:
                    raise LookupError(f'no run "{record.run_id}" to record a step of')
                if run.chain_head is None:
                    raise ValueError(f'run "{record.run_id}" has lost its audit chain head')
                previous = run.chain_head
            mac = step_mac(key, previous, row)
            connection.execute(_INSERT_STEP, {**row, "mac": mac})
            moved = connection.execute(
                _COUNT_STEP,
                {
                    "target": record.run_id,
                    "previous": previous,
                    "head": mac,
                    "now": row["recorded_at"],
                    "prompt": _count(record.payload, "prompt_tokens"),
                    "completion": _count(record.payload, "completion_tokens"),
                },
            )
            if moved.rowcount != 1:
                # Rolled back with the step; read under the row lock, the head cannot move.
                self._heads.pop(record.run_id, None)
                raise _HeadMoved
        return mac

    def _remember(self, run_id: str, head: str) -> None:
        if len(self._heads) >= _HEADS_KEPT:
            self._heads.clear()
        self._heads[run_id] = head

    def record_decisions(self, run_id: str, decisions: Iterable[GateDecisionRecord]) -> None:
        """Persist a turn's gate decisions together."""
        now = self._clock()
        rows = [
            {
                "run_id": run_id,
                "tool": d.tool,
                "reason": d.reason,
                "zone": d.zone,
                "ceiling": d.ceiling,
                "observed": d.observed,
                "decided_at": now,
            }
            for d in decisions
        ]
        if not rows:
            return
        with self._write() as connection:
            connection.execute(insert(DecisionRow), rows)

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
        interval = max(self._lease.total_seconds() / 3, 0.05)
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
        with self._write() as connection:
            result = connection.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.status == RunStatus.RUNNING.value)
                .values(heartbeat_at=self._clock())
            )
        return result.rowcount == 1

    def finish_run(
        self, run_id: str, status: RunStatus, termination_reason: str | None = None
    ) -> bool:
        """Settle a running or suspended run; ``False`` when there was no such run to settle.

        ``completed`` and ``failed`` are final and stamp ``ended_at``; ``awaiting_approval``
        parks the run until a decision.
        """
        status = RunStatus(status)
        if status not in _SETTLED:
            raise ValueError(f"a run cannot be settled as {status.value!r}")
        now = self._clock()
        with self._write() as connection:
            result = connection.execute(
                _SETTLE,
                {
                    "target": run_id,
                    "new_status": status.value,
                    "new_reason": termination_reason,
                    "now": now,
                    "ended": now if status.is_finished else None,
                },
            )
            if status.is_finished:
                # A finished run can never resume: its sealed state is no longer kept.
                connection.execute(_BLANK_STATE, {"target": run_id})
        return result.rowcount == 1

    def suspend_run(
        self,
        run_id: str,
        *,
        sealed: bytes,
        turn_digest: str,
        trace_context: Mapping[str, str] | None = None,
    ) -> None:
        """Park a running run on a turn that waits for a person, with its sealed state and,
        next to it, the W3C ``trace_context`` its resumption continues.

        Raises unless the run was running: a state that is not stored is never promised.
        """
        now = self._clock()
        with self._write() as connection:
            parked = connection.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.status == RunStatus.RUNNING.value)
                .values(status=RunStatus.AWAITING_APPROVAL.value, heartbeat_at=now)
            )
            if parked.rowcount != 1:
                raise ClaimRefused(f'run "{run_id}" is not running', "not_running")
            # A run suspends once per turn that needs approval; only the latest turn is open.
            connection.execute(delete(SuspensionRow).where(SuspensionRow.run_id == run_id))
            connection.execute(
                insert(SuspensionRow),
                {
                    "run_id": run_id,
                    "sealed": sealed,
                    "turn_digest": turn_digest,
                    "suspended_at": now,
                    "decided_at": None,
                    "decision": None,
                    "approver": None,
                    "trace_context": None
                    if trace_context is None
                    else _json.dumps(dict(trace_context)).decode(),
                },
            )

    def suspension(self, run_id: str) -> Suspension | None:
        """The run's undecided suspended turn, or ``None``."""
        query = (
            select(SuspensionRow)
            .join(RunRow, RunRow.id == SuspensionRow.run_id)
            .where(
                SuspensionRow.run_id == run_id,
                SuspensionRow.decided_at.is_(None),
                RunRow.status == RunStatus.AWAITING_APPROVAL.value,
            )
        )
        with self._engine.connect() as connection:
            row = connection.execute(query).one_or_none()
        if row is None:
            return None
        return Suspension(
            run_id=row.run_id,
            sealed=row.sealed,
            turn_digest=row.turn_digest,
            suspended_at=row.suspended_at,
            trace_context=checked_trace_context(
                None if row.trace_context is None else _json.loads(row.trace_context)
            ),
        )

    def claim_suspension(
        self, run_id: str, *, turn_digest: str, nonce: str, decision: str, approver: str
    ) -> bytes:
        """Record who decided what on which turn, consume the sealed state's ``nonce`` and
        reopen the run, in one transaction, and return the sealed state that was claimed.

        Exactly one claim of a turn succeeds, across processes and machines: a second one, or
        one naming another digest, raises :class:`ClaimRefused`; so does a nonce consumed
        before (``replayed``), even if the suspension's row was put back since.
        """
        now = self._clock()
        with self._write() as connection:
            claimed = connection.execute(
                update(SuspensionRow)
                .where(
                    SuspensionRow.run_id == run_id,
                    SuspensionRow.turn_digest == turn_digest,
                    SuspensionRow.decided_at.is_(None),
                )
                .values(decided_at=now, decision=decision, approver=approver)
            )
            if claimed.rowcount != 1:
                raise ClaimRefused(
                    "the turn was already decided, or the digest is stale", "already_decided"
                )
            try:
                connection.execute(
                    insert(ConsumedApprovalRow),
                    {"nonce": nonce, "run_id": run_id, "consumed_at": now},
                )
            except IntegrityError:
                raise ClaimRefused(
                    "this suspended turn was decided before (replayed); it cannot be decided again",
                    "replayed",
                ) from None
            reopened = connection.execute(
                update(RunRow)
                .where(RunRow.id == run_id, RunRow.status == RunStatus.AWAITING_APPROVAL.value)
                .values(status=RunStatus.RUNNING.value, heartbeat_at=now)
            )
            if reopened.rowcount != 1:
                raise ClaimRefused(f'run "{run_id}" is not awaiting approval', "not_awaiting")
            sealed: bytes = connection.execute(
                select(SuspensionRow.sealed).where(SuspensionRow.run_id == run_id)
            ).scalar_one()
        return sealed

    def last_sequence(self, run_id: str) -> int:
        """The highest stored step number of the run (0 when none)."""
        query = select(func.max(StepRow.sequence)).where(StepRow.run_id == run_id)
        with self._engine.connect() as connection:
            value = connection.execute(query).scalar()
        return int(value or 0)

    def purge(self, days: int, unfinished_days: int) -> PurgeResult:
        """Delete finished runs that ended more than ``days`` ago, and unfinished runs started
        more than ``unfinished_days`` ago, with their steps and decisions.

        A run that is still alive (its lease is current) is never purged. A window below one
        day is refused: zero must never mean "everything".
        """
        if days < 1 or unfinished_days < 1:
            raise ValueError("retention windows are whole days, at least 1")
        now = self._clock()
        finished = and_(RunRow.status.in_(_FINISHED), RunRow.ended_at < now - timedelta(days=days))
        unfinished = and_(
            RunRow.status.in_(_OPEN),
            RunRow.started_at < now - timedelta(days=unfinished_days),
            or_(RunRow.status != RunStatus.RUNNING.value, RunRow.heartbeat_at < now - self._lease),
        )
        with self._write() as connection:
            return PurgeResult(
                finished=_delete_runs(connection, finished),
                unfinished=_delete_runs(connection, unfinished),
            )

    # -- reading -----------------------------------------------------------------------------

    def verify(self, run_id: str | None = None) -> ChainCheck:
        """Check the audit chain of the run ``run_id``, or of every stored run (``None``).

        A run that is not there is reported missing when it is named; purged runs are simply
        gone. Each run is read in one statement, so a run being written is seen consistently.
        """
        key = self._key()
        query = (
            select(
                RunRow.id.label("chained_run"),
                RunRow.chain_head,
                RunRow.steps,
                *(getattr(StepRow, name) for name in STEP_FIELDS),
                StepRow.mac,
            )
            .select_from(RunRow)
            .outerjoin(StepRow, StepRow.run_id == RunRow.id)
            .order_by(RunRow.id, StepRow.sequence)
        )
        if run_id is not None:
            query = query.where(RunRow.id == run_id)
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

    def list_runs(self, status: RunStatus | None = None) -> list[RunInfo]:
        """Runs, newest first; ``status`` filters on the status as reported."""
        query = select(RunRow).order_by(RunRow.started_at.desc(), RunRow.id)
        if status is not None:
            query = query.where(self._status_is(RunStatus(status)))
        with self._engine.connect() as connection:
            rows = connection.execute(query).all()
        now = self._clock()
        return [self._info(row, now) for row in rows]

    def get_run(self, run_id: str) -> RunDetail | None:
        """A run with every stored step in sequence order, or ``None`` for an unknown id."""
        with self._engine.connect() as connection:
            run = connection.execute(select(RunRow).where(RunRow.id == run_id)).one_or_none()
            if run is None:
                return None
            steps = connection.execute(
                select(StepRow).where(StepRow.run_id == run_id).order_by(StepRow.sequence)
            ).all()
            decisions = connection.execute(
                select(DecisionRow).where(DecisionRow.run_id == run_id).order_by(DecisionRow.id)
            ).all()
        return RunDetail(
            run=self._info(run, self._clock()),
            steps=tuple(
                StoredStep(
                    sequence=s.sequence,
                    kind=s.kind,
                    round=s.round,
                    duration_ms=s.duration_ms,
                    payload=_json.loads(s.payload),
                )
                for s in steps
            ),
            decisions=tuple(
                GateDecisionRecord(
                    tool=d.tool,
                    reason=d.reason,
                    zone=d.zone,
                    ceiling=d.ceiling,
                    observed=d.observed,
                )
                for d in decisions
            ),
        )

    def _status_is(self, status: RunStatus) -> ColumnElement[bool]:
        stale = RunRow.heartbeat_at < self._clock() - self._lease
        running = RunRow.status == RunStatus.RUNNING.value
        if status is RunStatus.INTERRUPTED:
            return and_(running, stale)
        if status is RunStatus.RUNNING:
            return and_(running, ~stale)
        return RunRow.status == status.value

    def _info(self, row: Any, now: datetime) -> RunInfo:
        status = RunStatus(row.status)
        if status is RunStatus.RUNNING and row.heartbeat_at < now - self._lease:
            status = RunStatus.INTERRUPTED
        return RunInfo(
            run_id=row.id,
            kind=RunKind(row.kind),
            status=status,
            provider=row.provider,
            zone=row.zone,
            skill=row.skill,
            actor=row.actor,
            started_at=row.started_at,
            ended_at=row.ended_at,
            termination_reason=row.termination_reason,
            steps=row.steps,
            prompt_tokens=row.prompt_tokens,
            completion_tokens=row.completion_tokens,
            chain_head=row.chain_head,
        )


def _count(payload: Any, key: str) -> int:
    value = payload.get(key)
    return value if type(value) is int and value > 0 else 0


def _delete_runs(connection: Connection, condition: ColumnElement[bool]) -> int:
    # The ids are fixed first so that the steps, decisions and runs deleted are the same runs
    # even if another host settles one of them meanwhile.
    doomed = list(connection.execute(select(RunRow.id).where(condition)).scalars())
    for start in range(0, len(doomed), _PURGE_CHUNK):
        chunk = doomed[start : start + _PURGE_CHUNK]
        connection.execute(delete(StepRow).where(StepRow.run_id.in_(chunk)))
        connection.execute(delete(DecisionRow).where(DecisionRow.run_id.in_(chunk)))
        connection.execute(delete(SuspensionRow).where(SuspensionRow.run_id.in_(chunk)))
        connection.execute(delete(RunRow).where(RunRow.id.in_(chunk)))
    return len(doomed)

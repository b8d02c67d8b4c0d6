"""What the audit store does over one database connection.

``Store`` calls these with a connection of its thread. A writing operation runs inside a
transaction ``Store`` began and commits (or rolls back, when it raises), so that several
operations can share one commit: a step whose head moved is chained again from
the stored head in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, final

import attrs
from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    and_,
    bindparam,
    cast,
    delete,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from nrllm_core import _json
from nrllm_core._payloads import AuditRecord
from nrllm_core._trace_context import checked_trace_context
from nrllm_core.store._chain import ChainHead, ChainKey, chain_key, head_mac, step_mac
from nrllm_core.store._database import execute_rows
from nrllm_core.store._models import (
    AUDIT_KEYS,
    CONSUMED_APPROVALS,
    DECISIONS,
    RUNS,
    STEPS,
    SUSPENSIONS,
    UTCDateTime,
)
from nrllm_core.store._records import (
    GateDecisionRecord,
    RunCursor,
    RunDetail,
    RunFilter,
    RunInfo,
    RunKind,
    RunStatus,
    StoredStep,
    Suspension,
)

__all__ = [
    "OPEN",
    "ChainHeads",
    "ClaimRefused",
    "NewStep",
    "cancel_suspension",
    "claim_suspension",
    "decision_rows",
    "due_suspensions",
    "finish_run",
    "get_run",
    "heartbeat",
    "last_sequence",
    "list_runs",
    "read_chain_key",
    "record_decisions",
    "record_steps",
    "renewal_interval",
    "start_run",
    "suspend_run",
    "suspension",
    "utcnow",
]

_SETTLED: Final = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.AWAITING_APPROVAL}
)
OPEN: Final = (RunStatus.RUNNING.value, RunStatus.AWAITING_APPROVAL.value)
# How many runs' heads a store remembers; past it, it forgets them all and reads them again.
_HEADS_KEPT: Final = 1_024

# Built once: composing a statement (and its compiled cache's key) costs more than executing
# it on SQLite.
_INSERT_RUN: Final = insert(RUNS)
_INSERT_STEP: Final = insert(STEPS)
_INSERT_DECISIONS: Final = insert(DECISIONS)
# FOR UPDATE: two writers of one run on PostgreSQL never chain from the same head (SQLite
# has one writer at a time already).
_CHAIN_HEAD: Final = (
    select(RUNS.c.steps, RUNS.c.last_mac, RUNS.c.chain_head)
    .where(RUNS.c.id == bindparam("target"))
    .with_for_update()
)
# Moves the head only from the one the step was chained to: a compare-and-set, so a head this
# store remembered but another writer moved meanwhile is caught, never forked. The head
# authenticates the count and the last mac, so comparing it compares all three.
_COUNT_STEP: Final = (
    update(RUNS)
    .where(RUNS.c.id == bindparam("target"), RUNS.c.chain_head == bindparam("previous"))
    .values(
        steps=bindparam("count"),
        last_mac=bindparam("last"),
        chain_head=bindparam("head"),
        heartbeat_at=bindparam("now", type_=UTCDateTime),
        prompt_tokens=RUNS.c.prompt_tokens + bindparam("prompt", type_=BigInteger),
        completion_tokens=RUNS.c.completion_tokens + bindparam("completion", type_=BigInteger),
    )
)

# The open statuses (``OPEN``) are parameters each row names, like the rest, so that
# ``execute_rows`` can run it through SQLite's own cursor with the SQL compiled once
# (``in_(OPEN)`` was rendered anew on every execution).
_SETTLE: Final = (
    update(RUNS)
    .where(
        RUNS.c.id == bindparam("target"),
        RUNS.c.status.in_([bindparam(f"open_{status}") for status in OPEN]),
    )
    .values(
        status=bindparam("new_status"),
        termination_reason=bindparam("new_reason"),
        heartbeat_at=bindparam("now", type_=UTCDateTime),
        ended_at=bindparam("ended", type_=UTCDateTime),
    )
)
_BLANK_STATE: Final = (
    update(SUSPENSIONS)
    .where(SUSPENSIONS.c.run_id == bindparam("target"))
    .values(sealed=bindparam("blank"))
)


def utcnow() -> datetime:
    return datetime.now(UTC)


def renewal_interval(lease: timedelta) -> float:
    """How often a leased run's heartbeat is renewed: three times per lease."""
    return max(lease.total_seconds() / 3, 0.05)


class _HeadMoved(Exception):
    """A run's head is not the one this store remembered: another writer moved it."""


class ClaimRefused(Exception):
    """A suspension or a decision the store cannot accept; ``reason`` is ``not_running`` (a
    suspension), or ``not_awaiting``, ``already_decided`` or ``replayed`` (a claim)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@final
class ChainHeads:
    """The head each run had after a store's last write to it: a step then needs no read of
    the run row first (see ``_COUNT_STEP`` for why a stale one is harmless)."""

    __slots__ = ("_heads",)

    def __init__(self) -> None:
        self._heads: dict[str, ChainHead] = {}

    def get(self, run_id: str) -> ChainHead | None:
        return self._heads.get(run_id)

    def remember(self, run_id: str, head: ChainHead) -> None:
        if len(self._heads) >= _HEADS_KEPT:
            self._heads.clear()
        self._heads[run_id] = head

    def forget(self, run_id: str) -> None:
        self._heads.pop(run_id, None)


def read_chain_key(connection: Connection, environ: Mapping[str, str]) -> ChainKey:
    """The chain's key from ``environ``, else the one kept in the database."""

    def stored() -> bytes:
        try:
            secret = connection.execute(
                select(AUDIT_KEYS.c.secret).where(AUDIT_KEYS.c.id == 1)
            ).scalar_one_or_none()
        except SQLAlchemyError:
            # Dropped, altered or withheld from this user: the driver's text quotes the query
            # over several lines, so the problem is named instead.
            raise LookupError(
                "the audit database's chain key cannot be read: the table audit_keys is "
                "missing or unreadable"
            ) from None
        if not secret:
            # Never made up again: a new key would turn every stored chain into a break.
            raise LookupError("the audit database has lost its chain key (table audit_keys)")
        return bytes(secret)

    return chain_key(environ, stored)


# -- writing ---------------------------------------------------------------------------------


def start_run(
    connection: Connection,
    key: ChainKey,
    heads: ChainHeads,
    run_id: str,
    *,
    kind: RunKind,
    provider: str | None,
    zone: str | None,
    skill: str | None,
    actor: str | None,
    now: datetime,
) -> None:
    head = ChainHead.start(key, run_id)
    execute_rows(
        connection,
        _INSERT_RUN,
        [
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
                "last_mac": head.last,
                "chain_head": head.head,
            }
        ],
    )
    heads.remember(run_id, head)


@final
@attrs.frozen
class NewStep:
    """A step ready to be chained: its row without the mac, and the tokens it adds to its run."""

    row: dict[str, Any]
    prompt_tokens: int
    completion_tokens: int

    @classmethod
    def of(cls, record: AuditRecord, now: datetime) -> NewStep:
        """``record`` as stored when recorded at ``now``; raises for a payload with no
        canonical JSON form."""
        row = {
            "run_id": record.run_id,
            "sequence": record.sequence,
            "kind": record.kind.value,
            "round": record.round,
            # As the column reads it back, so that the mac checks out later.
            "duration_ms": float(record.duration_ms),
            "payload": _payload_text(record.payload),
            "recorded_at": now,
        }
        return cls(
            row,
            _count(record.payload, "prompt_tokens"),
            _count(record.payload, "completion_tokens"),
        )


def record_steps(
    connection: Connection, key: ChainKey, heads: ChainHeads, steps: Sequence[NewStep]
) -> None:
    """Chain ``steps`` to their runs' heads, each run's steps in the order given, and move each
    head past them: the steps are inserted in one statement, the heads moved in another.

    When the head of a run moved since this store last wrote it, steps of that one run are
    chained again from the stored head in the same transaction; steps of several runs raise
    instead, for the caller to roll back and write them run by run.
    """
    runs: dict[str, list[NewStep]] = {}
    for step in steps:
        runs.setdefault(step.row["run_id"], []).append(step)
    try:
        _chain_steps(connection, key, heads, runs)
    except _HeadMoved:
        if len(runs) > 1:
            raise
        heads.forget(steps[0].row["run_id"])
        _chain_steps(connection, key, heads, runs)


def _chain_steps(
    connection: Connection, key: ChainKey, heads: ChainHeads, runs: Mapping[str, list[NewStep]]
) -> None:
    moves, chained, after = [], [], {}
    for run_id, steps in runs.items():
        previous = heads.get(run_id) or _stored_head(connection, key, run_id)
        head = previous
        for step in steps:
            mac = step_mac(key, head.last, step.row)
            head = head.after(key, run_id, mac)
            chained.append({**step.row, "mac": mac})
        moves.append(
            {
                "target": run_id,
                "previous": previous.head,
                "count": head.count,
                "last": head.last,
                "head": head.head,
                "now": steps[-1].row["recorded_at"],
                "prompt": sum(step.prompt_tokens for step in steps),
                "completion": sum(step.completion_tokens for step in steps),
            }
        )
        after[run_id] = head
    # The heads first: when the one head moved, nothing was written, and the steps can be
    # chained again from the stored head within the same transaction.
    if execute_rows(connection, _COUNT_STEP, moves) != len(moves):
        # Read under the row lock, a stored head cannot move.
        raise _HeadMoved
    execute_rows(connection, _INSERT_STEP, chained)
    for run_id, head in after.items():
        heads.remember(run_id, head)


def _stored_head(connection: Connection, key: ChainKey, run_id: str) -> ChainHead:
    """The run row's head, read under its lock, once it is known to hold.

    A count and last mac its head does not authenticate were set by hand (a run cut short,
    say): chaining on from them would give that edit a head that holds.
    """
    run = connection.execute(_CHAIN_HEAD, {"target": run_id}).one_or_none()
    if run is None:
        raise LookupError(f'no run "{run_id}" to record a step of')
    if run.chain_head is None or run.last_mac is None:
        raise ValueError(f'run "{run_id}" has lost its audit chain head')
    if run.chain_head != head_mac(key, run_id, run.steps, run.last_mac):
        raise ValueError(
            f'the audit chain head of run "{run_id}" does not hold; '
            "`nrllm runs verify` names where the chain breaks"
        )
    return ChainHead(count=run.steps, last=run.last_mac, head=run.chain_head)


def _count(payload: Any, key: str) -> int:
    value = payload.get(key)
    return value if type(value) is int and value > 0 else 0


def decision_rows(
    run_id: str, decisions: Iterable[GateDecisionRecord], now: datetime
) -> list[dict[str, Any]]:
    """The rows of a turn's gate decisions; none means nothing to write."""
    return [
        {
            "run_id": run_id,
            "tool": _name_column(d.tool),
            "reason": d.reason,
            "zone": d.zone,
            "ceiling": d.ceiling,
            "observed": d.observed,
            "decided_at": now,
        }
        for d in decisions
    ]


# PostgreSQL's text holds no NUL, nor its JSON (the index of tool steps reads the payload as
# JSON): a NUL in a step, which any tool, model or client may send, is stored as U+FFFD on
# every backend alike, before the step is chained.
_NUL_STORED: Final = "\N{REPLACEMENT CHARACTER}"


def _name_column(name: str) -> str:
    """A tool's name as its column holds it on every backend: a caller may ask for any name
    (an MCP client's call of a tool that does not exist), and PostgreSQL refuses a NUL or
    more than 255 characters, which would lose the steps written with it. The gate step
    keeps the name as asked (its NULs as the payload's)."""
    return name.replace("\x00", _NUL_STORED)[:255]


def _payload_text(payload: Mapping[str, Any]) -> str:
    text = _json.dumps(dict(payload)).decode()
    if "\\u0000" not in text:
        return text
    return _json.dumps(_without_nul(dict(payload))).decode()


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", _NUL_STORED)
    if isinstance(value, Mapping):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(v) for v in value]
    return value


def record_decisions(connection: Connection, rows: list[dict[str, Any]]) -> None:
    connection.execute(_INSERT_DECISIONS, rows)


def heartbeat(connection: Connection, run_id: str, now: datetime) -> bool:
    result = connection.execute(
        update(RUNS)
        .where(RUNS.c.id == run_id, RUNS.c.status == RunStatus.RUNNING.value)
        .values(heartbeat_at=now)
    )
    return result.rowcount == 1


def finish_run(
    connection: Connection,
    run_id: str,
    status: RunStatus,
    termination_reason: str | None,
    now: datetime,
) -> bool:
    status = RunStatus(status)
    if status not in _SETTLED:
        raise ValueError(f"a run cannot be settled as {status.value!r}")
    settled = execute_rows(
        connection,
        _SETTLE,
        [
            {
                "target": run_id,
                **{f"open_{status}": status for status in OPEN},
                "new_status": status.value,
                "new_reason": termination_reason,
                "now": now,
                "ended": now if status.is_finished else None,
            }
        ],
    )
    if status.is_finished:
        # A finished run can never resume: its sealed state is no longer kept.
        execute_rows(connection, _BLANK_STATE, [{"target": run_id, "blank": b""}])
    return settled == 1


def suspend_run(
    connection: Connection,
    run_id: str,
    *,
    sealed: bytes,
    turn_digest: str,
    trace_context: Mapping[str, str] | None,
    expires_at: datetime | None,
    now: datetime,
) -> None:
    if not _move(connection, run_id, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL, now):
        raise ClaimRefused(f'run "{run_id}" is not running', "not_running")
    # A run suspends once per turn that needs approval; only the latest turn is open.
    connection.execute(delete(SUSPENSIONS).where(SUSPENSIONS.c.run_id == run_id))
    connection.execute(
        insert(SUSPENSIONS),
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
            "expires_at": expires_at,
        },
    )


def claim_suspension(
    connection: Connection,
    run_id: str,
    *,
    turn_digest: str,
    nonce: str,
    decision: str,
    approver: str,
    now: datetime,
) -> bytes:
    claimed = connection.execute(
        update(SUSPENSIONS)
        .where(
            SUSPENSIONS.c.run_id == run_id,
            SUSPENSIONS.c.turn_digest == turn_digest,
            SUSPENSIONS.c.decided_at.is_(None),
        )
        .values(decided_at=now, decision=decision, approver=approver)
    )
    if claimed.rowcount != 1:
        raise ClaimRefused(
            "the turn was already decided, or the digest is stale", "already_decided"
        )
    try:
        connection.execute(
            insert(CONSUMED_APPROVALS),
            {"nonce": nonce, "run_id": run_id, "consumed_at": now},
        )
    except IntegrityError:
        raise ClaimRefused(
            "this suspended turn was decided before (replayed); it cannot be decided again",
            "replayed",
        ) from None
    if not _move(connection, run_id, RunStatus.AWAITING_APPROVAL, RunStatus.RUNNING, now):
        raise ClaimRefused(f'run "{run_id}" is not awaiting approval', "not_awaiting")
    sealed: bytes = connection.execute(
        select(SUSPENSIONS.c.sealed).where(SUSPENSIONS.c.run_id == run_id)
    ).scalar_one()
    return sealed


def cancel_suspension(connection: Connection, run_id: str, *, by: str, now: datetime) -> bool:
    """Decide the run's open turn as cancelled by ``by`` and settle the run ``cancelled`` (its
    sealed state blanked); ``False`` when it has no undecided turn."""
    decided = connection.execute(
        update(SUSPENSIONS)
        .where(SUSPENSIONS.c.run_id == run_id, SUSPENSIONS.c.decided_at.is_(None))
        .values(decided_at=now, decision="cancelled", approver=by)
    )
    if decided.rowcount != 1:
        return False
    if not finish_run(connection, run_id, RunStatus.CANCELLED, "cancelled", now):
        # An undecided turn of a run that is not open: nothing of this is kept.
        raise ClaimRefused(f'run "{run_id}" is not awaiting approval', "not_awaiting")
    return True


def _move(
    connection: Connection, run_id: str, source: RunStatus, target: RunStatus, now: datetime
) -> bool:
    moved = connection.execute(
        update(RUNS)
        .where(RUNS.c.id == run_id, RUNS.c.status == source.value)
        .values(status=target.value, heartbeat_at=now)
    )
    return moved.rowcount == 1


# -- reading ---------------------------------------------------------------------------------


def suspension(connection: Connection, run_id: str) -> Suspension | None:
    query = (
        select(SUSPENSIONS)
        .join(RUNS, RUNS.c.id == SUSPENSIONS.c.run_id)
        .where(
            SUSPENSIONS.c.run_id == run_id,
            SUSPENSIONS.c.decided_at.is_(None),
            RUNS.c.status == RunStatus.AWAITING_APPROVAL.value,
        )
    )
    row = connection.execute(query).one_or_none()
    if row is None:
        return None
    return Suspension(
        run_id=row.run_id,
        sealed=row.sealed,
        turn_digest=row.turn_digest,
        suspended_at=row.suspended_at,
        trace_context=_stored_trace_context(row.trace_context),
    )


def _stored_trace_context(raw: str | None) -> dict[str, str] | None:
    """A suspension's stored trace context, or ``None`` when it cannot be read: it only links
    traces, so a damaged one must not keep its run from being listed, decided or cancelled."""
    try:
        return checked_trace_context(None if raw is None else _json.loads(raw))
    except ValueError:
        return None


def due_suspensions(connection: Connection, kind: str, now: datetime) -> list[str]:
    """The runs of ``kind`` waiting on a turn that expired by ``now``, or whose expiry is not
    known (NULL), oldest first."""
    query = (
        select(SUSPENSIONS.c.run_id)
        .join(RUNS, RUNS.c.id == SUSPENSIONS.c.run_id)
        .where(
            SUSPENSIONS.c.decided_at.is_(None),
            or_(SUSPENSIONS.c.expires_at.is_(None), SUSPENSIONS.c.expires_at <= now),
            RUNS.c.status == RunStatus.AWAITING_APPROVAL.value,
            RUNS.c.kind == kind,
        )
        .order_by(SUSPENSIONS.c.suspended_at, SUSPENSIONS.c.run_id)
    )
    return list(connection.execute(query).scalars())


def last_sequence(connection: Connection, run_id: str) -> int:
    query = select(func.max(STEPS.c.sequence)).where(STEPS.c.run_id == run_id)
    return int(connection.execute(query).scalar() or 0)


def list_runs(
    connection: Connection,
    where: RunFilter,
    *,
    now: datetime,
    lease: timedelta,
    after: RunCursor | None = None,
    limit: int | None = None,
) -> list[RunInfo]:
    """Runs newest first, ties by run id descending: the order a cursor continues, on the
    ``(started_at, id)`` index or the one of the column filtered on."""
    silent_since = now - lease
    order = (RUNS.c.started_at.desc(), RUNS.c.id.desc())
    query = select(RUNS).order_by(*order)
    if where.status is not None:
        query = query.where(_status_is(RunStatus(where.status), silent_since))
    if where.kind is not None:
        query = query.where(RUNS.c.kind == where.kind.value)
    if where.provider is not None:
        query = query.where(RUNS.c.provider == where.provider)
    if where.actor is not None:
        query = query.where(RUNS.c.actor == where.actor)
    if where.started_after is not None:
        query = query.where(RUNS.c.started_at >= where.started_after)
    if where.started_before is not None:
        query = query.where(RUNS.c.started_at < where.started_before)
    if where.tool is not None:
        query = query.where(RUNS.c.id.in_(_runs_calling(connection.dialect.name, where.tool)))
    if after is not None:
        # Spelled out rather than as a row value: both backends turn it into one index range.
        query = query.where(
            or_(
                RUNS.c.started_at < after.started_at,
                and_(RUNS.c.started_at == after.started_at, RUNS.c.id < after.run_id),
            )
        )
    if limit is not None:
        query = query.limit(limit)
    return [_info(row, silent_since) for row in connection.execute(query).all()]


# Tool steps only, the kind as a literal: the partial index of migration 0007 holds these
# rows, and a backend uses a partial index only for a query that names its condition as is.
_TOOL_STEP: Final = STEPS.c.kind == literal_column("'tool'")


def _runs_calling(dialect: str, tool: str) -> Select[tuple[str]]:
    """The ids of runs with a tool step named ``tool``, read on the expression index of
    migration 0007 (the expression here is the indexed one, to the letter)."""
    if dialect == "postgresql":
        # Here, not at the top: only this query needs PostgreSQL's types.
        from sqlalchemy.dialects.postgresql import JSONB

        name: ColumnElement[Any] = cast(STEPS.c.payload, JSONB).op("->>")(
            literal_column("'tool_name'")
        )
    else:
        name = func.json_extract(STEPS.c.payload, literal_column("'$.tool_name'"))
    return select(STEPS.c.run_id).where(_TOOL_STEP, name == tool)


def get_run(
    connection: Connection, run_id: str, *, now: datetime, lease: timedelta
) -> RunDetail | None:
    run = connection.execute(select(RUNS).where(RUNS.c.id == run_id)).one_or_none()
    if run is None:
        return None
    steps = connection.execute(
        select(STEPS).where(STEPS.c.run_id == run_id).order_by(STEPS.c.sequence)
    ).all()
    decisions = connection.execute(
        select(DECISIONS).where(DECISIONS.c.run_id == run_id).order_by(DECISIONS.c.id)
    ).all()
    return RunDetail(
        run=_info(run, now - lease),
        steps=tuple(
            StoredStep(
                sequence=s.sequence,
                kind=s.kind,
                round=s.round,
                duration_ms=s.duration_ms,
                payload=_json.loads(s.payload),
                recorded_at=s.recorded_at,
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


def _status_is(status: RunStatus, silent_since: datetime) -> ColumnElement[bool]:
    stale = RUNS.c.heartbeat_at < silent_since
    running = RUNS.c.status == RunStatus.RUNNING.value
    if status is RunStatus.INTERRUPTED:
        return and_(running, stale)
    if status is RunStatus.RUNNING:
        return and_(running, ~stale)
    return RUNS.c.status == status.value


def _info(row: Any, silent_since: datetime) -> RunInfo:
    status = RunStatus(row.status)
    if status is RunStatus.RUNNING and row.heartbeat_at < silent_since:
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

"""The audit tables as SQLAlchemy Core tables; the migrations, not these, create them.

Core, not the ORM's declarative classes: the store never maps rows to objects, and the ORM and
the mapping cost a short command (``nrllm runs``) about 0.1 s of its start."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    text,
)

__all__ = [
    "AUDIT_KEYS",
    "CONSUMED_APPROVALS",
    "DECISIONS",
    "METADATA",
    "RUNS",
    "STEPS",
    "SUSPENSIONS",
    "UTCDateTime",
]


class UTCDateTime(TypeDecorator[datetime]):
    """A UTC timestamp that reads back timezone-aware on every backend.

    SQLite has no timezone type: values are stored as naive UTC and marked UTC when read.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("audit timestamps must be timezone-aware")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


METADATA: Final = MetaData()

RUNS: Final = Table(
    "runs",
    METADATA,
    Column("id", String(64), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("status", String(32), nullable=False),
    Column("provider", String(255)),
    Column("zone", String(32)),
    Column("skill", String(255)),
    Column("actor", String(255)),
    Column("started_at", UTCDateTime, nullable=False),
    Column("ended_at", UTCDateTime),
    Column("heartbeat_at", UTCDateTime, nullable=False),
    Column("termination_reason", String(64)),
    Column("steps", Integer, nullable=False),
    Column("prompt_tokens", BigInteger, nullable=False),
    Column("completion_tokens", BigInteger, nullable=False),
    # ``steps`` counts the chained steps and ``last_mac`` is the mac of the last one (the run's
    # initial value before any); ``chain_head`` is the HMAC of both and the run id (see
    # ``_chain``). All three change in each step's transaction.
    Column("last_mac", String(64)),
    Column("chain_head", String(64)),
    Index("ix_runs_status_started_at", "status", "started_at"),
    Index("ix_runs_ended_at", "ended_at"),
    # The listing's order, and the columns it filters on besides status (see 0007).
    Index("ix_runs_started_at_id", "started_at", "id"),
    Index("ix_runs_actor_started_at", "actor", "started_at"),
    Index("ix_runs_provider_started_at", "provider", "started_at"),
)
# ``run_steps`` also has ``ix_run_steps_tool_name``, an index on the tool name inside the
# payload of tool steps: its expression differs by backend, so migration 0007 alone has it.

STEPS: Final = Table(
    "run_steps",
    METADATA,
    # The primary key is the unique (run_id, sequence): a sequence number is stored once.
    Column("run_id", ForeignKey("runs.id"), primary_key=True),
    Column("sequence", Integer, primary_key=True),
    Column("kind", String(32), nullable=False),
    Column("round", Integer, nullable=False),
    Column("duration_ms", Float, nullable=False),
    Column("payload", Text, nullable=False),
    Column("recorded_at", UTCDateTime, nullable=False),
    # HMAC-SHA256 over the previous step's mac and this row (see ``_chain``), as hex.
    Column("mac", String(64)),
)

# A gate decision: who was refused what and why, never the call's arguments or content.
DECISIONS: Final = Table(
    "gate_decisions",
    METADATA,
    Column(
        "id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    ),
    Column("run_id", ForeignKey("runs.id"), nullable=False, index=True),
    Column("tool", String(255), nullable=False),
    Column("reason", String(64)),
    Column("zone", String(32)),
    Column("ceiling", String(64)),
    Column("observed", Boolean, nullable=False),
    Column("decided_at", UTCDateTime, nullable=False),
)

# A suspended turn no decision has reached yet.
_OPEN_TURN: Final = text("decided_at IS NULL")

# A run's suspended turn: its sealed state, and the one decision it can receive.
SUSPENSIONS: Final = Table(
    "suspensions",
    METADATA,
    Column("run_id", ForeignKey("runs.id"), primary_key=True),
    # AES-GCM sealed, bound to the run id; blanked once the run ends.
    Column("sealed", LargeBinary, nullable=False),
    Column("turn_digest", String(64), nullable=False),
    Column("suspended_at", UTCDateTime, nullable=False),
    Column("decided_at", UTCDateTime),
    Column("decision", String(16)),
    Column("approver", String(255)),
    # JSON of the segment's W3C trace context: observability metadata, not part of the state.
    Column("trace_context", Text),
    # When the turn expires, as its sealed state says: which open turns a sweep opens (0008).
    # NULL: suspended before that revision, or by a caller that did not say; unknown.
    Column("expires_at", UTCDateTime),
    # Partial on both backends (migration 0008 gives it the condition on each). PostgreSQL's
    # option is not named here: naming it loads that dialect, 20 ms of every command's start.
    Index("ix_suspensions_open_expires_at", "expires_at", sqlite_where=_OPEN_TURN),
)

# The nonce of a sealed state that was claimed, written in the claim's transaction.
CONSUMED_APPROVALS: Final = Table(
    "consumed_approvals",
    METADATA,
    Column("nonce", String(64), primary_key=True),
    # Not a foreign key: the nonce outlives a purge of its run.
    Column("run_id", String(64), nullable=False),
    Column("consumed_at", UTCDateTime, nullable=False),
)

# The chain key used when no key is set in the environment: one row, made by migration.
AUDIT_KEYS: Final = Table(
    "audit_keys",
    METADATA,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("secret", LargeBinary, nullable=False),
)

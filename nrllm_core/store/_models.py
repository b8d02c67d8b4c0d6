"""The audit tables as SQLAlchemy models; the migrations, not these classes, create them."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

__all__ = [
    "AuditKeyRow",
    "Base",
    "ConsumedApprovalRow",
    "DecisionRow",
    "RunRow",
    "StepRow",
    "SuspensionRow",
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


class Base(DeclarativeBase):
    pass


class RunRow(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_status_started_at", "status", "started_at"),
        Index("ix_runs_ended_at", "ended_at"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(32))
    provider: Mapped[str | None] = mapped_column(String(255))
    zone: Mapped[str | None] = mapped_column(String(32))
    skill: Mapped[str | None] = mapped_column(String(255))
    actor: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(UTCDateTime)
    ended_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime] = mapped_column(UTCDateTime)
    termination_reason: Mapped[str | None] = mapped_column(String(64))
    steps: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(BigInteger)
    completion_tokens: Mapped[int] = mapped_column(BigInteger)
    # ``steps`` counts the chained steps and ``last_mac`` is the mac of the last one (the run's
    # initial value before any); ``chain_head`` is the HMAC of both and the run id (see
    # ``_chain``). All three change in each step's transaction.
    last_mac: Mapped[str | None] = mapped_column(String(64))
    chain_head: Mapped[str | None] = mapped_column(String(64))


class StepRow(Base):
    __tablename__ = "run_steps"

    # The primary key is the unique (run_id, sequence): a sequence number is stored once.
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    sequence: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    round: Mapped[int] = mapped_column(Integer)
    duration_ms: Mapped[float] = mapped_column(Float)
    payload: Mapped[str] = mapped_column(Text)
    recorded_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # HMAC-SHA256 over the previous step's mac and this row (see ``_chain``), as hex.
    mac: Mapped[str | None] = mapped_column(String(64))


class DecisionRow(Base):
    """A gate decision: who was refused what and why, never the call's arguments or content."""

    __tablename__ = "gate_decisions"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), index=True)
    tool: Mapped[str] = mapped_column(String(255))
    reason: Mapped[str | None] = mapped_column(String(64))
    zone: Mapped[str | None] = mapped_column(String(32))
    ceiling: Mapped[str | None] = mapped_column(String(64))
    observed: Mapped[bool] = mapped_column(Boolean)
    decided_at: Mapped[datetime] = mapped_column(UTCDateTime)


class SuspensionRow(Base):
    """A run's suspended turn: its sealed state, and the one decision it can receive."""

    __tablename__ = "suspensions"

    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id"), primary_key=True)
    # AES-GCM sealed, bound to the run id; blanked once the run ends.
    sealed: Mapped[bytes] = mapped_column(LargeBinary)
    turn_digest: Mapped[str] = mapped_column(String(64))
    suspended_at: Mapped[datetime] = mapped_column(UTCDateTime)
    decided_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    decision: Mapped[str | None] = mapped_column(String(16))
    approver: Mapped[str | None] = mapped_column(String(255))
    # JSON of the segment's W3C trace context: observability metadata, not part of the state.
    trace_context: Mapped[str | None] = mapped_column(Text)


class ConsumedApprovalRow(Base):
    """The nonce of a sealed state that was claimed, written in the claim's transaction."""

    __tablename__ = "consumed_approvals"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    # Not a foreign key: the nonce outlives a purge of its run.
    run_id: Mapped[str] = mapped_column(String(64))
    consumed_at: Mapped[datetime] = mapped_column(UTCDateTime)


class AuditKeyRow(Base):
    """The chain key used when no key is set in the environment: one row, made by migration."""

    __tablename__ = "audit_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    secret: Mapped[bytes] = mapped_column(LargeBinary)

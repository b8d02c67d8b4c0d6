"""What the store hands back: runs, their steps and gate decisions, as frozen values."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, final

import attrs

from nrllm_core._status import RunStatus

__all__ = [
    "GateDecisionRecord",
    "PurgeResult",
    "RunCursor",
    "RunDetail",
    "RunFilter",
    "RunInfo",
    "RunKind",
    "RunStatus",
    "StoredStep",
    "Suspension",
]


class RunKind(enum.StrEnum):
    """A model-driven run, one direct ``nrllm invoke`` call, or one call an MCP client made
    through ``nrllm mcp serve``, each recorded as a run."""

    RUN = "run"
    INVOKE = "invoke"
    MCP = "mcp"


@final
@attrs.frozen(kw_only=True)
class RunInfo:
    """One run as the store reports it, with its derived status and totals."""

    run_id: str
    kind: RunKind
    status: RunStatus
    provider: str | None
    zone: str | None
    skill: str | None
    actor: str | None
    started_at: datetime
    ended_at: datetime | None
    termination_reason: str | None
    steps: int
    prompt_tokens: int
    completion_tokens: int
    # The audit chain's head after ``steps`` steps, an HMAC of the run id, the count and the
    # last step's mac: a host that keeps it elsewhere can later tell a run that was deleted,
    # or cut back to a head saved earlier, from one that never went further.
    chain_head: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The keys ``nrllm runs --json`` prints; timestamps in ISO 8601, UTC."""
        return {
            "run_id": self.run_id,
            "status": self.status.value,
            "provider": self.provider,
            "zone": self.zone,
            "skill": self.skill,
            "actor": self.actor,
            "started_at": self.started_at.isoformat(),
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "termination_reason": self.termination_reason,
            "kind": self.kind.value,
        }


@final
@attrs.frozen(kw_only=True)
class RunFilter:
    """Which runs a listing keeps; every field left ``None`` keeps all.

    ``tool`` keeps runs with a tool step of that name, as stored (a name the privacy filter
    masked is stored masked); ``started_after`` is inclusive, ``started_before`` exclusive.
    """

    status: RunStatus | None = None
    kind: RunKind | None = None
    provider: str | None = None
    actor: str | None = None
    tool: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None


@final
@attrs.frozen(kw_only=True)
class RunCursor:
    """Where a page of runs ended: the next page holds the runs listed after this one
    (newest first, then by run id, descending)."""

    started_at: datetime
    run_id: str


@final
@attrs.frozen(kw_only=True)
class StoredStep:
    """One persisted step; ``payload`` is the privacy-filtered copy, as stored.

    ``recorded_at`` is when the store wrote the step (UTC), so about when it ended; ``None``
    for a step built without one.
    """

    sequence: int
    kind: str
    round: int
    duration_ms: float
    payload: Mapping[str, Any]
    recorded_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """The step's keys; ``recorded_at`` in ISO 8601, UTC, or ``None``."""
        return {
            "sequence": self.sequence,
            "kind": self.kind,
            "round": self.round,
            "duration_ms": self.duration_ms,
            "payload": dict(self.payload),
            "recorded_at": _iso_utc(self.recorded_at),
        }


def _iso_utc(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat()


@final
@attrs.frozen(kw_only=True)
class GateDecisionRecord:
    """A gate decision as the audit keeps it: never the call's arguments or any content.

    ``reason`` is ``None`` for a tool the gate let through.
    """

    tool: str
    reason: str | None
    zone: str | None = None
    ceiling: str | None = None
    observed: bool = False


@final
@attrs.frozen(kw_only=True)
class RunDetail:
    """A run with its steps in sequence order and its gate decisions in the order made."""

    run: RunInfo
    steps: tuple[StoredStep, ...]
    decisions: tuple[GateDecisionRecord, ...]


@final
@attrs.frozen(kw_only=True)
class PurgeResult:
    """How many runs a purge deleted, with their steps and decisions."""

    finished: int
    unfinished: int


@final
@attrs.frozen(kw_only=True)
class Suspension:
    """A suspended turn that has not been decided yet."""

    run_id: str
    sealed: bytes = attrs.field(repr=False)
    turn_digest: str
    suspended_at: datetime
    # The W3C trace context of the suspended segment (``traceparent``, ``tracestate``), if any.
    trace_context: Mapping[str, str] | None = None

"""The separately typed payloads each sink receives: wire, trace, audit."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any, final

import attrs

from nrllm_core._values import ToolArtifact

__all__ = ["AuditRecord", "RunStep", "StepKind", "TraceEvent", "WirePayload"]


@final
@attrs.frozen(kw_only=True)
class WirePayload:
    """What the model provider receives for one tool call. There is no artifact field."""

    call_id: str
    tool_name: str
    content: str
    is_error: bool


class StepKind(enum.StrEnum):
    """What a run step records. ``start``, ``suspension`` and ``finish`` bound a run segment:
    a run's first segment and every resumed one start with ``start``; each ends with
    ``finish``, or with ``suspension`` when a turn waits for a person."""

    START = "start"
    REQUEST = "request"
    LLM = "llm"
    TOOL = "tool"
    GATE = "gate"
    APPROVAL = "approval"
    SUSPENSION = "suspension"
    FINISH = "finish"


@final
@attrs.frozen(kw_only=True)
class RunStep:
    """One step of a run, unfiltered. ``fields`` hold the step's kind-specific keys."""

    kind: StepKind
    round: int
    duration_ms: float
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    tool_artifacts: tuple[ToolArtifact, ...] = ()

    def head(self) -> dict[str, Any]:
        """The keys every step has: ``kind``, ``round``, ``duration_ms``."""
        return {
            "kind": self.kind.value,
            "round": self.round,
            "duration_ms": round(self.duration_ms, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON data; ``tool_artifacts`` is absent when there are none."""
        out = self.head()
        out.update((k, v) for k, v in self.fields.items() if v is not None)
        if self.tool_artifacts:
            out["tool_artifacts"] = [a.to_dict() for a in self.tool_artifacts]
        return out


@final
@attrs.frozen(kw_only=True)
class TraceEvent:
    """A run step for the live stream and the inspector, with bounded artifacts."""

    run_id: str
    sequence: int
    step: RunStep


@final
@attrs.frozen(kw_only=True)
class AuditRecord:
    """The copy of a run step that may be persisted: ``payload`` is already privacy-filtered."""

    run_id: str
    sequence: int
    kind: StepKind
    round: int
    duration_ms: float
    payload: Mapping[str, Any]

"""What a run, an approval or a direct call reports to the host application."""

from __future__ import annotations

from typing import Any, final

import attrs

from nrllm_core._label import LabelSource
from nrllm_core._loop import PendingCall
from nrllm_core._messages import Usage
from nrllm_core._payloads import WirePayload
from nrllm_core._status import RunStatus

__all__ = ["RunOutcome", "pending_dict"]


def _status(value: RunStatus | str | None) -> RunStatus | None:
    return None if value is None else RunStatus(value)


@final
@attrs.frozen(kw_only=True)
class RunOutcome:
    """What ``run``, ``submit`` and ``approve`` report; the same shape as ``nrllm run
    --json``."""

    run_id: str
    # A status named by its string is checked against RunStatus; a refused approval reports
    # the run's own status, None when the run is unknown.
    status: RunStatus | None = attrs.field(converter=_status)
    termination_reason: str | None
    final_content: str
    pending: tuple[PendingCall, ...] = ()
    turn_digest: str | None = None
    error: str | None = None
    usage: Usage = attrs.field(factory=Usage)
    # The final answer stopped at its token limit.
    truncated: bool = False
    # For a suspended turn: the calls whose untrusted results the model had read when it
    # asked for it (what could have steered it), for the person who decides.
    untrusted: tuple[LabelSource, ...] = ()
    # A direct call's answer (``Host.submit``, and the approval of a call it suspended), as
    # its caller gets it: ``final_content`` is its content.
    call: WirePayload | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "status": None if self.status is None else self.status.value,
            "termination_reason": self.termination_reason,
            "final_content": self.final_content,
            "pending": [pending_dict(p) for p in self.pending],
            "turn_digest": self.turn_digest,
            "error": self.error,
            "truncated": self.truncated,
            "usage": self.usage.to_dict(),
            "untrusted": [
                {"tool": u.tool, "call_id": u.call_id, "excerpt": u.excerpt} for u in self.untrusted
            ],
        }


def pending_dict(call: PendingCall) -> dict[str, Any]:
    """One pending call as ``nrllm run --json`` and the inspector show it."""
    return {
        "call_id": call.call_id,
        "name": call.name,
        "arguments": call.arguments,
        "requires_approval": call.requires_approval,
        "preview": list(call.preview),
        "policy_reason": call.policy_reason,
    }

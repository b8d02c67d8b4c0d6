"""What a run's label lets a call do without a person: the information-flow policy
(``[policy]``), decided for each call of a turn before anything of the turn runs."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, final

import attrs

from nrllm_core._values import Integrity, TrustZone

if TYPE_CHECKING:
    from nrllm_core._catalog import RegisteredTool
    from nrllm_core._label import RunLabel
    from nrllm_core._messages import ToolCall

__all__ = [
    "ApproveWrites",
    "CallDecision",
    "PolicyAction",
    "PolicyConfig",
    "PolicyRule",
    "decide_call",
    "decide_turn",
    "returns_handle",
]


class PolicyAction(enum.StrEnum):
    """What becomes of a call the policy stops: a person decides it, or it is refused."""

    APPROVE = "approve"
    REFUSE = "refuse"


class ApproveWrites(enum.StrEnum):
    """When a writing tool needs a person: always, or only once the run has read untrusted
    text (so people approve only what an attacker could have steered)."""

    ALWAYS = "always"
    WHEN_UNTRUSTED = "when_untrusted"


@final
@attrs.frozen(kw_only=True)
class PolicyRule:
    """``[policy.tools.NAME]`` or ``[policy.zones.ZONE]``: what overrides ``[policy]`` for
    one tool, or for the runs of one trust zone (a tool's rule wins over its zone's)."""

    on_untrusted: PolicyAction | None = None
    on_egress: PolicyAction | None = None
    # Keep the tool's results as handles: the model reads a description, never the value.
    handle: bool | None = None


@final
@attrs.frozen(kw_only=True)
class PolicyConfig:
    """``[policy]``: once a run has read untrusted text, a call that changes something or
    sends data out goes to a person (``on_untrusted = "approve"``) or is refused; a call that
    would send data out above its tool's clearance is refused (``on_egress``) or goes to a
    person; writes on a run that read nothing untrusted still need a person unless
    ``approve_writes = "when_untrusted"``."""

    on_untrusted: PolicyAction = PolicyAction.APPROVE
    on_egress: PolicyAction = PolicyAction.REFUSE
    approve_writes: ApproveWrites = ApproveWrites.ALWAYS
    tools: dict[str, PolicyRule] = attrs.field(factory=dict)
    zones: dict[TrustZone, PolicyRule] = attrs.field(factory=dict)


# Why the policy stepped in: recorded with the call, never shown to the model.
UNTRUSTED: Final = "untrusted"
EGRESS: Final = "egress"


@final
@attrs.frozen(kw_only=True)
class CallDecision:
    """One call's answer: it runs, waits for a person, or is refused; ``reason`` says which
    rule of the policy decided (``None``: the tool's own declaration did)."""

    refused: bool = False
    needs_approval: bool = False
    reason: str | None = None

    @property
    def decision(self) -> str:
        if self.refused:
            return "refused"
        return "approval" if self.needs_approval else "allowed"

    def to_dict(self) -> dict[str, str | None]:
        """The decision as the call's step records it."""
        return {"decision": self.decision, "reason": self.reason}

    def refusal(self, tool: str) -> str | None:
        """The plain tool error a refused call answers the model with: nothing of the policy."""
        return f'Error: tool "{tool}" was refused by policy.' if self.refused else None


def decide_call(
    tool: RegisteredTool, label: RunLabel, zone: TrustZone, policy: PolicyConfig
) -> CallDecision:
    """The policy's answer for one call of ``tool`` by a run whose model has seen ``label``."""
    # A tool's rule first, then its zone's: the first that sets an action decides it.
    rules = [r for r in (policy.tools.get(tool.name), policy.zones.get(zone)) if r is not None]

    def stopped(
        overrides: Iterable[PolicyAction | None], default: PolicyAction, reason: str
    ) -> CallDecision:
        action = next((a for a in overrides if a is not None), default)
        refused = action is PolicyAction.REFUSE
        return CallDecision(refused=refused, needs_approval=not refused, reason=reason)

    if tool.egress is not None and label.data_class > tool.egress:
        return stopped((r.on_egress for r in rules), policy.on_egress, EGRESS)
    untrusted = label.integrity is Integrity.UNTRUSTED
    if untrusted and (tool.effect.is_write or tool.egress is not None):
        return stopped((r.on_untrusted for r in rules), policy.on_untrusted, UNTRUSTED)
    if tool.declared_approval:
        return CallDecision(needs_approval=True)
    if tool.effect.is_write:
        return CallDecision(needs_approval=policy.approve_writes is ApproveWrites.ALWAYS)
    return CallDecision()


def returns_handle(tool: str, zone: TrustZone, policy: PolicyConfig) -> bool:
    """Whether the policy keeps ``tool``'s results as handles in runs of ``zone``: its own
    rule's ``handle``, else its zone's, else not."""
    rules = (policy.tools.get(tool), policy.zones.get(zone))
    return next((r.handle for r in rules if r is not None and r.handle is not None), False)


def decide_turn(
    offered: Mapping[str, RegisteredTool],
    calls: Sequence[ToolCall],
    refusals: Sequence[str | None],
    *,
    label: Callable[[ToolCall], RunLabel],
    zone: TrustZone,
    policy: PolicyConfig,
) -> tuple[list[str | None], dict[str, CallDecision]]:
    """A turn's calls as the policy decides them from what each carries (``label``: what the
    model read before the turn, and what the handles it passes hold): each call of an
    ``offered`` tool that no cap refused (``refusals``) is let through, made to wait for a
    person, or refused. The refusals, the policy's joined to the caps', and each decision by
    call id."""
    joined: list[str | None] = []
    decided: dict[str, CallDecision] = {}
    for call, refusal in zip(calls, refusals, strict=True):
        tool = offered.get(call.name)
        if refusal is None and tool is not None:
            decided[call.id] = decide_call(tool, label(call), zone, policy)
            refusal = decided[call.id].refusal(call.name)
        joined.append(refusal)
    return joined, decided

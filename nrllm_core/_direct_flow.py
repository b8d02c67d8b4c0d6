"""A direct call: one tool call through the seam, recorded as a one-call run (``nrllm
invoke``, or a call an MCP client makes), gated and approved when the caller asks for it.

A call is asked about in place (``Host.invoke``'s ``approve``) or, submitted
(``Host.submit``), suspends its run as a model's turn does: sealed in the store, so that any
host sharing the store and the state key decides it, and approved, runs it with no model."""

from __future__ import annotations

import enum
import secrets
from collections.abc import Callable, Mapping
from typing import Any, Final, TypedDict, Unpack, cast, final

import attrs

from nrllm_core._catalog import RegisteredTool
from nrllm_core._config import HostConfig
from nrllm_core._gate import decide, gate_step, live_gate
from nrllm_core._invoke import new_call_id, new_run_id, refuse
from nrllm_core._label import RunLabel
from nrllm_core._loop import (
    LoopOutcome,
    PendingCall,
    SuspendedRunState,
    TerminationReason,
    single_call,
    turn_digest,
)
from nrllm_core._messages import ToolCall, Usage
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import TraceEvent, WirePayload
from nrllm_core._preview import preview_lines
from nrllm_core._recorder import RunRecorder
from nrllm_core._segment import (
    Drive,
    Flow,
    HostParts,
    approval_step,
    decision_records,
    start_step,
    unasked,
)
from nrllm_core._status import RunStatus
from nrllm_core._suspension import ApprovalRefused, RefusalReason, check_approver
from nrllm_core._tool import ToolContext
from nrllm_core._values import Actor, TrustZone

__all__ = [
    "InvokeOptions",
    "NoApprover",
    "SubmitOptions",
    "direct_flow",
    "resumed_call",
    "submit_flow",
]


class NoApprover(Exception):
    """Raised by the ``approve`` callback of :meth:`Host.invoke` when nobody can decide the
    call (no way to ask a person, or four-eyes with only the initiator there), or when the
    person asked did not approve it. The call is refused with this exception's message as its
    answer (it must be safe to show), and the approval step records ``decision`` (``refused``,
    nobody decided, unless the callback names ``denied``, ``cancelled`` or ``unanswered``),
    ``approver`` (the person who
    answered, when one did) and ``reason`` (``no_approver`` unless the callback names another
    :class:`RefusalReason`, as ``four_eyes``; ``None`` records none)."""

    def __init__(
        self,
        message: str,
        reason: RefusalReason | None = RefusalReason.NO_APPROVER,
        *,
        decision: str = "refused",
        approver: str | None = None,
    ) -> None:
        if decision not in _REFUSALS:
            raise ValueError(f"decision must be one of {sorted(_REFUSALS)}, not {decision!r}")
        super().__init__(message)
        self.reason = reason
        self.decision = decision
        self.approver = approver


# What an approval step may record when the call does not run: a person's denial, a question
# the person cancelled, one nobody answered (failed, timed out or dropped), and a call nobody
# could decide (no way to ask, four-eyes, an approver the rules refuse).
_REFUSALS = frozenset({"denied", "cancelled", "unanswered", "refused"})


class _Nobody(enum.Enum):
    """Who a submitted call that needs approval asks: nobody here; its run suspends."""

    SUSPEND = "suspend"


SUSPEND: Final = _Nobody.SUSPEND


class SubmitOptions(TypedDict, total=False):
    """The keyword arguments of ``submit``, each optional: ``provider``, ``zone``, ``skill``,
    ``kind``, ``actor``, ``on_event`` and ``deps``."""

    provider: str | None
    zone: TrustZone | None
    skill: str | None
    kind: str
    actor: Actor | None
    on_event: Callable[[TraceEvent], None] | None
    deps: Any


class InvokeOptions(SubmitOptions, total=False):
    """The keyword arguments of ``invoke``, each optional: those of ``submit`` and
    ``approve``."""

    approve: Callable[[PendingCall, str], str | None] | None


def direct_flow(
    parts: HostParts, tool_name: str, arguments: Mapping[str, Any], **options: Unpack[InvokeOptions]
) -> Flow[WirePayload]:
    """The call as a run: started, gated when a provider or zone is named, approved when
    ``approve`` is given and the tool needs it, driven, then settled."""
    outcome = yield from _call_flow(parts, tool_name, arguments, **options)
    # Only a submitted call suspends: this one was answered.
    return cast(WirePayload, outcome.call)


def submit_flow(
    parts: HostParts, tool_name: str, arguments: Mapping[str, Any], **options: Unpack[SubmitOptions]
) -> Flow[RunOutcome]:
    """The call as a run, as :func:`direct_flow`; a tool that needs approval suspends it."""
    return (yield from _call_flow(parts, tool_name, arguments, approve=SUSPEND, **options))


def _call_flow(
    parts: HostParts,
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    provider: str | None = None,
    zone: TrustZone | None = None,
    skill: str | None = None,
    kind: str = "invoke",
    approve: Callable[[PendingCall, str], str | None] | _Nobody | None = None,
    actor: Actor | None = None,
    on_event: Callable[[TraceEvent], None] | None = None,
    deps: Any = None,
) -> Flow[RunOutcome]:
    from nrllm_core.store import RunKind

    config = parts.config
    actor = actor or config.actor()
    if provider is not None:
        parts.provider_name(config, provider)
    gated = provider is not None or zone is not None
    if zone is None and provider is not None:
        zone = config.zone_for(provider)
    run_id = new_run_id()
    recorder = parts.recorder(config, run_id, on_event=on_event)
    parts.store.start_run(
        run_id,
        kind=RunKind(kind),
        provider=provider,
        zone=None if zone is None else zone.value,
        skill=skill,
        actor=actor.id,
    )
    asked = None
    if approve is not None and approve is not SUSPEND:
        asked = _Asked(
            config=config, approve=approve, initiator=actor, provider=provider, skill=skill
        )
    with parts.store.leased(run_id):
        try:
            recorder.record(
                start_step(
                    config,
                    RunKind(kind).value,
                    None if zone is None else zone.value,
                    provider=provider,
                    skill=skill,
                )
            )
            permits = None
            if gated:
                permits = _gate(parts, config, recorder, tool_name, actor, provider, skill, zone)
            context = parts.context_for(recorder, actor, config, deps)(new_call_id())
            registered = parts.pm.catalog().get(tool_name)
            if (
                approve is not None
                and registered is not None
                and registered.requires_approval
                and (permits is None or permits(registered))
            ):
                if asked is None:
                    where = _Where(kind=kind, provider=provider, zone=zone, skill=skill)
                    return _suspended(parts, recorder, registered, arguments, context, where)
                wire = yield from _approved_call(
                    parts, registered, arguments, context, recorder, asked, permits
                )
            else:
                core = single_call(parts.pm, tool_name, arguments, context, permits)
                wire = yield Drive(core=core, recorder=recorder, limits=config.run)
            return _answered(parts, recorder, registered, wire)
        except Exception:
            parts.crashed(recorder)
            raise


def _answered(
    parts: HostParts,
    recorder: RunRecorder,
    registered: RegisteredTool | None,
    wire: WirePayload,
) -> RunOutcome:
    """The run settled with its call answered."""
    status, reason = RunStatus.COMPLETED, TerminationReason.COMPLETED
    if recorder.audit_failures and registered is not None and registered.effect.is_write:
        # The write ran but its record did not: the run says so (fail closed).
        status, reason = RunStatus.FAILED, TerminationReason.AUDIT_UNAVAILABLE
    status, reason = parts.finish(recorder, status, reason)
    return RunOutcome(
        run_id=recorder.run_id,
        status=status,
        termination_reason=reason.value,
        final_content=wire.content,
        call=wire,
    )


@final
@attrs.frozen(kw_only=True)
class _Where:
    """What a suspended direct call keeps of where it runs, to run there when approved."""

    kind: str
    provider: str | None
    zone: TrustZone | None
    skill: str | None


def _suspended(
    parts: HostParts,
    recorder: RunRecorder,
    registered: RegisteredTool,
    arguments: Mapping[str, Any],
    context: ToolContext,
    where: _Where,
) -> RunOutcome:
    """The run parked on its one call, sealed as a model's turn is, for whoever decides it."""
    pending = _pending(registered, arguments, context)
    state = SuspendedRunState(
        messages=(),
        pending=(pending,),
        iterations=0,
        usage=Usage(),
        provider=where.provider,
        skill=where.skill,
        offered_names=(registered.name,),
        actor=context.actor,
        max_rounds=1,
        run_id=recorder.run_id,
        nonce=secrets.token_hex(16),
        # A person's call: it read nothing a model could have been steered by.
        label=RunLabel(),
        kind=where.kind,
        zone=where.zone,
    )
    result = unasked(TerminationReason.AWAITING_APPROVAL)
    return parts.settle(recorder, parts.config, LoopOutcome(result=result, suspended=state))


def resumed_call(
    parts: HostParts,
    recorder: RunRecorder,
    config: HostConfig,
    state: SuspendedRunState,
    approved: bool,
    deps: Any,
) -> Flow[RunOutcome]:
    """A submitted call as the person decided it (the decision recorded already): refused, or
    run when the live gate still permits it; then the run settled."""
    (pending,) = state.pending
    actor = state.actor
    context = parts.context_for(recorder, actor, config, deps)(pending.call_id)
    permits = None
    if state.provider is not None or state.zone is not None:
        permits = live_gate(
            parts.pm,
            parts.load,
            provider=state.provider,
            skill=state.skill,
            actor=actor,
            zone=state.zone,
        )
    registered = parts.pm.catalog().get(pending.name)
    refusal = None
    if not approved:
        refusal = f'Error: tool "{pending.name}" was denied by the operator.'
    elif registered is None or (permits is not None and not permits(registered)):
        refusal = f'Error: tool "{pending.name}" is no longer permitted and was not executed.'
    if refusal is not None:
        wire = refuse(
            parts.pm, pending.name, pending.arguments, refusal, context=context, recorder=recorder
        )
    else:
        core = single_call(parts.pm, pending.name, pending.arguments, context, permits)
        wire = yield Drive(core=core, recorder=recorder, limits=config.run)
    return _answered(parts, recorder, registered, wire)


def _gate(
    parts: HostParts,
    config: HostConfig,
    recorder: RunRecorder,
    tool_name: str,
    actor: Actor,
    provider: str | None,
    skill: str | None,
    zone: TrustZone | None,
) -> Callable[[RegisteredTool], bool]:
    """The gate's decision for this tool, recorded as a run's is; then the live gate."""
    report = decide(
        parts.pm.catalog(),
        config,
        provider=provider,
        skill=skill,
        actor=actor,
        requested=[tool_name],
        zone=zone,
        kinds=parts.pm.provider_registry().registered,
    )
    recorder.record(gate_step(report))
    # Like the gate's step, its decisions guard nothing: the call's first guarded write (its
    # approval or its step) commits them.
    parts.store.record_decisions(recorder.run_id, decision_records(report), deferred=True)
    return live_gate(parts.pm, parts.load, provider=provider, skill=skill, actor=actor, zone=zone)


def _approved_call(
    parts: HostParts,
    registered: RegisteredTool,
    arguments: Mapping[str, Any],
    context: ToolContext,
    recorder: RunRecorder,
    asked: _Asked,
    permits: Callable[[RegisteredTool], bool] | None,
) -> Flow[WirePayload]:
    """Ask about one call, hold the answer to the one approver rule, record it, then run or
    refuse the call (the live gate decides again: the person may have taken a while)."""
    pending = _pending(registered, arguments, context)
    call = ToolCall(id=pending.call_id, name=pending.name, arguments=pending.arguments)
    digest = turn_digest(context.run_id, secrets.token_hex(16), [pending])
    refusal: NoApprover | None = None
    try:
        approver = asked.approve(pending, digest)
        if approver is not None:
            check_approver(
                asked.config,
                approver,
                approve=True,
                initiator=asked.initiator,
                provider=asked.provider,
                skill=asked.skill,
            )
    except NoApprover as exc:
        approver, refusal = None, exc
    except ApprovalRefused as exc:
        message = f'Error: tool "{call.name}" was not run: {exc}.'
        approver, refusal = None, NoApprover(message, exc.reason)
    reason = None if refusal is None or refusal.reason is None else refusal.reason.value
    audited = recorder.record(
        approval_step(
            round=0,
            approved=approver is not None,
            approver=approver if refusal is None else refusal.approver,
            turn_digest=digest,
            decided_at=parts.clock(),
            reason=reason,
            decision=None if refusal is None else refusal.decision,
        )
    )
    if approver is None or not audited:
        content = f'Error: tool "{call.name}" was denied by the operator.'
        if refusal is not None:
            content = str(refusal)
        if approver is not None:
            content = "Error: the approval could not be written to the audit; nothing ran."
        return refuse(parts.pm, call.name, arguments, content, context=context, recorder=recorder)
    core = single_call(parts.pm, call.name, arguments, context, permits)
    wire: WirePayload = yield Drive(core=core, recorder=recorder, limits=asked.config.run)
    return wire


def _pending(
    registered: RegisteredTool, arguments: Mapping[str, Any], context: ToolContext
) -> PendingCall:
    """The call a person is asked about, with its tool's preview."""
    call = ToolCall(id=context.call_id, name=registered.name, arguments=dict(arguments))
    lines, failed = preview_lines(registered, call, context)
    return PendingCall(
        call_id=call.id,
        name=call.name,
        arguments=dict(arguments),
        requires_approval=True,
        preview=lines,
        preview_failed=failed,
    )


@final
@attrs.frozen(kw_only=True)
class _Asked:
    """Who is asked about a direct call, and what the one approver rule holds the answer to:
    the flow's configuration, the initiator, the provider and the skill."""

    config: HostConfig
    approve: Callable[[PendingCall, str], str | None]
    initiator: Actor
    provider: str | None
    skill: str | None

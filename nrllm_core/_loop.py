"""The bounded tool loop: model turns, the approval scan, and execution through the seam.

The loop's decisions live here once, as a generator that does no I/O: it yields what to do
next (:class:`Ask` the model, :class:`Run` the admitted calls of a turn, :class:`Record` a
step) and a driver (``_drive``: one sync, one async) does it and sends back the answer.
"""

from __future__ import annotations

import enum
import hashlib
import secrets
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Final, final

import attrs

from nrllm_core import _json
from nrllm_core._catalog import RegisteredTool
from nrllm_core._config import MAX_ROUNDS_CAP, MAX_ROUNDS_DEFAULT, RunConfig
from nrllm_core._handles import Handle, Handles, Keeper, UnknownHandle
from nrllm_core._invoke import REFUSED, Admitted, Executed, admit, deliver, result_integrity
from nrllm_core._label import RunLabel
from nrllm_core._manager import PluginManager
from nrllm_core._messages import (
    ChatMessage,
    ProviderAnswer,
    ProviderError,
    RunTurn,
    Stop,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)
from nrllm_core._payloads import RunStep, StepKind, WirePayload
from nrllm_core._policy import CallDecision, PolicyConfig, decide_turn, returns_handle
from nrllm_core._preview import preview_lines
from nrllm_core._tool import ToolContext
from nrllm_core._turn_caps import turn_caps
from nrllm_core._values import Actor, ToolResult, TrustZone
from nrllm_core.log import logger

__all__ = [
    "MAX_ROUNDS_CAP",
    "MAX_ROUNDS_DEFAULT",
    "Ask",
    "Core",
    "LoopOutcome",
    "PendingCall",
    "Record",
    "Run",
    "RunCancelled",
    "SuspendedRunState",
    "TerminationReason",
    "ToolInvocation",
    "ToolLoopResult",
    "clamp_rounds",
    "first_segment",
    "resumed_segment",
    "single_call",
    "turn_digest",
]

# The documented ``[run]`` defaults, for a loop driven without a host configuration.
_DEFAULT_LIMITS: Final = RunConfig()
CUT_OFF: Final = "Error: the model's answer was cut off before this call was complete."


class TerminationReason(enum.StrEnum):
    """Why a run stopped."""

    COMPLETED = "completed"
    # Completed, but the answer stopped at its token limit.
    TRUNCATED = "truncated"
    # Completed with the model's (or its provider's filter's) refusal as the answer.
    REFUSED = "refused"
    MAX_ITERATIONS = "max_iterations"
    AWAITING_APPROVAL = "awaiting_approval"
    PROVIDER_FAILED = "provider_failed"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    SUSPEND_FAILED = "suspend_failed"
    INTERNAL_ERROR = "internal_error"
    # The run's task was cancelled, or ``Host.cancel`` asked: pending calls never started.
    CANCELLED = "cancelled"


@final
@attrs.frozen(kw_only=True)
class ToolInvocation:
    """One executed call as the model saw it. No artifact field: artifacts are display state."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    content: str
    is_error: bool


@final
@attrs.frozen(kw_only=True)
class ToolLoopResult:
    """What a finished loop segment produced. No artifact field, by design."""

    final_content: str
    invocations: tuple[ToolInvocation, ...]
    iterations: int
    # The final answer stopped at its token limit.
    truncated: bool
    usage: Usage
    termination_reason: TerminationReason


@final
@attrs.frozen(kw_only=True)
class PendingCall:
    """A call of the suspended turn, with what the approver is shown."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    requires_approval: bool
    preview: tuple[str, ...]
    preview_failed: bool = False
    # False when the model's arguments were malformed: the call is refused, never run.
    arguments_valid: bool = True
    # The fixed answer of a call a turn cap refused (also its preview): it never runs.
    refusal: str | None = None
    # Why the policy sent it to a person (``untrusted``, ``egress``); None: its tool's own
    # declaration did.
    policy_reason: str | None = None


@final
@attrs.frozen(kw_only=True)
class SuspendedRunState:
    """Everything needed to resume a run. No artifact field: only wire text rides along."""

    messages: tuple[dict[str, Any], ...]
    pending: tuple[PendingCall, ...]
    iterations: int
    usage: Usage
    provider: str | None
    skill: str | None
    offered_names: tuple[str, ...]
    # Who started the run, with their rights: a resumed run acts for them, not the approver.
    actor: Actor
    max_rounds: int
    run_id: str
    # Fresh for every suspension, so two identical turns never share a digest.
    nonce: str
    # What the model has seen; a state sealed without one stands for the strictest.
    label: RunLabel = attrs.field(factory=RunLabel.unknown)
    # The results the run keeps as handles, values and all (the state is sealed).
    handles: tuple[Handle, ...] = ()
    # A direct call's (``Host.submit``) run kind and zone: approved, that one call runs, and
    # the run ends without a model.
    kind: str = "run"
    zone: TrustZone | None = None

    @property
    def initiator(self) -> str:
        return self.actor.id

    @property
    def turn_label(self) -> RunLabel:
        """What the waiting turn carries: the run's label and the handles its calls pass on,
        for the person who decides it."""
        handles = Handles(kept={h.id: h for h in self.handles})
        label = self.label
        for call in self.pending:
            label = handles.label(label, call.arguments)
        return label

    @property
    def digest(self) -> str:
        return turn_digest(self.run_id, self.nonce, self.pending)


@final
@attrs.frozen(kw_only=True)
class LoopOutcome:
    """A segment's end: a result, or a suspended turn waiting for a person."""

    result: ToolLoopResult
    suspended: SuspendedRunState | None = None
    error: str | None = None


@final
@attrs.frozen(kw_only=True)
class Ask:
    """Ask the model: the driver answers with a :class:`ProviderAnswer` or raises into the
    loop what the provider raised."""

    messages: tuple[ChatMessage, ...]
    specs: tuple[ToolSpec, ...]
    tool_choice: ToolChoice
    # Which run and round the request answers for, for a provider that asks (``turn=``).
    turn: RunTurn


@final
@attrs.frozen(kw_only=True)
class Run:
    """Run these admitted calls of one turn (at once, as the driver can): the driver answers
    with one :class:`Executed` each, in the same order."""

    calls: tuple[Admitted, ...]


@final
@attrs.frozen(kw_only=True)
class Record:
    """Record this step: the driver answers whether every audit sink took it."""

    step: RunStep
    # A tool step's wire payload, for a live stream of the run; never stored from here.
    wire: WirePayload | None = None


Effect = Ask | Run | Record
Core = Generator[Effect, Any, LoopOutcome]


class RunCancelled(Exception):
    """Raised into the loop by a driver whose run was cancelled."""


def clamp_rounds(
    requested: int | None, *, default: int = MAX_ROUNDS_DEFAULT, cap: int = MAX_ROUNDS_CAP
) -> int:
    """The round limit: ``default`` when none is asked for, at most ``cap`` (a warning when
    clamped; a host's ``[run] max_rounds`` and ``max_rounds_cap``); below 1 is refused."""
    if requested is None:
        return default
    if isinstance(requested, bool) or not isinstance(requested, int):
        raise TypeError(f"max rounds must be an integer, not {type(requested).__name__}")
    if requested < 1:
        raise ValueError(f"max rounds must be at least 1, not {requested}")
    if requested > cap:
        logger().warning("nrllm.loop.rounds_clamped", requested=requested, cap=cap)
        return cap
    return requested


def turn_digest(run_id: str, nonce: str, pending: Sequence[PendingCall]) -> str:
    """sha256 over the canonical JSON of the run, the suspension and the turn's calls: what
    an approval is bound to. Another run, another suspension or another call never match."""
    calls = [{"id": c.call_id, "name": c.name, "arguments": c.arguments} for c in pending]
    return hashlib.sha256(
        _json.dumps({"run_id": run_id, "nonce": nonce, "calls": calls})
    ).hexdigest()


@attrs.define(kw_only=True)
class _Segment:
    pm: PluginManager
    run_id: str
    provider_name: str | None
    skill: str | None
    offered: Sequence[RegisteredTool]
    permits: Callable[[RegisteredTool], bool]
    context_for: Callable[[str], ToolContext]
    actor: Actor
    max_rounds: int
    limits: RunConfig
    messages: list[ChatMessage]
    usage: Usage
    iterations: int
    invocations: list[ToolInvocation] = attrs.field(factory=list)
    # The calls a person approved: the only ones of a tool needing approval that may run.
    approved: frozenset[str] = frozenset()
    label: RunLabel = attrs.field(factory=RunLabel)
    zone: TrustZone = TrustZone.EXTERNAL_GLOBAL
    policy: PolicyConfig = attrs.field(factory=PolicyConfig)
    # This turn's policy decisions by call id, recorded with each call's step.
    decided: dict[str, CallDecision] = attrs.field(factory=dict)
    handles: Handles = attrs.field(factory=Handles)


def first_segment(
    *,
    pm: PluginManager,
    run_id: str,
    provider_name: str | None,
    skill: str | None,
    messages: Sequence[ChatMessage],
    offered: Sequence[RegisteredTool],
    permits: Callable[[RegisteredTool], bool],
    context_for: Callable[[str], ToolContext],
    actor: Actor,
    max_rounds: int,
    limits: RunConfig = _DEFAULT_LIMITS,
    usage: Usage | None = None,
    iterations: int = 0,
    zone: TrustZone = TrustZone.EXTERNAL_GLOBAL,
    policy: PolicyConfig | None = None,
) -> Core:
    """Rounds until the model answers without tool calls, a turn needs approval, or the cap.

    Only ``offered`` tools can run, and ``permits`` (the live gate) is asked again for every
    call at execution time. ``limits`` caps each turn's calls and their arguments' size;
    ``policy`` decides, from what the model has read, which calls of a turn in the run's
    ``zone`` wait for a person or are refused.
    """
    segment = _Segment(
        pm=pm,
        run_id=run_id,
        provider_name=provider_name,
        skill=skill,
        offered=offered,
        permits=_run_gate(offered, permits),
        context_for=context_for,
        actor=actor,
        max_rounds=max_rounds,
        limits=limits,
        messages=list(messages),
        usage=usage or Usage(),
        iterations=iterations,
        zone=zone,
        policy=policy or PolicyConfig(),
    )
    return _guarded(segment, _rounds(segment))


def _run_gate(
    offered: Sequence[RegisteredTool], live: Callable[[RegisteredTool], bool]
) -> Callable[[RegisteredTool], bool]:
    """A tool may run when the run was offered it and the live configuration still permits it."""
    names = frozenset(t.name for t in offered)
    return lambda tool: tool.name in names and live(tool)


def _guarded(seg: _Segment, body: Core) -> Core:
    try:
        return (yield from body)
    except ProviderError as exc:
        logger().warning("nrllm.loop.provider_failed", run_id=seg.run_id)
        return LoopOutcome(
            result=_result(seg, "", TerminationReason.PROVIDER_FAILED),
            error=f"the model provider failed: {exc}",
        )
    except _AuditUnavailable as exc:
        return LoopOutcome(
            result=_result(seg, "", TerminationReason.AUDIT_UNAVAILABLE), error=str(exc)
        )
    except RunCancelled:
        logger().info("nrllm.run.cancelled", run_id=seg.run_id)
        return LoopOutcome(result=_result(seg, "", TerminationReason.CANCELLED))


class _AuditUnavailable(Exception):
    pass


def _rounds(seg: _Segment) -> Core:
    specs = tuple(
        ToolSpec(name=t.name, description=t.description, parameters=t.parameters)
        for t in seg.offered
    )
    for _ in range(seg.max_rounds):
        seg.iterations += 1
        answer = yield from _ask(seg, specs, seg.iterations)
        ended = yield from _ended(seg, answer)
        if ended is not None:
            return ended
        # Calls to answer, or a paused turn to send back so that the model continues it.
        seg.messages.append(
            ChatMessage.assistant(answer.content, answer.tool_calls, replay=answer.replay)
        )
        refusals, seg.decided = decide_turn(
            {t.name: t for t in seg.offered},
            answer.tool_calls,
            turn_caps(seg.limits, answer.tool_calls),
            label=lambda call: seg.handles.label(seg.label, call.arguments),
            zone=seg.zone,
            policy=seg.policy,
        )
        # A call the policy lets through without a person counts as approved: the seam's last
        # check lets it run. Approvals are this turn's alone: a later turn may reuse an id.
        seg.approved = frozenset(i for i, d in seg.decided.items() if d.decision == "allowed")
        suspended = _approval_scan(seg, answer.tool_calls, refusals)
        if suspended is not None:
            return LoopOutcome(
                result=_result(seg, "", TerminationReason.AWAITING_APPROVAL), suspended=suspended
            )
        yield from _answer_turn(seg, list(zip(answer.tool_calls, refusals, strict=True)))
    # The cap: one last request, the tools still declared (the history calls them) but none
    # to be called. Calls the model makes anyway are not executed.
    answer = yield from _ask(seg, specs, seg.iterations + 1, tool_choice="none")
    if answer.stop is Stop.REFUSAL:
        return _refused(seg, answer)
    return LoopOutcome(
        result=_result(
            seg,
            answer.content,
            TerminationReason.MAX_ITERATIONS,
            truncated=answer.stop is Stop.LENGTH,
        )
    )


def _ended(seg: _Segment, answer: ProviderAnswer) -> Generator[Effect, Any, LoopOutcome | None]:
    """The run's end when ``answer`` ends it: a refusal, an answer cut off at its length limit
    (its calls answered, never executed), or a final answer without calls."""
    if answer.stop is Stop.REFUSAL:
        return _refused(seg, answer)
    if answer.stop is Stop.LENGTH:
        if answer.tool_calls:
            seg.messages.append(
                ChatMessage.assistant(answer.content, answer.tool_calls, replay=answer.replay)
            )
            yield from _answer_turn(seg, [(call, CUT_OFF) for call in answer.tool_calls])
        return LoopOutcome(
            result=_result(seg, answer.content, TerminationReason.TRUNCATED, truncated=True)
        )
    if answer.tool_calls or answer.stop is Stop.PAUSE:
        return None
    return LoopOutcome(result=_result(seg, answer.content, TerminationReason.COMPLETED))


def _refused(seg: _Segment, answer: ProviderAnswer) -> LoopOutcome:
    from nrllm_core.redact import redact

    # The refusal may quote what it refused: bounded and masked like audited text.
    return LoopOutcome(result=_result(seg, redact(answer.content), TerminationReason.REFUSED))


def _ask(
    seg: _Segment, specs: tuple[ToolSpec, ...], round_: int, *, tool_choice: ToolChoice = "auto"
) -> Generator[Effect, Any, ProviderAnswer]:
    yield Record(
        step=RunStep(
            kind=StepKind.REQUEST,
            round=round_,
            duration_ms=0.0,
            fields={
                "messages_sent": [m.to_dict() for m in seg.messages],
                "tool_specs": [s.name for s in specs],
                "tool_choice": tool_choice,
                "label": seg.label.audited(),
            },
        )
    )
    started = time.perf_counter()
    try:
        answer = yield Ask(
            messages=tuple(seg.messages),
            specs=specs,
            tool_choice=tool_choice,
            turn=RunTurn(run_id=seg.run_id, round=round_),
        )
    except (ProviderError, RunCancelled):
        raise
    except Exception as exc:
        # A provider plugin's own failure: its text may quote keys or prompts, so the run's
        # error names only the type; the details go to the log.
        logger().error("nrllm.provider.crashed", run_id=seg.run_id, exc_info=True)
        raise ProviderError(f"the provider failed unexpectedly ({type(exc).__name__})") from exc
    if not isinstance(answer, ProviderAnswer):
        logger().error("nrllm.provider.no_answer", run_id=seg.run_id, got=type(answer).__name__)
        raise ProviderError("the provider gave no answer")
    seg.usage = seg.usage + answer.usage
    yield Record(
        step=RunStep(
            kind=StepKind.LLM,
            round=round_,
            duration_ms=(time.perf_counter() - started) * 1000,
            fields={
                "content": answer.content,
                "thinking": answer.thinking,
                "finish_reason": answer.finish_reason,
                "response_id": answer.response_id,
                "response_model": answer.response_model,
                "truncated": answer.stop is Stop.LENGTH,
                **answer.usage.to_dict(),
                # Zero is how a provider that does not report them reads: left out.
                "cache_creation_tokens": answer.cache_creation_tokens or None,
                "requested_tool_calls": [
                    {"id": c.id, "name": c.name, "arguments": dict(c.arguments)}
                    for c in answer.tool_calls
                ]
                or None,
            },
        )
    )
    return answer


def _approval_scan(
    seg: _Segment, calls: Sequence[ToolCall], refusals: Sequence[str | None]
) -> SuspendedRunState | None:
    """Before any call of the turn runs: does a call of an offered tool in it need a person?

    Asked of the tools as offered to this run, not of the live configuration: a change between
    this scan and execution can refuse a call, never let a write skip its approval. A call a
    turn cap refused needs no one: it will not run.
    """
    catalog = seg.pm.catalog()
    offered = {t.name for t in seg.offered}

    def needs_approval(call: ToolCall, refusal: str | None) -> bool:
        decided = seg.decided.get(call.id)
        return refusal is None and decided is not None and decided.needs_approval

    turn = list(zip(calls, refusals, strict=True))
    if not any(needs_approval(c, r) for c, r in turn):
        return None
    pending = []
    for call, refusal in turn:
        decided = seg.decided.get(call.id)
        # A tool the run was not offered shows no preview, a refused call its refusal: the
        # tool's code does not run for either.
        registered = catalog.get(call.name) if call.name in offered else None
        if refusal is None:
            # The person sees what the call would get: each handle's value, not its name.
            try:
                shown = attrs.evolve(call, arguments=seg.handles.substituted(call.arguments))
                lines, failed = preview_lines(registered, shown, seg.context_for(call.id))
            except UnknownHandle as unknown:
                lines, failed = (str(unknown),), False
        else:
            lines, failed = (refusal,), False
        pending.append(
            PendingCall(
                call_id=call.id,
                name=call.name,
                arguments=dict(call.arguments),
                requires_approval=needs_approval(call, refusal),
                preview=lines,
                preview_failed=failed,
                arguments_valid=call.arguments_valid,
                refusal=refusal,
                policy_reason=None if decided is None else decided.reason,
            )
        )
    return SuspendedRunState(
        messages=tuple(m.to_dict() for m in seg.messages),
        pending=tuple(pending),
        iterations=seg.iterations,
        usage=seg.usage,
        provider=seg.provider_name,
        skill=seg.skill,
        offered_names=tuple(t.name for t in seg.offered),
        actor=seg.actor,
        max_rounds=seg.max_rounds,
        run_id=seg.run_id,
        nonce=secrets.token_hex(16),
        label=seg.label,
        handles=tuple(seg.handles.kept.values()),
    )


def _answer_turn(
    seg: _Segment, turn: Sequence[tuple[ToolCall, str | None]]
) -> Generator[Effect, Any, None]:
    """Answer every call of a turn: each with its refusal, or run through the seam.

    The admitted calls run together (as the driver can); their results go back to the model,
    and their steps to the audit, in the model's call order whatever order they finish in.
    """
    offered = {t.name for t in seg.offered}
    planned: list[Admitted | ToolResult] = []
    for call, refusal in turn:
        if refusal is None and call.name in offered and call.id not in seg.approved:
            # Unreachable through the approval scan: no call runs that nobody let through.
            refusal = f'Error: tool "{call.name}" requires approval that was not given.'
        if refusal is not None:
            planned.append(ToolResult.error(refusal))
            continue
        try:
            arguments = seg.handles.substituted(call.arguments) if call.arguments_valid else None
        except UnknownHandle as unknown:
            planned.append(ToolResult.error(str(unknown)))
            continue
        plan = admit(seg.pm, call.name, arguments, seg.context_for(call.id), seg.permits)
        if not isinstance(plan, Admitted) and seg.handles.named(call.arguments):
            # The seam's answer may quote what the handles filled in: the model never reads it.
            plan = ToolResult.error(f'Error: tool "{call.name}" refused what its handles hold.')
        planned.append(plan)
    runnable = tuple(p for p in planned if isinstance(p, Admitted))
    executed: list[Executed] = list((yield Run(calls=runnable))) if runnable else []
    if len(executed) != len(runnable):
        raise RuntimeError("the driver answered a different number of calls")
    results = iter(executed)
    lost: list[str] = []
    for (call, refusal), plan in zip(turn, planned, strict=True):
        if isinstance(plan, Admitted):
            done = next(results)
            result, outcome, seconds = done.result, done.outcome, done.seconds
        else:
            result, outcome, seconds = plan, REFUSED, 0.0
        # A refused call's step shows the arguments as the model sent them; a call the seam
        # refused shows what the seam was given.
        shown = call.arguments if refusal is not None or call.arguments_valid else None
        context = seg.context_for(call.id)
        decided = seg.decided.get(call.id)
        keeper = None if not isinstance(plan, Admitted) else _keeper(seg, plan, call)
        wire, step = deliver(
            seg.pm,
            result,
            outcome,
            call.name,
            shown,
            context,
            seg.iterations,
            seconds,
            policy=None
            if decided is None
            else {"decision": decided.decision, "reason": decided.reason},
            kept=keeper,
        )
        audited = yield Record(step=step, wire=wire)
        _answer(seg, call, wire.content, wire.is_error)
        if isinstance(plan, Admitted) and (keeper is None or keeper.handle is None):
            seg.label = seg.label.rise(
                tool=plan.registered.name,
                call_id=call.id,
                data_class=plan.registered.data_class,
                integrity=result_integrity(plan.registered, result),
                read=wire.content,
            )
        if isinstance(plan, Admitted) and plan.registered.effect.is_write and not audited:
            lost.append(call.name)
    if lost:
        raise _AuditUnavailable(
            f'the audit could not record the call of the writing tool "{lost[0]}"; '
            "the run was stopped"
        )


def _keeper(seg: _Segment, plan: Admitted, call: ToolCall) -> Keeper:
    tool = plan.registered
    return seg.handles.keeper(
        tool=tool.name,
        call_id=call.id,
        data_class=tool.data_class,
        integrity=tool.integrity,
        always=returns_handle(tool.name, seg.zone, seg.policy),
    )


def single_call(
    pm: PluginManager,
    tool_name: str,
    arguments: Mapping[str, Any] | None,
    context: ToolContext,
    offered: Callable[[RegisteredTool], bool] | None,
    round: int = 0,
) -> Generator[Effect, Any, WirePayload]:
    """One call through the seam as a driver runs it (within its timeout, an ``async def``
    tool on an event loop): admitted or refused, delivered, recorded."""
    admitted = admit(pm, tool_name, arguments, context, offered)
    if isinstance(admitted, Admitted):
        (done,) = yield Run(calls=(admitted,))
        result, outcome, seconds = done.result, done.outcome, done.seconds
    else:
        result, outcome, seconds = admitted, REFUSED, 0.0
    wire, step = deliver(pm, result, outcome, tool_name, arguments, context, round, seconds)
    yield Record(step=step, wire=wire)
    return wire


def _answer(seg: _Segment, call: ToolCall, content: str, is_error: bool) -> None:
    seg.messages.append(ChatMessage.tool_result(call.id, content, is_error=is_error))
    seg.invocations.append(
        ToolInvocation(
            call_id=call.id,
            name=call.name,
            arguments=dict(call.arguments),
            content=content,
            is_error=is_error,
        )
    )


def resumed_segment(
    *,
    pm: PluginManager,
    state: SuspendedRunState,
    approved: bool,
    offered: Sequence[RegisteredTool],
    permits: Callable[[RegisteredTool], bool],
    context_for: Callable[[str], ToolContext],
    limits: RunConfig = _DEFAULT_LIMITS,
    zone: TrustZone = TrustZone.EXTERNAL_GLOBAL,
    policy: PolicyConfig | None = None,
) -> Core:
    """Answer the suspended turn as the person decided, re-gated live, then continue the loop.

    The resumed run is offered what it was offered before and the live gate still permits.
    """
    offered = [t for t in offered if t.name in state.offered_names]
    segment = _Segment(
        pm=pm,
        run_id=state.run_id,
        provider_name=state.provider,
        skill=state.skill,
        offered=offered,
        permits=_run_gate(offered, permits),
        context_for=context_for,
        actor=state.actor,
        max_rounds=state.max_rounds,
        limits=limits,
        messages=[ChatMessage.from_dict(m) for m in state.messages],
        usage=state.usage,
        iterations=state.iterations,
        approved=frozenset(p.call_id for p in state.pending) if approved else frozenset(),
        label=state.label,
        zone=zone,
        policy=policy or PolicyConfig(),
        handles=Handles(kept={h.id: h for h in state.handles}),
    )

    def answer_turn() -> Core:
        catalog = pm.catalog()
        turn: list[tuple[ToolCall, str | None]] = []
        for pending in state.pending:
            call = ToolCall(
                id=pending.call_id,
                name=pending.name,
                arguments=pending.arguments,
                arguments_valid=pending.arguments_valid,
            )
            registered = catalog.get(call.name)
            refusal = pending.refusal
            if refusal is None and not approved:
                refusal = f'Error: tool "{call.name}" was denied by the operator.'
            elif refusal is None and (registered is None or not segment.permits(registered)):
                refusal = f'Error: tool "{call.name}" is no longer permitted and was not executed.'
            turn.append((call, refusal))
        yield from _answer_turn(segment, turn)
        return (yield from _rounds(segment))

    return _guarded(segment, answer_turn())


def _result(
    seg: _Segment, content: str, reason: TerminationReason, *, truncated: bool = False
) -> ToolLoopResult:
    return ToolLoopResult(
        final_content=content,
        invocations=tuple(seg.invocations),
        iterations=seg.iterations,
        truncated=truncated,
        usage=seg.usage,
        termination_reason=reason,
    )

"""The host facade: one object that runs, suspends, approves and lists governed runs."""

from __future__ import annotations

import contextlib
import enum
import functools
import os
import secrets
import sys
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypedDict, TypeVar, Unpack, final
from urllib.parse import urlsplit

import attrs

from nrllm_core import _json
from nrllm_core._catalog import RegisteredTool
from nrllm_core._config import HostConfig, RunConfig, config_loader
from nrllm_core._drive import NOBODY, Cancellation, Driver, Watchers, drive
from nrllm_core._events import EventStream, StreamEvent
from nrllm_core._gate import GateReport, decide, gate_step, live_gate
from nrllm_core._identity import NAMES_NOBODY, names_nobody
from nrllm_core._invoke import new_call_id, new_run_id, refuse
from nrllm_core._loop import (
    Effect,
    LoopOutcome,
    PendingCall,
    Record,
    RunCancelled,
    SuspendedRunState,
    TerminationReason,
    clamp_rounds,
    first_segment,
    preview_lines,
    resumed_segment,
    single_call,
    turn_digest,
)
from nrllm_core._manager import PluginManager, make_plugin_manager
from nrllm_core._messages import ChatMessage, ProviderError, ToolCall, Usage
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import RunStep, StepKind, TraceEvent, WirePayload
from nrllm_core._privacy import audit_view_for
from nrllm_core._providers import Provider, build_provider
from nrllm_core._recorder import RunRecorder
from nrllm_core._sealing import SealError, load_state_key, open_sealed, seal
from nrllm_core._tool import ToolContext
from nrllm_core._values import Actor, TrustZone
from nrllm_core.log import logger

if TYPE_CHECKING:
    from nrllm_core.store import Store

__all__ = ["ApprovalRefused", "Host", "NoApprover", "RefusalReason"]

_AUDIT_PLUGIN: Final = "nrllm.audit"
T = TypeVar("T")


class RunOptions(TypedDict, total=False):
    """The keyword arguments of ``run`` and ``stream``, each optional: ``provider``,
    ``skill``, ``max_rounds``, ``actor``, ``system`` and ``on_event``."""

    provider: str | None
    skill: str | None
    max_rounds: int | None
    actor: Actor | None
    system: str | None
    on_event: Callable[[TraceEvent], None] | None


class InvokeOptions(TypedDict, total=False):
    """The keyword arguments of ``invoke``, each optional: ``provider``, ``zone``, ``skill``,
    ``kind``, ``approve``, ``actor`` and ``on_event``."""

    provider: str | None
    zone: TrustZone | None
    skill: str | None
    kind: str
    approve: Callable[[PendingCall, str], str | None] | None
    actor: Actor | None
    on_event: Callable[[TraceEvent], None] | None


@final
@attrs.frozen(kw_only=True)
class Drive:
    """What a host flow asks of its runner: drive this loop core for this run."""

    core: Generator[Effect, Any, Any]
    recorder: RunRecorder
    limits: RunConfig
    # None for a core that never asks the model (one direct call).
    provider: Provider | None = None


# A run, an approval or a direct call as the host does it: its store work is plain code, and
# it yields each loop core it needs driven (sync here, async in AsyncHost).
Flow = Generator[Drive, Any, T]


class RefusalReason(enum.StrEnum):
    """Why an approval was refused."""

    NOT_AWAITING = "not_awaiting"
    NO_DIGEST = "no_digest"
    DIGEST_MISMATCH = "digest_mismatch"
    UNOPENABLE = "unopenable"
    EXPIRED = "expired"
    STALE = "stale"
    TAMPERED = "tampered"
    FOUR_EYES = "four_eyes"
    NO_APPROVER = "no_approver"
    ALREADY_DECIDED = "already_decided"
    REPLAYED = "replayed"


class NoApprover(Exception):
    """Raised by the ``approve`` callback of :meth:`Host.invoke` when nobody can decide the
    call (no way to ask a person, or four-eyes with only the initiator there). The call is
    refused with this exception's message as its answer (it must be safe to show), and the
    approval step records the denial with no approver and ``reason`` ``no_approver``."""


class ApprovalRefused(Exception):
    """An approval that cannot be applied: unknown run, not waiting, stale digest, four-eyes,
    an expired or stale turn, a run whose audit chain does not hold (tampered), a replayed
    state. ``reason`` says which; the message is safe to show."""

    def __init__(self, message: str, reason: RefusalReason) -> None:
        super().__init__(message)
        self.reason = reason


def _utcnow() -> datetime:
    return datetime.now(UTC)


@final
class Host:
    """A configured nrllm host: plugins, configuration, the audit store and the state key."""

    def __init__(
        self,
        *,
        pm: PluginManager,
        config_loader: Any,
        store: Store,
        data_dir: str | os.PathLike[str],
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> None:
        self.pm = pm
        self._load = config_loader
        self.store = store
        self._data_dir = Path(data_dir)
        self._environ = os.environ if environ is None else environ
        self._clock = clock
        self._running: dict[str, Cancellation] = {}
        self._running_lock = threading.Lock()
        # Plugins register their tools with this host's own configuration.
        pm.use_config(config_loader)
        if not pm.has_plugin(_AUDIT_PLUGIN):
            from nrllm_core.store import StoreAuditSink

            pm.register(StoreAuditSink(store), name=_AUDIT_PLUGIN)

    @classmethod
    def from_config(
        cls,
        path: str | os.PathLike[str] | None = None,
        *,
        data: Mapping[str, Any] | None = None,
        plugins: Iterable[object] = (),
        load_entry_points: bool = True,
        pm: PluginManager | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> Host:
        """Load the configuration, the plugins and the store (migrated on first use).

        ``pm`` is a plugin manager the host built itself; otherwise one is made from
        ``plugins`` and, unless ``load_entry_points`` is false, the installed entry points.
        ``clock`` (aware UTC datetimes) is the time of the host and its store.
        """
        from nrllm_core.store import Store, default_data_dir

        if pm is None:
            pm = make_plugin_manager(plugins=plugins, load_entry_points=load_entry_points)
        # A section is allowed for every registered plugin, and checked by its settings class;
        # a provider of a kind no plugin registers is a configuration error, as in the CLI.
        loader = config_loader(
            path,
            data=data,
            plugin_sections=functools.partial(_plugin_names, pm),
            settings_classes=pm.settings_classes,
            provider_kinds=lambda: pm.provider_registry().kinds,
        )
        config = loader()
        folder = default_data_dir() if data_dir is None else Path(data_dir)
        store = Store.open(
            config.store.url,
            data_dir=folder,
            lease_seconds=config.store.lease_seconds,
            environ=environ,
            clock=clock,
        )
        return cls(
            pm=pm,
            config_loader=loader,
            store=store,
            data_dir=folder,
            environ=environ,
            clock=clock,
        )

    @property
    def config(self) -> HostConfig:
        """The configuration as it is now (re-read on every access)."""
        config: HostConfig = self._load()
        return config

    # -- running -----------------------------------------------------------------------------

    def gate(self, *, provider: str | None, skill: str | None, actor: Actor) -> GateReport:
        return decide(self.pm.catalog(), self.config, provider=provider, skill=skill, actor=actor)

    def run(
        self,
        prompt: str,
        **options: Unpack[RunOptions],
    ) -> RunOutcome:
        """Run a prompt to its answer, or to a turn that waits for a person's approval.

        ``on_event`` sees each step of this run, unfiltered, as it happens. An empty or
        whitespace-only prompt raises ``ValueError`` before anything is recorded or sent.
        """
        return self._walk(self._run_flow(prompt, **options), NOBODY)

    def stream(
        self,
        prompt: str,
        **options: Unpack[RunOptions],
    ) -> Iterator[StreamEvent]:
        """Run a prompt as :meth:`run` does, yielding what happens as it happens: the model's
        text and thinking as they stream, each call as it starts, each answer that goes back
        to the model (its wire payload only), and last the run's :class:`Suspended` or
        :class:`Finished` event. The run goes on in a thread while the caller reads;
        ``on_event`` is called on the reader's thread, between the events, in the order the
        run made them (a step never comes before the text it records).
        """
        events = EventStream(options.get("on_event"))
        options["on_event"] = events.observer
        flow = self._run_flow(prompt, **options)
        walker: Driver[Drive, RunOutcome] = Driver(flow)
        # Begun here, not on the thread: a bad prompt or provider raises to the caller.
        first = walker.next()
        return events.start(lambda watchers: self._walked(walker, first, watchers))

    def _run_flow(
        self,
        prompt: str,
        *,
        provider: str | None = None,
        skill: str | None = None,
        max_rounds: int | None = None,
        actor: Actor | None = None,
        system: str | None = None,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> Flow[RunOutcome]:
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError("the prompt is empty")
        config = self.config
        actor = actor or config.actor()
        provider_name = self._provider_name(config, provider)
        if skill is not None and skill not in config.skills:
            raise ValueError(
                f'no skill named "{skill}" is configured (configured: {_names(config.skills)})'
            )
        rounds = clamp_rounds(max_rounds)
        report = self.gate(provider=provider_name, skill=skill, actor=actor)
        run_id = new_run_id()
        self.store.start_run(
            run_id, provider=provider_name, zone=report.zone.value, skill=skill, actor=actor.id
        )
        recorder = self._recorder(config, run_id, on_event=on_event)
        with self.store.leased(run_id):
            try:
                recorder.record(
                    _start_step(
                        config, "run", report.zone.value, provider=provider_name, skill=skill
                    )
                )
                return (
                    yield from self._first_segment(
                        recorder, config, report, prompt, system, rounds, actor
                    )
                )
            except Exception:
                return self._crashed(recorder)

    def _first_segment(
        self,
        recorder: RunRecorder,
        config: HostConfig,
        report: GateReport,
        prompt: str,
        system: str | None,
        rounds: int,
        actor: Actor,
    ) -> Flow[RunOutcome]:
        provider_name, skill = report.provider, report.skill
        run_id = recorder.run_id
        recorder.record(gate_step(report))
        self.store.record_decisions(run_id, _decision_records(report))
        messages = [ChatMessage.system(system)] if system else []
        messages.append(ChatMessage.user(prompt))
        try:
            model = self._provider(config, provider_name)
        except ProviderError as exc:
            return self._settle(recorder, _failed(run_id, str(exc)), actor)
        catalog = self.pm.catalog()
        core = first_segment(
            pm=self.pm,
            run_id=run_id,
            provider_name=provider_name,
            skill=skill,
            messages=messages,
            offered=[catalog.tools[n] for n in report.offered_names if n in catalog.tools],
            permits=live_gate(
                self.pm, self._load, provider=provider_name, skill=skill, actor=actor
            ),
            context_for=self._context_for(run_id, actor, config),
            actor=actor,
            max_rounds=rounds,
            limits=config.run,
        )
        outcome = yield Drive(core=core, recorder=recorder, limits=config.run, provider=model)
        return self._settle(recorder, outcome, actor)

    def invoke(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        **options: Unpack[InvokeOptions],
    ) -> WirePayload:
        """One direct call through the seam, recorded as a one-call run of kind ``invoke``.

        Without ``provider`` or ``zone`` the person at the keyboard calls the tool directly and
        it counts as offered; with one, that provider's (or zone's) gate decides, narrowed to
        ``skill``. ``kind`` names the run's kind (``mcp`` for ``nrllm mcp serve``). With
        ``approve``, a tool that needs approval runs only if ``approve(call, turn_digest)``
        answers who approved it; ``None`` denies it, and raising :class:`NoApprover` refuses it
        with that exception's message. The decision is recorded before the call.
        An ``async def`` tool runs on a private event loop thread; the call is answered as
        timed out past ``[run] tool_timeout_seconds``.
        """
        return self._walk(self._invoke_flow(tool_name, arguments, **options), NOBODY)

    def _invoke_flow(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        *,
        provider: str | None = None,
        zone: TrustZone | None = None,
        skill: str | None = None,
        kind: str = "invoke",
        approve: Callable[[PendingCall, str], str | None] | None = None,
        actor: Actor | None = None,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> Flow[WirePayload]:
        from nrllm_core.store import RunKind, RunStatus

        config = self.config
        actor = actor or config.actor()
        if provider is not None:
            self._provider_name(config, provider)
        gated = provider is not None or zone is not None
        if zone is None and provider is not None:
            zone = config.zone_for(provider)
        run_id = new_run_id()
        self.store.start_run(
            run_id,
            kind=RunKind(kind),
            provider=provider,
            zone=None if zone is None else zone.value,
            skill=skill,
            actor=actor.id,
        )
        recorder = self._recorder(config, run_id, on_event=on_event)
        recorder.record(
            _start_step(
                config,
                RunKind(kind).value,
                None if zone is None else zone.value,
                provider=provider,
                skill=skill,
            )
        )
        permits = None
        if gated:
            # The gate's decision for this tool is part of the audit, as it is for a run.
            report = decide(
                self.pm.catalog(),
                config,
                provider=provider,
                skill=skill,
                actor=actor,
                requested=[tool_name],
                zone=zone,
            )
            recorder.record(gate_step(report))
            self.store.record_decisions(run_id, _decision_records(report))
            permits = live_gate(
                self.pm, self._load, provider=provider, skill=skill, actor=actor, zone=zone
            )
        context = self._context_for(run_id, actor, config)(new_call_id())
        registered = self.pm.catalog().get(tool_name)
        with self.store.leased(run_id):
            try:
                if (
                    approve is not None
                    and registered is not None
                    and registered.requires_approval
                    and (permits is None or permits(registered))
                ):
                    wire = yield from self._approved_call(
                        registered, arguments, context, recorder, approve, permits
                    )
                else:
                    core = single_call(self.pm, tool_name, arguments, context, permits)
                    wire = yield Drive(core=core, recorder=recorder, limits=config.run)
            except Exception:
                self._crashed(recorder)
                raise
        if recorder.audit_failures and registered is not None and registered.effect.is_write:
            # The write ran but its record did not: the run says so (fail closed).
            self._finish(recorder, RunStatus.FAILED, TerminationReason.AUDIT_UNAVAILABLE)
        else:
            self._finish(recorder, RunStatus.COMPLETED, TerminationReason.COMPLETED)
        return wire

    def _approved_call(
        self,
        registered: RegisteredTool,
        arguments: Mapping[str, Any],
        context: ToolContext,
        recorder: RunRecorder,
        approve: Callable[[PendingCall, str], str | None],
        permits: Callable[[RegisteredTool], bool] | None,
    ) -> Flow[WirePayload]:
        """Ask ``approve`` about one call, record the answer, then run or refuse the call (the
        live gate decides again: the person may have taken a while)."""
        call = ToolCall(id=context.call_id, name=registered.name, arguments=dict(arguments))
        lines, failed = preview_lines(registered, call, context)
        pending = PendingCall(
            call_id=call.id,
            name=call.name,
            arguments=dict(arguments),
            requires_approval=True,
            preview=lines,
            preview_failed=failed,
        )
        digest = turn_digest(context.run_id, secrets.token_hex(16), [pending])
        refusal: str | None = None
        try:
            approver = approve(pending, digest)
        except NoApprover as exc:
            approver, refusal = None, str(exc)
        fields: dict[str, Any] = {
            "decision": "denied" if approver is None else "approved",
            "approver": approver,
            "turn_digest": digest,
            "decided_at": self._clock().isoformat(),
        }
        if refusal is not None:
            fields["reason"] = "no_approver"
        audited = recorder.record(
            RunStep(kind=StepKind.APPROVAL, round=0, duration_ms=0.0, fields=fields)
        )
        if approver is None or not audited:
            content = refusal or f'Error: tool "{call.name}" was denied by the operator.'
            if approver is not None:
                content = "Error: the approval could not be written to the audit; nothing ran."
            return refuse(
                self.pm, call.name, arguments, content, context=context, recorder=recorder
            )
        core = single_call(self.pm, call.name, arguments, context, permits)
        wire: WirePayload = yield Drive(core=core, recorder=recorder, limits=self.config.run)
        return wire

    def approve(
        self,
        run_id: str,
        *,
        approve: bool = True,
        approver: str,
        turn_digest: str | None,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> RunOutcome:
        """Apply a person's decision to a suspended turn, then continue the run.

        The decision is bound to the turn by its digest, applied at most once (the sealed
        state's nonce is consumed in the claim), never after the run moved on or the turn
        expired, and written to the audit before anything executes.
        """
        flow = self._approve_flow(run_id, approve, approver, turn_digest, on_event)
        return self._walk(flow, NOBODY)

    def _approve_flow(
        self,
        run_id: str,
        approve: bool,
        approver: str,
        turn_digest: str | None,
        on_event: Callable[[TraceEvent], None] | None,
    ) -> Flow[RunOutcome]:
        if names_nobody(approver):
            raise ApprovalRefused(f"the approver {NAMES_NOBODY}", RefusalReason.NO_APPROVER)
        config = self.config
        suspension = self.store.suspension(run_id)
        if suspension is None:
            raise ApprovalRefused(
                f'run "{run_id}" is not awaiting approval', RefusalReason.NOT_AWAITING
            )
        if not turn_digest:
            raise ApprovalRefused(
                "an approval must name the turn digest it approves", RefusalReason.NO_DIGEST
            )
        if suspension.turn_digest != turn_digest:
            raise ApprovalRefused(
                "the digest does not match the pending turn; it may be stale",
                RefusalReason.DIGEST_MISMATCH,
            )
        state = self._open_state(run_id, turn_digest, suspension.sealed)
        if approve and self._four_eyes(config, state) and state.actor.same_as(approver):
            raise ApprovalRefused(
                "four-eyes: the approver must differ from the run's initiator",
                RefusalReason.FOUR_EYES,
            )
        from nrllm_core.store import ClaimRefused

        # Claiming is atomic across processes: a second approval of the same turn, or of a
        # state whose nonce was consumed before, fails here, and the state resumed is the one
        # claimed, read in the claiming transaction.
        try:
            sealed = self.store.claim_suspension(
                run_id,
                turn_digest=turn_digest,
                nonce=state.nonce,
                decision="approved" if approve else "denied",
                approver=approver,
            )
        except ClaimRefused as exc:
            raise ApprovalRefused(str(exc), RefusalReason(exc.reason)) from None
        # The claimed state itself, not checked for its turn again: the claim decided that.
        state = self._open_turn(run_id, turn_digest, sealed).state
        recorder = self._recorder(
            config, run_id, first_sequence=self.store.last_sequence(run_id) + 1, on_event=on_event
        )
        with self.store.leased(run_id):
            try:
                recorder.record(
                    _start_step(
                        config,
                        "run",
                        config.zone_for(state.provider).value,
                        provider=state.provider,
                        skill=state.skill,
                        trace_context=suspension.trace_context,
                    )
                )
                return (
                    yield from self._resume_segment(
                        recorder, config, state, approve, approver, turn_digest
                    )
                )
            except Exception:
                return self._crashed(recorder)

    def _resume_segment(
        self,
        recorder: RunRecorder,
        config: HostConfig,
        state: SuspendedRunState,
        approve: bool,
        approver: str,
        turn_digest: str,
    ) -> Flow[RunOutcome]:
        run_id = recorder.run_id
        audited = recorder.record(
            RunStep(
                kind=StepKind.APPROVAL,
                round=state.iterations,
                duration_ms=0.0,
                fields={
                    "decision": "approved" if approve else "denied",
                    "approver": approver,
                    "turn_digest": turn_digest,
                    "decided_at": self._clock().isoformat(),
                },
            )
        )
        actor = state.actor
        if not audited:
            outcome = _failed(
                run_id, "the approval could not be written to the audit; nothing was executed"
            )
            return self._settle(
                recorder, outcome, actor, reason=TerminationReason.AUDIT_UNAVAILABLE
            )
        try:
            model = self._provider(config, state.provider)
        except ProviderError as exc:
            return self._settle(recorder, _failed(run_id, str(exc)), actor)
        report = self.gate(provider=state.provider, skill=state.skill, actor=actor)
        catalog = self.pm.catalog()
        core = resumed_segment(
            pm=self.pm,
            state=state,
            approved=approve,
            offered=[catalog.tools[n] for n in report.offered_names if n in catalog.tools],
            permits=live_gate(
                self.pm, self._load, provider=state.provider, skill=state.skill, actor=actor
            ),
            context_for=self._context_for(run_id, actor, config),
            limits=config.run,
        )
        outcome = yield Drive(core=core, recorder=recorder, limits=config.run, provider=model)
        return self._settle(recorder, outcome, actor)

    def pending(self, run_id: str) -> RunOutcome | None:
        """The suspended turn of ``run_id`` (its calls, previews and digest), or ``None``.

        Raises :class:`ApprovalRefused` when the sealed state cannot be opened, has expired
        or is stale.
        """
        suspension = self.store.suspension(run_id)
        if suspension is None:
            return None
        state = self._open_state(run_id, suspension.turn_digest, suspension.sealed)
        return RunOutcome(
            run_id=run_id,
            status="awaiting_approval",
            termination_reason=None,
            final_content="",
            pending=state.pending,
            turn_digest=suspension.turn_digest,
            usage=state.usage,
        )

    def runs(self, status: str | None = None) -> list[Any]:
        """The persisted runs, newest first."""
        from nrllm_core.store import RunStatus

        return self.store.list_runs(None if status is None else RunStatus(status))

    def cancel(self, run_id: str) -> bool:
        """Cancel a run this host is driving now, from any thread: its pending calls never
        start, the model is not asked again, and the run settles ``cancelled``. ``False``
        when this host is driving no run of that id."""
        with self._running_lock:
            cancellation = self._running.get(run_id)
        if cancellation is None:
            return False
        logger().info("nrllm.run.cancel_requested", run_id=run_id)
        cancellation.cancel()
        return True

    # -- driving -----------------------------------------------------------------------------

    def _walk(self, flow: Flow[T], watchers: Watchers) -> T:
        walker: Driver[Drive, T] = Driver(flow)
        return self._walked(walker, walker.next(), watchers)

    def _walked(self, walker: Driver[Drive, T], effect: Drive | None, watchers: Watchers) -> T:
        """Go on with a flow whose next effect is ``effect``, to its end."""
        while effect is not None:
            try:
                with self._cancellable(effect.recorder.run_id) as cancellation:
                    walker.answer(
                        drive(
                            effect.core,
                            pm=self.pm,
                            provider=effect.provider,
                            record=functools.partial(record_step, effect.recorder),
                            limits=effect.limits,
                            cancellation=cancellation,
                            watchers=watchers,
                        )
                    )
            except Exception as exc:
                walker.fail(exc)
            effect = walker.next()
        return walker.result()

    @contextlib.contextmanager
    def _cancellable(self, run_id: str) -> Iterator[Cancellation]:
        cancellation = Cancellation()
        with self._running_lock:
            self._running[run_id] = cancellation
        try:
            yield cancellation
        finally:
            with self._running_lock:
                self._running.pop(run_id, None)

    # -- helpers -----------------------------------------------------------------------------

    def _open_state(self, run_id: str, turn_digest: str, sealed: bytes) -> SuspendedRunState:
        """The state sealed for this run and this turn, while its turn is still open.

        A state whose expiry has passed does not open, nor one whose run has any step after
        the suspension: that turn is over, whatever the database says. The run's steps are
        only counted once its audit chain holds: steps deleted to make a decided turn look
        open again break it.
        """
        turn = self._open_turn(run_id, turn_digest, sealed)
        if self._clock() >= turn.expires_at:
            raise ApprovalRefused(
                f"the suspended turn expired at {turn.expires_at.isoformat()}; "
                "it can no longer be decided",
                RefusalReason.EXPIRED,
            )
        broken = self.store.verify(run_id).broken
        if broken:
            (first,) = broken
            logger().warning(
                "nrllm.run.chain_broken",
                run_id=run_id,
                sequence=first.sequence,
                problem=first.problem.value,
            )
            raise ApprovalRefused(
                f"the run's audit chain does not hold (tampered: broken at step "
                f"{first.sequence}, {first.problem.value}); the turn cannot be decided",
                RefusalReason.TAMPERED,
            )
        if self.store.last_sequence(run_id) > turn.last_sequence:
            logger().warning("nrllm.run.state_stale", run_id=run_id)
            raise ApprovalRefused(
                "the suspended turn is stale: the run has steps after it", RefusalReason.STALE
            )
        return turn.state

    def _open_turn(self, run_id: str, turn_digest: str, sealed: bytes) -> _SealedTurn:
        """What was sealed for this run and this turn. A state from another run or another
        turn of this run does not open: a refusal that never shows why (the log does)."""
        try:
            key = load_state_key(self._data_dir, dict(self._environ))
            turn = _turn_from_json(open_sealed(key, _binding(run_id, turn_digest), sealed))
        except (SealError, OSError, ValueError, KeyError, TypeError, BaseExceptionGroup) as exc:
            logger().warning("nrllm.run.state_unopenable", run_id=run_id, error=type(exc).__name__)
            raise ApprovalRefused(
                "the suspended state cannot be opened", RefusalReason.UNOPENABLE
            ) from None
        if turn.state.run_id != run_id or turn.state.digest != turn_digest:
            logger().warning("nrllm.run.state_mismatch", run_id=run_id)
            raise ApprovalRefused("the suspended state cannot be opened", RefusalReason.UNOPENABLE)
        return turn

    def _provider_name(self, config: HostConfig, provider: str | None) -> str:
        name = provider or config.defaults.provider
        if name is None:
            raise ValueError("no provider: name one, or set [defaults] provider")
        if name not in config.providers:
            raise ValueError(
                f'no provider named "{name}" is configured (configured: {_names(config.providers)})'
            )
        return name

    def _provider(self, config: HostConfig, name: str | None) -> Provider:
        if name is None or name not in config.providers:
            raise ProviderError(f'provider "{name}" is no longer configured')
        settings = attrs.asdict(config.providers[name])
        return build_provider(
            self.pm.provider_registry(),
            name,
            settings,
            config_dir=config.config_dir,
            environ=self._environ,
        )

    def _recorder(
        self,
        config: HostConfig,
        run_id: str,
        first_sequence: int = 1,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> RunRecorder:
        # Each plugin learns its own section as it stands for this segment.
        self.pm.deliver_settings(config.plugin_settings)
        return RunRecorder(
            self.pm,
            run_id,
            audit_view=audit_view_for(config.privacy.level),
            first_sequence=first_sequence,
            observer=on_event,
        )

    def _context_for(self, run_id: str, actor: Actor, config: HostConfig) -> Any:
        def context_for(call_id: str) -> ToolContext:
            return ToolContext(
                run_id=run_id, call_id=call_id, actor=actor, settings=config.plugin_settings
            )

        return context_for

    def _four_eyes(self, config: HostConfig, state: SuspendedRunState) -> bool:
        provider = config.providers.get(state.provider or "")
        skill = config.skills.get(state.skill or "")
        return bool((provider and provider.four_eyes) or (skill and skill.four_eyes))

    def _crashed(self, recorder: RunRecorder) -> RunOutcome:
        """An unexpected failure inside a run: logged in full, settled as failed, and reported
        without its text (which can quote prompts, arguments or keys)."""
        from nrllm_core.store import RunStatus

        run_id = recorder.run_id
        error = sys.exc_info()[1]
        if isinstance(error, RunCancelled):
            # Cancelled before its loop could start: settled so, nothing else happened.
            self._finish(recorder, RunStatus.CANCELLED, TerminationReason.CANCELLED)
            return RunOutcome(
                run_id=run_id,
                status=RunStatus.CANCELLED.value,
                termination_reason=TerminationReason.CANCELLED.value,
                final_content="",
            )
        kind = type(error).__name__
        logger().error("nrllm.run.crashed", run_id=run_id, exc_info=True)
        try:
            self._finish(recorder, RunStatus.FAILED, TerminationReason.INTERNAL_ERROR)
        except Exception:
            logger().error("nrllm.run.settle_failed", run_id=run_id, exc_info=True)
        return RunOutcome(
            run_id=run_id,
            status="failed",
            termination_reason=TerminationReason.INTERNAL_ERROR.value,
            final_content="",
            error=f"the run failed unexpectedly ({kind}); the log has the details",
        )

    def _finish(self, recorder: RunRecorder, status: Any, reason: TerminationReason) -> None:
        """The segment's ``finish`` record, then the run settled: ``status`` and ``reason``."""
        recorder.record(
            RunStep(
                kind=StepKind.FINISH,
                round=0,
                duration_ms=0.0,
                fields={"status": status.value, "termination_reason": reason.value},
            )
        )
        self.store.finish_run(recorder.run_id, status, reason.value)

    def _settle(
        self,
        recorder: RunRecorder,
        outcome: LoopOutcome,
        actor: Actor,
        *,
        reason: TerminationReason | None = None,
    ) -> RunOutcome:
        from nrllm_core.store import RunStatus

        run_id = recorder.run_id
        result = outcome.result
        termination = reason or result.termination_reason
        if outcome.suspended is not None:
            state = outcome.suspended
            digest = state.digest
            try:
                recorder.record(_suspension_step(state))
                trace_context = self.pm.trace_context(run_id)
                turn = _SealedTurn(
                    state=state,
                    last_sequence=self.store.last_sequence(run_id),
                    expires_at=self._clock() + timedelta(seconds=self.config.approvals.ttl_seconds),
                )
                key = load_state_key(self._data_dir, dict(self._environ))
                sealed = seal(key, _binding(run_id, digest), _turn_to_json(turn))
                self.store.suspend_run(
                    run_id, sealed=sealed, turn_digest=digest, trace_context=trace_context
                )
            except Exception:
                # No promise of a resume that cannot happen: the run fails instead.
                logger().error("nrllm.run.suspend_failed", run_id=run_id, exc_info=True)
                self._finish(recorder, RunStatus.FAILED, TerminationReason.SUSPEND_FAILED)
                return RunOutcome(
                    run_id=run_id,
                    status="failed",
                    termination_reason=TerminationReason.SUSPEND_FAILED.value,
                    final_content="",
                    error="the run could not be suspended: its state could not be stored",
                    usage=result.usage,
                )
            return RunOutcome(
                run_id=run_id,
                status="awaiting_approval",
                termination_reason=termination.value,
                final_content="",
                pending=state.pending,
                turn_digest=digest,
                usage=result.usage,
            )
        status = RunStatus.FAILED if outcome.error is not None else RunStatus.COMPLETED
        if termination is TerminationReason.CANCELLED:
            status = RunStatus.CANCELLED
        self._finish(recorder, status, termination)
        return RunOutcome(
            run_id=run_id,
            status=status.value,
            termination_reason=termination.value,
            final_content=result.final_content,
            error=outcome.error,
            usage=result.usage,
            truncated=result.truncated,
        )


def record_step(recorder: RunRecorder, effect: Record) -> bool:
    """Write the step a loop core yields; whether every audit sink took it."""
    delivered: bool = recorder.record(effect.step)
    return delivered


def _failed(run_id: str, error: str) -> LoopOutcome:
    from nrllm_core._loop import ToolLoopResult

    return LoopOutcome(
        result=ToolLoopResult(
            final_content="",
            invocations=(),
            iterations=0,
            truncated=False,
            usage=Usage(),
            termination_reason=TerminationReason.PROVIDER_FAILED,
        ),
        error=error,
    )


def _start_step(
    config: HostConfig,
    kind: str,
    zone: str | None,
    *,
    provider: str | None,
    skill: str | None = None,
    trace_context: Mapping[str, str] | None = None,
) -> RunStep:
    """A segment's first record: what the run is, where its model is, and (when it resumes a
    suspended turn) the trace context stored with that turn. No content."""
    settings = config.providers.get(provider or "")
    address = urlsplit(settings.base_url) if settings and settings.base_url else None
    try:
        port = None if address is None else address.port
    except ValueError:
        port = None
    return RunStep(
        kind=StepKind.START,
        round=0,
        duration_ms=0.0,
        fields={
            "run_kind": kind,
            "provider": provider,
            "provider_kind": settings.kind if settings else None,
            "zone": zone,
            "skill": skill,
            "model": settings.model if settings else None,
            "server_address": None if address is None else address.hostname,
            "server_port": port,
            # What the segment's records keep of content, for a sink that forwards them.
            "privacy_level": config.privacy.level.value,
            "trace_context": None if trace_context is None else dict(trace_context),
        },
    )


def _suspension_step(state: SuspendedRunState) -> RunStep:
    """The turn that waits: its calls by id and name and the digest an approval must name. No
    arguments, no previews. The name is masked and bounded like any audited name; the id, as
    every call id, by the privacy view below ``full``, so that it still matches its call's."""
    from nrllm_core.redact import redact

    return RunStep(
        kind=StepKind.SUSPENSION,
        round=state.iterations,
        duration_ms=0.0,
        fields={
            "turn_digest": state.digest,
            "pending_calls": [
                {
                    "id": p.call_id,
                    "name": redact(p.name),
                    "requires_approval": p.requires_approval,
                }
                for p in state.pending
            ],
        },
    )


def _plugin_names(pm: PluginManager) -> list[str]:
    return [name for name, plugin in pm.list_name_plugin() if plugin is not None]


def _names(mapping: Mapping[str, Any]) -> str:
    return ", ".join(sorted(mapping)) or "none"


def _decision_records(report: GateReport) -> list[Any]:
    from nrllm_core.store import GateDecisionRecord

    # Offered tools need no record; a refusal, or one observe mode overrode, does.
    records = []
    for d in report.decisions:
        reason = d.reason if d.reason is not None else d.observed
        if reason is not None:
            records.append(
                GateDecisionRecord(
                    tool=d.tool,
                    reason=reason.value,
                    zone=report.zone.value,
                    ceiling=report.ceiling.value,
                    observed=d.observed is not None,
                )
            )
    return records


@final
@attrs.frozen(kw_only=True)
class _SealedTurn:
    """What a suspension seals: the run's state, and how long that turn stays open."""

    state: SuspendedRunState
    # The run's last stored step at suspension: a run with any later step is past this turn.
    last_sequence: int
    expires_at: datetime


@functools.cache
def _state_converter() -> Any:
    """The one converter at the suspension boundary (cattrs loads on first use)."""
    from cattrs.preconf.json import make_converter

    return make_converter(forbid_extra_keys=True)


def _turn_to_json(turn: _SealedTurn) -> bytes:
    return _json.dumps(_state_converter().unstructure(turn))


def _turn_from_json(data: bytes) -> _SealedTurn:
    turn: _SealedTurn = _state_converter().structure(_json.loads(data), _SealedTurn)
    if turn.expires_at.tzinfo is None:
        raise ValueError("a sealed expiry must carry its timezone")
    return turn


def _binding(run_id: str, turn_digest: str) -> str:
    """What a sealed state is bound to: its run and its turn."""
    return f"{run_id}:{turn_digest}"

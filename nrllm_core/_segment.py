"""What every host flow shares: the host's parts, a segment's first record, its recorder and
model, and how it settles (finished, failed, cancelled or suspended)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Generator, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar, final
from urllib.parse import urlsplit

import attrs

from nrllm_core._ask_values import QuestionHandler
from nrllm_core._asks import RunAsks
from nrllm_core._config import HostConfig, RunConfig
from nrllm_core._gate import GateReport, decide
from nrllm_core._kept_providers import KeptProviders
from nrllm_core._loop import (
    Effect,
    LoopOutcome,
    Record,
    RunCancelled,
    TerminationReason,
    ToolLoopResult,
)
from nrllm_core._manager import PluginManager
from nrllm_core._messages import ProviderError, Usage
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import RunStep, StepKind, TraceEvent
from nrllm_core._privacy import audit_view_for
from nrllm_core._providers import Provider, build_provider
from nrllm_core._recorder import RunRecorder
from nrllm_core._status import RunStatus
from nrllm_core._suspension import Suspensions, suspension_step
from nrllm_core._tool import ToolContext
from nrllm_core._values import Actor
from nrllm_core.log import logger

if TYPE_CHECKING:
    from nrllm_core.store import GateDecisionRecord, Store

__all__ = [
    "Drive",
    "Flow",
    "HostParts",
    "approval_step",
    "decision_records",
    "failed",
    "names",
    "record_step",
    "start_step",
    "unasked",
]

T = TypeVar("T")


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
# it yields each loop core it needs driven (by Host on its thread, by AsyncHost on its loop).
Flow = Generator[Drive, Any, T]


@final
@attrs.frozen(kw_only=True)
class HostParts:
    """What a host is made of, as its flows use it: the plugins, the configuration (read
    again on every access), the store, its suspended turns, the environment, the clock, and
    the providers its suspended runs keep."""

    pm: PluginManager
    load: Callable[[], HostConfig]
    store: Store
    suspensions: Suspensions
    environ: Mapping[str, str]
    clock: Callable[[], datetime]
    kept: KeptProviders = attrs.field(factory=KeptProviders)
    # Who answers a running tool's question (``Host(on_question=...)``); none: declined.
    on_question: QuestionHandler | None = None

    @property
    def config(self) -> HostConfig:
        return self.load()

    def gate(
        self, config: HostConfig, *, provider: str | None, skill: str | None, actor: Actor
    ) -> GateReport:
        return decide(
            self.pm.catalog(),
            config,
            provider=provider,
            skill=skill,
            actor=actor,
            kinds=self.pm.provider_registry().registered,
        )

    def provider_name(self, config: HostConfig, provider: str | None) -> str:
        """The provider a run names, else the configured default; one that is configured."""
        name = provider or config.defaults.provider
        if name is None:
            raise ValueError("no provider: name one, or set [defaults] provider")
        if name not in config.providers:
            raise ValueError(
                f'no provider named "{name}" is configured (configured: {names(config.providers)})'
            )
        return name

    def provider(
        self, config: HostConfig, name: str | None, run_id: str
    ) -> tuple[Mapping[str, Any], Provider]:
        """The provider ``name`` and the section it is built from: the one kept from the run's
        last segment in this process while that section stands, else a new one."""
        if name is None or name not in config.providers:
            raise ProviderError(f'provider "{name}" is no longer configured')
        section = config.providers[name].section()
        kept = self.kept.take(run_id, section)
        if kept is not None:
            return section, kept
        built = build_provider(
            self.pm.provider_registry(),
            name,
            section,
            config_dir=config.config_dir,
            environ=self.environ,
        )
        return section, built

    def context_for(
        self, recorder: RunRecorder, actor: Actor, config: HostConfig, deps: Any
    ) -> Callable[[str], ToolContext]:
        """The context each call of a segment runs in, by its call id, with the host's
        ``deps`` for this segment and what it may ask of the run."""
        asks = RunAsks(
            pm=self.pm,
            config=config,
            environ=self.environ,
            recorder=recorder,
            on_question=self.on_question,
        )

        def made(call_id: str) -> ToolContext:
            return ToolContext(
                run_id=recorder.run_id,
                call_id=call_id,
                actor=actor,
                settings=config.plugin_settings,
                deps=deps,
                asks=asks.of_call(call_id),
            )

        return made

    def driven(
        self,
        recorder: RunRecorder,
        config: HostConfig,
        provider: str | None,
        core: Generator[Effect, Any, Any],
    ) -> Flow[RunOutcome]:
        """``core`` driven with the run's provider, then the run settled; a run that then waits
        for a person keeps its provider here for the segment its approval starts."""
        run_id = recorder.run_id
        # Built last: nothing between it and the drive that closes it can raise.
        try:
            section, model = self.provider(config, provider, run_id)
        except ProviderError as exc:
            return self.settle(recorder, config, failed(run_id, str(exc)))
        outcome = yield Drive(core=core, recorder=recorder, limits=config.run, provider=model)
        settled = self.settle(recorder, config, outcome)
        if settled.status is RunStatus.AWAITING_APPROVAL:
            self.kept.keep(run_id, section, model)
        return settled

    def to_close(self, driven: Drive, following: Drive | None) -> Provider | None:
        """What a driver closes once the flow has gone on from ``driven``: its provider, unless
        the run keeps it, for a later segment or for the ``following`` one."""
        provider = driven.provider
        if self.kept.holds(provider) or (following is not None and following.provider is provider):
            return None
        return provider

    def recorder(
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

    def segment(
        self, recorder: RunRecorder, start: Callable[[], RunStep], body: Flow[RunOutcome]
    ) -> Flow[RunOutcome]:
        """A segment of a run, under the run's lease: its ``start`` record, then ``body``; an
        unexpected failure in either settles the run instead of leaving it running."""
        with self.store.leased(recorder.run_id):
            try:
                recorder.record(start())
                return (yield from body)
            except Exception:
                return self.crashed(recorder)

    def finish(
        self, recorder: RunRecorder, status: RunStatus, reason: TerminationReason
    ) -> tuple[RunStatus, TerminationReason]:
        """The segment's ``finish`` record, then the run settled: ``status`` and ``reason``, as
        returned. The steps that wait for the settling (the final answer, ``finish``) cannot
        block it: when they cannot be stored the run is settled without them (the store logs
        which), as failed, ``audit_unavailable`` unless it was failing already."""
        recorder.record(
            RunStep(
                kind=StepKind.FINISH,
                round=0,
                duration_ms=0.0,
                fields={"status": status.value, "termination_reason": reason.value},
            )
        )
        try:
            self.store.finish_run(recorder.run_id, status, reason.value)
        except Exception:
            logger().error("nrllm.run.settle_retried", run_id=recorder.run_id, exc_info=True)
            recorder.audit_failures += 1
            if status is not RunStatus.FAILED:
                status, reason = RunStatus.FAILED, TerminationReason.AUDIT_UNAVAILABLE
            # The failed write took the waiting steps with it: this one carries none.
            self.store.finish_run(recorder.run_id, status, reason.value)
        return status, reason

    def crashed(self, recorder: RunRecorder) -> RunOutcome:
        """An unexpected failure inside a run: logged in full, settled as failed, and reported
        without its text (which can quote prompts, arguments or keys)."""
        error = sys.exc_info()[1]
        if isinstance(error, RunCancelled):
            # Cancelled before its loop could start: settled so, nothing else happened.
            return self._ended(recorder, RunStatus.CANCELLED, TerminationReason.CANCELLED)
        logger().error("nrllm.run.crashed", run_id=recorder.run_id, exc_info=True)
        message = f"the run failed unexpectedly ({type(error).__name__}); the log has the details"
        try:
            return self._ended(
                recorder, RunStatus.FAILED, TerminationReason.INTERNAL_ERROR, error=message
            )
        except Exception:
            logger().error("nrllm.run.settle_failed", run_id=recorder.run_id, exc_info=True)
            return _outcome(
                recorder.run_id, RunStatus.FAILED, TerminationReason.INTERNAL_ERROR, error=message
            )

    def settle(
        self,
        recorder: RunRecorder,
        config: HostConfig,
        outcome: LoopOutcome,
        *,
        reason: TerminationReason | None = None,
    ) -> RunOutcome:
        """The run as its loop left it: finished (completed, failed or cancelled), or parked
        on a sealed turn; a turn that cannot be sealed fails the run."""
        run_id = recorder.run_id
        result = outcome.result
        termination = reason or result.termination_reason
        if outcome.suspended is not None:
            state = outcome.suspended
            try:
                recorder.record(suspension_step(state))
                self.suspensions.suspend(
                    run_id,
                    state,
                    ttl_seconds=config.approvals.ttl_seconds,
                    trace_context=self.pm.trace_context(run_id),
                )
            except Exception:
                # No promise of a resume that cannot happen: the run fails instead.
                logger().error("nrllm.run.suspend_failed", run_id=run_id, exc_info=True)
                return self._ended(
                    recorder,
                    RunStatus.FAILED,
                    TerminationReason.SUSPEND_FAILED,
                    error="the run could not be suspended: its state could not be stored",
                    result=result,
                )
            return RunOutcome(
                run_id=run_id,
                status=RunStatus.AWAITING_APPROVAL,
                termination_reason=termination.value,
                final_content="",
                pending=state.pending,
                turn_digest=state.digest,
                usage=result.usage,
                untrusted=state.turn_label.shown(config.privacy.keeps_content),
            )
        status = RunStatus.FAILED if outcome.error is not None else RunStatus.COMPLETED
        if termination is TerminationReason.CANCELLED:
            status = RunStatus.CANCELLED
        return self._ended(recorder, status, termination, error=outcome.error, result=result)

    def _ended(
        self,
        recorder: RunRecorder,
        status: RunStatus,
        reason: TerminationReason,
        *,
        error: str | None = None,
        result: ToolLoopResult | None = None,
    ) -> RunOutcome:
        """Settle the run as ``status`` for ``reason`` and report it so: as failed when its
        last steps could not be stored (see :meth:`finish`)."""
        settled, reason = self.finish(recorder, status, reason)
        if settled is not status:
            error = "the run's last steps could not be written to the audit"
        return _outcome(recorder.run_id, settled, reason, error=error, result=result)


def _outcome(
    run_id: str,
    status: RunStatus,
    reason: TerminationReason,
    *,
    error: str | None = None,
    result: ToolLoopResult | None = None,
) -> RunOutcome:
    """A run's outcome once it has ended: its loop's answer and usage, when it got that far."""
    return RunOutcome(
        run_id=run_id,
        status=status,
        termination_reason=reason.value,
        final_content="" if result is None else result.final_content,
        error=error,
        usage=Usage() if result is None else result.usage,
        truncated=result is not None and result.truncated,
    )


def approval_step(
    *,
    round: int,
    approved: bool,
    approver: str | None,
    turn_digest: str,
    decided_at: datetime,
    reason: str | None = None,
    decision: str | None = None,
) -> RunStep:
    """A person's decision on a turn or a call, recorded before anything it decides runs
    (``reason`` says why a call was refused, when it was; ``decision`` names a refusal that
    is not a denial: ``cancelled`` or ``unanswered``)."""
    if decision is None:
        decision = "approved" if approved else "denied"
    fields: dict[str, Any] = {
        "decision": decision,
        "approver": approver,
        "turn_digest": turn_digest,
        "decided_at": decided_at.isoformat(),
    }
    if reason is not None:
        fields["reason"] = reason
    return RunStep(kind=StepKind.APPROVAL, round=round, duration_ms=0.0, fields=fields)


def record_step(recorder: RunRecorder, effect: Record) -> bool:
    """Write the step a loop core yields; whether every audit sink took it."""
    return recorder.record(effect.step)


def failed(run_id: str, error: str) -> LoopOutcome:
    """A segment that ends before its model was asked: no answer, ``error``."""
    return LoopOutcome(result=unasked(TerminationReason.PROVIDER_FAILED), error=error)


def unasked(reason: TerminationReason) -> ToolLoopResult:
    """The loop's result of a segment whose model was never asked."""
    return ToolLoopResult(
        final_content="",
        invocations=(),
        iterations=0,
        truncated=False,
        usage=Usage(),
        termination_reason=reason,
    )


def start_step(
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


def decision_records(report: GateReport) -> list[GateDecisionRecord]:
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


def names(mapping: Mapping[str, Any]) -> str:
    return ", ".join(sorted(mapping)) or "none"

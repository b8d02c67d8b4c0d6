"""The host facade: one object that runs, suspends, approves and lists governed runs.

What a run, an approval and a direct call do is in their flows (``_run_flow``,
``_approval_flow``, ``_direct_flow``, reached through ``_flows.Flows``) and what a suspended
turn is in ``_suspension``; the host builds them, owns its plugin manager, and walks the flows
on the caller's thread (``AsyncHost`` walks the same flows on an event loop).
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, Unpack, final

from nrllm_core._ask_values import QuestionHandler
from nrllm_core._config import HostConfig, config_loader
from nrllm_core._direct_flow import InvokeOptions, SubmitOptions
from nrllm_core._drive import NOBODY, Driver, Watchers, drive
from nrllm_core._events import EventStream, StreamEvent
from nrllm_core._flows import Flows, RunOptions
from nrllm_core._gate import GateReport
from nrllm_core._manager import PluginManager, make_plugin_manager
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import TraceEvent, WirePayload
from nrllm_core._providers import closed
from nrllm_core._segment import Drive, Flow, HostParts, record_step
from nrllm_core._suspension import RefusalReason, Suspensions
from nrllm_core._values import Actor

if TYPE_CHECKING:
    from nrllm_core.store import RunInfo, Store

__all__ = ["Host"]

# The name a host registers its audit sink under: taken, the manager is another host's.
_AUDIT_PLUGIN: Final = "nrllm.audit"
T = TypeVar("T")


def _utcnow() -> datetime:
    return datetime.now(UTC)


@final
class Host:
    """A configured nrllm host: plugins, configuration, the audit store and the state key.

    A host owns its plugin manager: it registers its audit sink and its configuration with
    it, so a manager another host owns is refused (``ValueError``).
    """

    def __init__(
        self,
        *,
        pm: PluginManager,
        config_loader: Any,
        store: Store,
        data_dir: str | os.PathLike[str],
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], datetime] = _utcnow,
        on_elicitation: QuestionHandler | None = None,
    ) -> None:
        _refuse_shared(pm)
        environ = os.environ if environ is None else environ
        self.pm = pm
        self.store = store
        suspensions = Suspensions(
            store=store, data_dir=Path(data_dir), environ=environ, clock=clock
        )
        parts = HostParts(
            pm=pm,
            load=config_loader,
            store=store,
            suspensions=suspensions,
            environ=environ,
            clock=clock,
            on_question=on_elicitation,
        )
        # The host's runs, approvals and direct calls, as both drivers walk them.
        self.flows = Flows(parts)
        # The providers its suspended runs kept end with the host.
        weakref.finalize(self, parts.kept.close)
        # Plugins register their tools with this host's own configuration.
        pm.use_config(config_loader)
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
        on_elicitation: QuestionHandler | None = None,
    ) -> Host:
        """Load the configuration, the plugins and the store (migrated on first use).

        ``pm`` is a plugin manager the host built itself; otherwise one is made from
        ``plugins`` and, unless ``load_entry_points`` is false, the installed entry points.
        ``clock`` (aware UTC datetimes) is the time of the host and its store.
        ``on_elicitation`` answers a running tool's question to a person
        (:meth:`ToolContext.ask_person`), on the call's own thread; without it every question
        is declined.
        """
        from nrllm_core.store import Store, default_data_dir

        if pm is None:
            pm = make_plugin_manager(plugins=plugins, load_entry_points=load_entry_points)
        # Refused before a store is opened for it.
        _refuse_shared(pm)
        # A section is allowed for every registered plugin, and checked by its settings class;
        # a provider of a kind no plugin registers is a configuration error, as in the CLI.
        loader = config_loader(
            path,
            data=data,
            plugin_sections=functools.partial(_plugin_names, pm),
            settings_classes=pm.settings_classes,
            provider_kinds=lambda: pm.provider_registry().registered,
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
            on_elicitation=on_elicitation,
        )

    @property
    def config(self) -> HostConfig:
        """The configuration as it is now (re-read on every access)."""
        return self.flows.parts.config

    # -- running -----------------------------------------------------------------------------

    def gate(self, *, provider: str | None, skill: str | None, actor: Actor) -> GateReport:
        return self.flows.parts.gate(self.config, provider=provider, skill=skill, actor=actor)

    def run(
        self,
        prompt: str,
        **options: Unpack[RunOptions],
    ) -> RunOutcome:
        """Run a prompt to its answer, or to a turn that waits for a person's approval.

        ``on_event`` sees each step of this run, unfiltered, as it happens. An empty or
        whitespace-only prompt raises ``ValueError`` before anything is recorded or sent.
        """
        return self._walk(self.flows.run(prompt, **options), NOBODY)

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
        flow = self.flows.run(prompt, **options)
        walker: Driver[Drive, RunOutcome] = Driver(flow)
        # Begun here, not on the thread: a bad prompt or provider raises to the caller.
        first = walker.next()
        return events.start(lambda watchers: self._walked(walker, first, watchers))

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
        return self._walk(self.flows.invoke(tool_name, arguments, **options), NOBODY)

    def submit(
        self,
        tool_name: str,
        arguments: Mapping[str, Any],
        **options: Unpack[SubmitOptions],
    ) -> RunOutcome:
        """One direct call as :meth:`invoke` makes it, except that a tool that needs approval
        (and passes the gate) is not asked about here: its run suspends on the call, as a
        model's turn does, sealed in the store, and :meth:`approve` of any host sharing the
        store and the state key decides it; approved, the call runs (the live gate decides
        again) and the run ends, with no model. The outcome is ``awaiting_approval`` with the
        call in ``pending`` and the turn's digest, or the run settled with the call's answer
        in ``call`` (and its content in ``final_content``), as :meth:`approve` reports it too.
        """
        return self._walk(self.flows.submit(tool_name, arguments, **options), NOBODY)

    def approve(
        self,
        run_id: str,
        *,
        approve: bool = True,
        approver: str,
        turn_digest: str | None,
        on_event: Callable[[TraceEvent], None] | None = None,
        deps: Any = None,
    ) -> RunOutcome:
        """Apply a person's decision to a suspended turn, then continue the run.

        The decision is bound to the turn by its digest, applied at most once (the sealed
        state's nonce is consumed in the claim), never after the run moved on or the turn
        expired, and written to the audit before anything executes. ``deps`` is what the
        resumed run's tools get (``ToolContext.deps``): never sealed with the turn, so a run
        resumed here gets what this call passes.
        """
        flow = self.flows.approve(
            run_id,
            approve=approve,
            approver=approver,
            turn_digest=turn_digest,
            on_event=on_event,
            deps=deps,
        )
        return self._walk(flow, NOBODY)

    def pending(self, run_id: str) -> RunOutcome | None:
        """The suspended turn of ``run_id`` (its calls, previews and digest), or ``None``.

        Raises :class:`ApprovalRefused` when the sealed state cannot be opened, has expired
        or is stale.
        """
        return self.flows.parts.suspensions.pending(
            run_id, content_kept=self.config.privacy.keeps_content
        )

    def runs(self, status: str | None = None) -> list[RunInfo]:
        """The persisted runs, newest first."""
        from nrllm_core.store import RunStatus

        return self.store.list_runs(None if status is None else RunStatus(status))

    def cancel(
        self,
        run_id: str,
        *,
        by: str | None = None,
        reason: RefusalReason = RefusalReason.CANCELLED,
    ) -> bool:
        """Cancel a run this host is driving now, from any thread: its pending calls never
        start, the model is not asked again, and the run settles ``cancelled``. A run that
        waits for an approval (of any host or process) is ended too: its sealed state
        destroyed, its turn decided ``cancelled`` by ``by`` (default: the configured actor),
        or ``unanswered`` when ``reason`` is ``RefusalReason.UNANSWERED`` (a question that got
        no answer), recorded in the audit, and a later approval refused
        (``RefusalReason.CANCELLED``). ``False`` when the run is neither driven here nor
        suspended."""
        return self.flows.cancel(run_id, by=by, reason=reason)

    # -- driving -----------------------------------------------------------------------------

    def _walk(self, flow: Flow[T], watchers: Watchers) -> T:
        walker: Driver[Drive, T] = Driver(flow)
        return self._walked(walker, walker.next(), watchers)

    def _walked(self, walker: Driver[Drive, T], effect: Drive | None, watchers: Watchers) -> T:
        """Go on with a flow whose next effect is ``effect``, to its end."""
        while effect is not None:
            following: Drive | None = None
            try:
                try:
                    with self.flows.cancellable(effect.recorder.run_id) as cancellation:
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
                following = walker.next()
            finally:
                # Once the run has settled: a run that waits for a person keeps its provider.
                closed(self.flows.parts.to_close(effect, following))
            effect = following
        return walker.result()


def _refuse_shared(pm: PluginManager) -> None:
    """A manager that has a host's audit sink belongs to that host: a second host on it would
    write its audit into the first one's store and swap its configuration."""
    if pm.has_plugin(_AUDIT_PLUGIN):
        raise ValueError(
            "this plugin manager belongs to another host (its audit sink is registered): "
            "give each host a plugin manager of its own (make_plugin_manager)"
        )


def _plugin_names(pm: PluginManager) -> list[str]:
    return [name for name, plugin in pm.list_name_plugin() if plugin is not None]

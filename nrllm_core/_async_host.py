"""The async host: the same runs, approvals and direct calls as :class:`Host`, driven on an
event loop (calls of a turn in a task group, ``async def`` tools and providers awaited)."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, final

from nrllm_core._direct_flow import InvokeOptions, SubmitOptions
from nrllm_core._drive import NOBODY, Cancellation, Core, Driver, Watchers, adrive, in_thread
from nrllm_core._events import AsyncEventStream, StreamEvent
from nrllm_core._flows import RunOptions
from nrllm_core._host import Host
from nrllm_core._loop import RunCancelled
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import TraceEvent, WirePayload
from nrllm_core._providers import aclosed
from nrllm_core._segment import Drive, Flow, record_step
from nrllm_core._suspension import RefusalReason

if TYPE_CHECKING:
    from anyio import CapacityLimiter

__all__ = ["AsyncHost"]

T = TypeVar("T")
R = TypeVar("R")
# A core as the async host drives it, and the stack that holds its run as driven.
_Core = tuple[Core["Drive | None"], contextlib.ExitStack]


@final
class AsyncHost:
    """A :class:`Host` driven from an event loop (asyncio or trio, through anyio).

    Every decision is the host's own; only the driving differs: the model is awaited
    (``acomplete``/``astream``, or a sync provider in a worker thread), a turn's calls run
    in a task group, sync tools in worker threads (``[run] tool_threads`` at once), and the
    host's store work in worker threads. Cancelling the task of a run cancels the run.
    """

    __slots__ = ("_limiter", "host")

    def __init__(self, host: Host) -> None:
        self.host = host
        self._limiter: CapacityLimiter | None = None

    @classmethod
    def from_config(cls, *args: Any, **kwargs: Any) -> AsyncHost:
        """:meth:`Host.from_config` with the same arguments, wrapped (call it before the
        event loop starts, or in a worker thread: it opens and migrates the store)."""
        return cls(Host.from_config(*args, **kwargs))

    async def run(self, prompt: str, **options: Unpack[RunOptions]) -> RunOutcome:
        """:meth:`Host.run`, awaited."""
        return await self._walk(self.host.flows.run(prompt, **options), NOBODY)

    async def stream(
        self, prompt: str, **options: Unpack[RunOptions]
    ) -> AsyncIterator[StreamEvent]:
        """:meth:`Host.stream`, as an async iterator (use it in ``async for``). Leaving the
        loop early cancels the run."""
        events = AsyncEventStream(options.get("on_event"))
        options["on_event"] = events.observer
        flow = self.host.flows.run(prompt, **options)
        walker: Driver[Drive, RunOutcome] = Driver(flow)
        first = await _next(walker, _same)
        run = events.start(lambda watchers: self._walked(walker, first, watchers))
        # Closed here, in the reader's task, when the reader leaves: closing the stream
        # cancels the run and waits for it to settle.
        async with contextlib.aclosing(run):
            async for event in run:
                yield event

    async def approve(
        self,
        run_id: str,
        *,
        approve: bool = True,
        approver: str,
        turn_digest: str | None,
        on_event: Callable[[TraceEvent], None] | None = None,
        deps: Any = None,
    ) -> RunOutcome:
        """:meth:`Host.approve`, awaited."""
        flow = self.host.flows.approve(
            run_id,
            approve=approve,
            approver=approver,
            turn_digest=turn_digest,
            on_event=on_event,
            deps=deps,
        )
        return await self._walk(flow, NOBODY)

    async def invoke(
        self, tool_name: str, arguments: Mapping[str, Any], **options: Unpack[InvokeOptions]
    ) -> WirePayload:
        """:meth:`Host.invoke`, awaited (``approve`` is called in a worker thread)."""
        return await self._walk(self.host.flows.invoke(tool_name, arguments, **options), NOBODY)

    async def submit(
        self, tool_name: str, arguments: Mapping[str, Any], **options: Unpack[SubmitOptions]
    ) -> RunOutcome:
        """:meth:`Host.submit`, awaited."""
        return await self._walk(self.host.flows.submit(tool_name, arguments, **options), NOBODY)

    def cancel(
        self,
        run_id: str,
        *,
        by: str | None = None,
        reason: RefusalReason = RefusalReason.CANCELLED,
    ) -> bool:
        """:meth:`Host.cancel`: callable from any thread or task (a suspended run is ended
        with one write to the store, made in the caller's thread)."""
        return self.host.cancel(run_id, by=by, reason=reason)

    async def pending(self, run_id: str) -> RunOutcome | None:
        """:meth:`Host.pending`, awaited."""
        return await in_thread(functools.partial(self.host.pending, run_id))

    # -- driving -----------------------------------------------------------------------------

    async def _walk(self, flow: Flow[T], watchers: Watchers) -> T:
        walker: Driver[Drive, T] = Driver(flow)
        # One hop: the flow's store work up to its core, and the core's up to its model.
        cancelled = threading.Event()
        begun = functools.partial(self._begun, walker, cancelled)
        effect, core = await _next(walker, begun, cancelled)
        return await self._walked(walker, effect, watchers, core)

    def _begun(
        self, walker: Driver[Drive, T], cancelled: threading.Event, effect: Drive | None
    ) -> tuple[Drive | None, _Core | None]:
        """In the flow's worker thread: the core ``effect`` asks for, walked to its first model
        request or turn of calls; not started once the task is ``cancelled``."""
        if effect is None or cancelled.is_set():
            return effect, None
        core = self._core(walker, effect, cancelled)
        core[0].stretch()
        return effect, core

    def _core(
        self, walker: Driver[Drive, T], effect: Drive, cancelled: threading.Event | None = None
    ) -> _Core:
        """The core ``effect`` asks for, and the stack that holds the run as driven; in the
        hop where the core returns, the run stops being driven (a cancel then finds it
        settled or suspended), and the flow takes the core's outcome and goes on, to its next
        core or its end."""
        driven = contextlib.ExitStack()

        def then(outcome: Callable[[], Any]) -> Drive | None:
            driven.close()
            try:
                walker.answer(outcome())
            except Exception as exc:
                walker.fail(exc)
            return walker.next()

        record = functools.partial(record_step, effect.recorder)
        return Core(effect.core, record, then, cancelled), driven

    async def _walked(
        self,
        walker: Driver[Drive, T],
        effect: Drive | None,
        watchers: Watchers,
        begun: _Core | None = None,
    ) -> T:
        import anyio

        while effect is not None:
            following: Drive | None = None
            core, driven = begun or self._core(walker, effect)
            try:
                with driven:
                    flows = self.host.flows
                    cancellation = driven.enter_context(flows.cancellable(effect.recorder.run_id))
                    try:
                        following = await self._drive(effect, core, cancellation, watchers)
                    except anyio.get_cancelled_exc_class():
                        # The driver recorded what happened; the run settles cancelled, then
                        # the task's cancellation goes on.
                        await _settle_cancelled(walker)
                        raise
                    except Exception as exc:
                        driven.close()
                        walker.fail(exc)
                        following = await _next(walker, _same)
            finally:
                # Once the run has settled, on this loop: a run that waits for a person keeps
                # its provider.
                await aclosed(self.host.flows.parts.to_close(effect, following))
            effect, begun = following, None
        return walker.result()

    async def _drive(
        self,
        effect: Drive,
        core: Core[Drive | None],
        cancellation: Cancellation,
        watchers: Watchers,
    ) -> Drive | None:
        return await adrive(
            core,
            pm=self.host.pm,
            provider=effect.provider,
            limits=effect.limits,
            limiter=self._threads(effect.limits.tool_threads),
            cancellation=cancellation,
            watchers=watchers,
        )

    def _threads(self, count: int) -> CapacityLimiter:
        """The worker threads sync tools share, as many as ``[run] tool_threads`` says now."""
        import anyio

        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(count)
        elif self._limiter.total_tokens != count:
            self._limiter.total_tokens = count
        return self._limiter


async def _next(
    walker: Driver[Drive, Any],
    then: Callable[[Drive | None], R],
    cancelled: threading.Event | None = None,
) -> R:
    """The flow's store work up to its next core, and ``then`` with that core, in one worker
    thread. A cancellation while it runs lets it finish (the thread is not abandoned; it sees
    ``cancelled`` set), then settles the run."""
    import anyio
    import anyio.lowlevel

    try:
        effect = await in_thread(lambda: then(walker.next()), cancelled=cancelled)
        # A cancellation that landed as that work ended lands here: the core it asked for
        # never starts.
        await anyio.lowlevel.checkpoint_if_cancelled()
    except anyio.get_cancelled_exc_class():
        await _settle_cancelled(walker)
        raise
    return effect


def _same(effect: Drive | None) -> Drive | None:
    return effect


async def _settle_cancelled(walker: Driver[Drive, Any]) -> None:
    """Settle the run of a cancelled task (shielded), before the cancellation goes on."""
    import anyio

    with anyio.CancelScope(shield=True):
        await in_thread(functools.partial(_drain, walker))


def _drain(walker: Driver[Drive, Any]) -> None:
    """Take a cancelled flow to its end, refusing the core it waits for (even one already
    driven: the run was cancelled before it settled) and every one after; it settles the run
    ``cancelled``. A flow that settled already is left as it settled."""
    with contextlib.suppress(RunCancelled):
        while not walker.done:
            walker.fail(RunCancelled())
            walker.next()

"""The async host: the same runs, approvals and direct calls as :class:`Host`, driven on an
event loop (calls of a turn in a task group, ``async def`` tools and providers awaited)."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, final

from nrllm_core._drive import NOBODY, Cancellation, Driver, Watchers, adrive
from nrllm_core._events import AsyncEventStream, StreamEvent
from nrllm_core._host import Drive, Flow, Host, InvokeOptions, RunOptions
from nrllm_core._loop import Record, RunCancelled
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import TraceEvent, WirePayload
from nrllm_core._recorder import RunRecorder

if TYPE_CHECKING:
    from anyio import CapacityLimiter

__all__ = ["AsyncHost"]

T = TypeVar("T")


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
        return await self._walk(self.host._run_flow(prompt, **options), NOBODY)

    async def stream(
        self, prompt: str, **options: Unpack[RunOptions]
    ) -> AsyncIterator[StreamEvent]:
        """:meth:`Host.stream`, as an async iterator (use it in ``async for``). Leaving the
        loop early cancels the run."""
        events = AsyncEventStream(options.get("on_event"))
        options["on_event"] = events.observer
        flow = self.host._run_flow(prompt, **options)
        walker: Driver[Drive, RunOutcome] = Driver(flow)
        first = await _next(walker)
        async for event in events.start(lambda watchers: self._walked(walker, first, watchers)):
            yield event

    async def approve(
        self,
        run_id: str,
        *,
        approve: bool = True,
        approver: str,
        turn_digest: str | None,
        on_event: Callable[[TraceEvent], None] | None = None,
    ) -> RunOutcome:
        """:meth:`Host.approve`, awaited."""
        flow = self.host._approve_flow(run_id, approve, approver, turn_digest, on_event)
        return await self._walk(flow, NOBODY)

    async def invoke(
        self, tool_name: str, arguments: Mapping[str, Any], **options: Unpack[InvokeOptions]
    ) -> WirePayload:
        """:meth:`Host.invoke`, awaited (``approve`` is called in a worker thread)."""
        return await self._walk(self.host._invoke_flow(tool_name, arguments, **options), NOBODY)

    def cancel(self, run_id: str) -> bool:
        """:meth:`Host.cancel`: callable from any thread or task."""
        return self.host.cancel(run_id)

    async def pending(self, run_id: str) -> RunOutcome | None:
        """:meth:`Host.pending`, awaited."""
        return await _in_thread(self.host.pending, run_id)

    # -- driving -----------------------------------------------------------------------------

    async def _walk(self, flow: Flow[T], watchers: Watchers) -> T:
        walker: Driver[Drive, T] = Driver(flow)
        return await self._walked(walker, await _next(walker), watchers)

    async def _walked(
        self, walker: Driver[Drive, T], effect: Drive | None, watchers: Watchers
    ) -> T:
        import anyio

        while effect is not None:
            with self.host._cancellable(effect.recorder.run_id) as cancellation:
                try:
                    walker.answer(await self._drive(effect, cancellation, watchers))
                except anyio.get_cancelled_exc_class():
                    # The run settles with what the driver recorded, then the task's
                    # cancellation goes on.
                    if cancellation.outcome is not None:
                        walker.answer(cancellation.outcome)
                    with anyio.CancelScope(shield=True):
                        await _in_thread(_drain, walker)
                    raise
                except Exception as exc:
                    walker.fail(exc)
            effect = await _next(walker)
        return walker.result()

    async def _drive(self, effect: Drive, cancellation: Cancellation, watchers: Watchers) -> Any:
        return await adrive(
            effect.core,
            pm=self.host.pm,
            provider=effect.provider,
            record=functools.partial(_record, effect.recorder),
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


async def _record(recorder: RunRecorder, effect: Record) -> bool:
    delivered: bool = await _in_thread(recorder.record, effect.step)
    return delivered


async def _next(walker: Driver[Drive, T]) -> Drive | None:
    """The flow's store work up to its next core, in a worker thread. A cancellation while it
    runs lets it finish (the thread is not abandoned), then settles the run."""
    import anyio

    try:
        return await _in_thread(walker.next)
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await _in_thread(_drain, walker)
        raise


def _drain(walker: Driver[Drive, Any]) -> None:
    """Take a cancelled flow to its end: it settles the run (``cancelled``); it drives no
    core: one it asked for and never got is refused, and so is every one after."""
    if walker.awaiting:
        walker.fail(RunCancelled())
    with contextlib.suppress(RunCancelled):
        while walker.next() is not None:
            walker.fail(RunCancelled())


async def _in_thread(function: Callable[..., T], *args: Any) -> T:
    import anyio.to_thread

    return await anyio.to_thread.run_sync(function, *args)

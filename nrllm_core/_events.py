"""What ``Host.stream`` and ``AsyncHost.stream`` yield while a run goes on."""

from __future__ import annotations

import contextlib
import contextvars
import math
import queue
import sys
import threading
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine, Iterator
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from nrllm_core._drive import Watchers
from nrllm_core._invoke import Admitted
from nrllm_core._messages import StreamRestarted, TextDelta, ThinkingDelta
from nrllm_core._payloads import TraceEvent, WirePayload
from nrllm_core._status import RunStatus
from nrllm_core.log import logger

if TYPE_CHECKING:
    from nrllm_core._outcome import RunOutcome

__all__ = [
    "AsyncEventStream",
    "EventStream",
    "Finished",
    "StreamEvent",
    "Suspended",
    "ToolAnswered",
    "ToolCallStarted",
    "ToolProgress",
]

# What a progress event keeps of a tool's message.
PROGRESS_MESSAGE_MAX_CHARS: Final = 200


@final
@attrs.frozen(kw_only=True)
class ToolCallStarted:
    """A call of the model's turn starts running."""

    call_id: str
    name: str


@final
@attrs.frozen(kw_only=True)
class ToolProgress:
    """A running call says how far it got (``ToolContext.report_progress``; an MCP server's
    ``notifications/progress``): ``progress`` of ``total`` (``None``: not known), and its
    ``message`` with no control or invisible character, at most 200 characters (``None``
    when it gave none)."""

    call_id: str
    name: str
    progress: float
    total: float | None = None
    message: str | None = None


@final
@attrs.frozen(kw_only=True)
class ToolAnswered:
    """A call's answer goes back to the model: its wire payload, never its artifacts."""

    payload: WirePayload


@final
@attrs.frozen(kw_only=True)
class Suspended:
    """The run waits for a person: the last event of its stream."""

    outcome: RunOutcome


@final
@attrs.frozen(kw_only=True)
class Finished:
    """The run settled (completed, failed or cancelled): the last event of its stream."""

    outcome: RunOutcome


StreamEvent = (
    TextDelta
    | ThinkingDelta
    | StreamRestarted
    | ToolCallStarted
    | ToolProgress
    | ToolAnswered
    | Suspended
    | Finished
)


def _watchers(
    put: Callable[[StreamEvent], None],
    put_from_thread: Callable[[StreamEvent], None] | None = None,
) -> Watchers:
    """What a streamed run tells its reader; ``put_from_thread`` for what a tool reports from
    a worker thread, when ``put`` is for the reader's loop only."""

    def started(admitted: Admitted) -> None:
        put(ToolCallStarted(call_id=admitted.context.call_id, name=admitted.registered.name))

    def progressed(
        admitted: Admitted, progress: float, total: float | None, message: str | None
    ) -> None:
        event = ToolProgress(
            call_id=admitted.context.call_id,
            name=admitted.registered.name,
            progress=float(progress),
            total=None if total is None else float(total),
            message=None if message is None else _shown(message),
        )
        (put_from_thread or put)(event)

    return Watchers(
        on_delta=put,
        on_call=started,
        on_wire=lambda wire: put(ToolAnswered(payload=wire)),
        on_progress=progressed,
    )


def _shown(message: str) -> str:
    """A tool's progress message as a reader sees it: no control or invisible character
    (they could move a terminal's cursor or hide text), line breaks as spaces, bounded."""
    import unicodedata

    kept = "".join(
        " " if char.isspace() else char
        for char in message[: 4 * PROGRESS_MESSAGE_MAX_CHARS]
        if char.isspace() or unicodedata.category(char) not in _HIDDEN
    )
    return " ".join(kept.split())[:PROGRESS_MESSAGE_MAX_CHARS]


_HIDDEN: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def _last(outcome: RunOutcome) -> StreamEvent:
    if outcome.status is RunStatus.AWAITING_APPROVAL:
        return Suspended(outcome=outcome)
    return Finished(outcome=outcome)


@final
@attrs.frozen
class _Raised:
    error: BaseException


@final
@attrs.frozen
class _Step:
    event: TraceEvent


def _observed(on_event: Callable[[TraceEvent], None], event: TraceEvent) -> None:
    try:
        on_event(event)
    except Exception:
        logger().error("nrllm.trace.observer_failed", run_id=event.run_id, exc_info=True)


@final
class EventStream:
    """One run's events for one reader, in the order they happened: the deltas and calls it
    yields, and the steps it hands ``on_event`` between them, on the reader's thread (a step
    never overtakes the text it records)."""

    __slots__ = ("_events", "_on_event")

    def __init__(self, on_event: Callable[[TraceEvent], None] | None) -> None:
        self._events: queue.SimpleQueue[StreamEvent | _Step | _Raised] = queue.SimpleQueue()
        self._on_event = on_event

    @property
    def observer(self) -> Callable[[TraceEvent], None] | None:
        """What the run's recorder calls for each step (``None``: nobody watches steps)."""
        if self._on_event is None:
            return None
        return lambda event: self._events.put(_Step(event))

    def start(self, run: Callable[[Watchers], RunOutcome]) -> Iterator[StreamEvent]:
        """Start ``run`` on a thread and yield its events as they come, its last event last.

        A reader that stops early does not stop the run: it goes on to its end on its thread.
        """

        def work() -> None:
            try:
                self._events.put(_last(run(_watchers(self._events.put))))
            except BaseException as exc:
                self._events.put(_Raised(exc))

        threading.Thread(target=work, name="nrllm-stream", daemon=True).start()
        return self._read()

    def _read(self) -> Iterator[StreamEvent]:
        while True:
            event = self._events.get()
            if isinstance(event, _Raised):
                raise event.error
            if isinstance(event, _Step):
                if self._on_event is not None:
                    _observed(self._on_event, event.event)
                continue
            yield event
            if isinstance(event, Suspended | Finished):
                return


@final
class AsyncEventStream:
    """:class:`EventStream` for an event loop: the run is a task of its own beside the reader,
    and leaving the ``async for`` early cancels it (it settles ``cancelled``)."""

    __slots__ = ("_loop_thread", "_on_event", "_receive", "_send", "_task", "_token")

    def __init__(self, on_event: Callable[[TraceEvent], None] | None) -> None:
        import anyio

        self._send, self._receive = anyio.create_memory_object_stream[Any](max_buffer_size=math.inf)
        self._on_event = on_event
        self._task: object = None
        self._loop_thread = threading.get_ident()
        self._token: Any = None

    @property
    def observer(self) -> Callable[[TraceEvent], None] | None:
        """Called from the worker threads that record the run's steps."""
        if self._on_event is None:
            return None

        def step(event: TraceEvent) -> None:
            import anyio.from_thread

            anyio.from_thread.run_sync(self._put, _Step(event))

        return step

    def _put(self, event: StreamEvent | _Step | _Raised) -> None:
        import anyio

        # Once the reader left, the run is being cancelled: what it still records (its last
        # steps) or streams has nobody to reach.
        with contextlib.suppress(anyio.BrokenResourceError):
            self._send.send_nowait(event)

    def _put_from_anywhere(self, event: StreamEvent) -> None:
        """:meth:`_put` from any thread: the loop's own (a coroutine tool), a worker thread (a
        sync tool's) or one of a plugin's (an MCP session's loop)."""
        import anyio.from_thread

        if self._loop_thread == threading.get_ident() or self._token is None:
            self._put(event)
            return
        with contextlib.suppress(RuntimeError):
            # The loop is gone: the reader left, nobody is there to see it.
            anyio.from_thread.run_sync(self._put, event, token=self._token)

    async def start(
        self, run: Callable[[Watchers], Awaitable[RunOutcome]]
    ) -> AsyncGenerator[StreamEvent, None]:
        """Start ``run`` and yield its events as they come, its last event last.

        The run is no child of the reader's task: a generator that yields inside a task group
        leaves the group open in the reader's task while the reader does other things (the
        group's cancellation would reach them), and a reader that drops the stream without
        closing it has it closed from another task (the garbage collector's), where no group
        can be left. Closed however and wherever, the stream cancels the run and waits for it
        to settle.
        """
        import anyio
        import anyio.lowlevel

        scope = anyio.CancelScope()
        settled = anyio.Event()
        self._loop_thread = threading.get_ident()
        self._token = anyio.lowlevel.current_token()

        async def work() -> None:
            try:
                with scope:
                    try:
                        watchers = _watchers(self._put, self._put_from_anywhere)
                        self._put(_last(await run(watchers)))
                    except Exception as exc:
                        self._put(_Raised(exc))
            finally:
                self._send.close()
                settled.set()

        self._task = _spawn(work)
        try:
            async with self._receive:
                async for event in self._receive:
                    if isinstance(event, _Raised):
                        raise event.error
                    if isinstance(event, _Step):
                        if self._on_event is not None:
                            _observed(self._on_event, event.event)
                        continue
                    yield event
        finally:
            scope.cancel()
            with anyio.CancelScope(shield=True):
                await settled.wait()


def _spawn(work: Callable[[], Coroutine[Any, Any, None]]) -> object:
    """``work()`` as a task of its own on the running event loop, no child of this task's
    (anyio has none such): trio's system task, else asyncio's task, which the caller keeps
    (asyncio holds its tasks weakly)."""
    trio = sys.modules.get("trio")
    if trio is not None and trio.lowlevel.in_trio_run():
        trio.lowlevel.spawn_system_task(work, context=contextvars.copy_context())
        return None
    import asyncio

    return asyncio.get_running_loop().create_task(work())

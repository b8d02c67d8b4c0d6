"""What ``Host.stream`` and ``AsyncHost.stream`` yield while a run goes on."""

from __future__ import annotations

import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, final

import attrs

from nrllm_core._drive import Watchers
from nrllm_core._invoke import Admitted
from nrllm_core._messages import StreamRestarted, TextDelta, ThinkingDelta
from nrllm_core._payloads import WirePayload

if TYPE_CHECKING:
    from nrllm_core._host import RunOutcome

__all__ = [
    "Finished",
    "StreamEvent",
    "Suspended",
    "ToolAnswered",
    "ToolCallStarted",
    "astream_events",
    "stream_events",
]


@final
@attrs.frozen(kw_only=True)
class ToolCallStarted:
    """A call of the model's turn starts running."""

    call_id: str
    name: str


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
    | ToolAnswered
    | Suspended
    | Finished
)


def _watchers(put: Callable[[StreamEvent], None]) -> Watchers:
    def started(admitted: Admitted) -> None:
        put(ToolCallStarted(call_id=admitted.context.call_id, name=admitted.registered.name))

    return Watchers(
        on_delta=put, on_call=started, on_wire=lambda wire: put(ToolAnswered(payload=wire))
    )


def _last(outcome: RunOutcome) -> StreamEvent:
    if outcome.status == "awaiting_approval":
        return Suspended(outcome=outcome)
    return Finished(outcome=outcome)


@final
@attrs.frozen
class _Raised:
    error: BaseException


def stream_events(run: Callable[[Watchers], RunOutcome]) -> Iterator[StreamEvent]:
    """Start ``run`` on a thread and yield its events as they come, its last event last.

    A reader that stops early does not stop the run: it goes on to its end on its thread.
    """
    events: queue.SimpleQueue[StreamEvent | _Raised] = queue.SimpleQueue()

    def work() -> None:
        try:
            events.put(_last(run(_watchers(events.put))))
        except BaseException as exc:
            events.put(_Raised(exc))

    threading.Thread(target=work, name="nrllm-stream", daemon=True).start()
    return _read(events)


def _read(events: queue.SimpleQueue[StreamEvent | _Raised]) -> Iterator[StreamEvent]:
    while True:
        event = events.get()
        if isinstance(event, _Raised):
            raise event.error
        yield event
        if isinstance(event, Suspended | Finished):
            return


async def astream_events(
    run: Callable[[Watchers], Awaitable[RunOutcome]],
) -> AsyncIterator[StreamEvent]:
    """Run ``run`` in a task beside the reader and yield its events as they come.

    The run belongs to the reader: leaving the ``async for`` early cancels it (it settles
    ``cancelled``).
    """
    import anyio

    send, receive = anyio.create_memory_object_stream[Any](max_buffer_size=1_000_000)

    async def work() -> None:
        async with send:
            await send.send(_last(await run(_watchers(send.send_nowait))))

    async with anyio.create_task_group() as group, receive:
        group.start_soon(work)
        try:
            async for event in receive:
                yield event
        finally:
            group.cancel_scope.cancel()

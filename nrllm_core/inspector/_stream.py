"""The live run stream: a blocking host call in a worker thread, its events as NDJSON lines."""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any, Final

from nrllm_core import _json
from nrllm_core._payloads import TraceEvent
from nrllm_core._serde import trace_dict
from nrllm_core.log import logger

if TYPE_CHECKING:
    from starlette.responses import StreamingResponse

__all__ = ["Emit", "ndjson_response", "step_event"]

Emit = Callable[[dict[str, Any]], None]
# What the stream says when the job raised: the exception's text may hold anything.
_UNEXPECTED: Final = "The run stopped on an unexpected error; the server log has the details."
_TERMINAL: Final = frozenset({"done", "awaiting_approval", "error"})


def step_event(event: TraceEvent) -> dict[str, Any]:
    return {"event": "step", "step": trace_dict(event)}


def ndjson_response(
    job: Callable[[Emit], None], *, what: str, on_gone: Callable[[], None] | None = None
) -> StreamingResponse:
    """Stream what ``job`` emits, one canonical JSON object a line.

    ``job`` runs in a worker thread and must emit exactly one terminal event; if it raises
    instead, the stream ends with a generic ``error`` event and the log keeps the exception.
    ``emit`` may be called from any thread, one call at a time. ``on_gone`` is called when
    the reader stops reading (a closed page, or the stream's end).
    """
    from starlette.responses import StreamingResponse

    return StreamingResponse(
        _lines(job, what, on_gone),
        media_type="application/x-ndjson",
        headers={"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"},
    )


async def _lines(
    job: Callable[[Emit], None], what: str, on_gone: Callable[[], None] | None
) -> AsyncIterator[bytes]:
    import anyio
    import anyio.from_thread
    import anyio.lowlevel
    import anyio.to_thread

    send, receive = anyio.create_memory_object_stream[bytes](max_buffer_size=math.inf)
    # A streamed run's steps are emitted from its own thread, which anyio did not start.
    loop = anyio.lowlevel.current_token()
    finished = False

    def emit(data: dict[str, Any]) -> None:
        nonlocal finished
        if finished:
            return
        finished = data["event"] in _TERMINAL
        line = _json.dumps(data) + b"\n"
        # The reader may be gone (a closed tab): the run goes on and is still persisted, so
        # a dropped line must never raise into the host's recorder.
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
            anyio.from_thread.run_sync(send.send_nowait, line, token=loop)

    def work() -> None:
        try:
            job(emit)
        except Exception:
            logger().error("nrllm.inspector.stream_failed", what=what, exc_info=True)
            emit({"event": "error", "error": _UNEXPECTED})
        finally:
            if not finished:
                emit({"event": "error", "error": _UNEXPECTED})
            anyio.from_thread.run_sync(send.close)

    async with anyio.create_task_group() as group:
        group.start_soon(anyio.to_thread.run_sync, work)
        try:
            async with receive:
                async for line in receive:
                    yield line
        finally:
            # Before the group waits for the job: a job waiting on the page (a question to a
            # person) is let go when nobody reads any more.
            if on_gone is not None:
                on_gone()

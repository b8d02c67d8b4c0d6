"""A streamed run's model text as NDJSON events, between its step events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from nrllm_core._events import Finished, StreamEvent, Suspended
from nrllm_core._messages import StreamRestarted, TextDelta, ThinkingDelta
from nrllm_core.inspector._stream import Emit

if TYPE_CHECKING:
    from nrllm_core._outcome import RunOutcome

__all__ = ["live_text"]


def live_text(events: Iterator[StreamEvent], emit: Emit) -> RunOutcome:
    """Emit the model's text and thinking as they stream (``Host.stream`` hands the steps to
    ``on_event`` between them, in the order they happened); the run's outcome at the end."""
    for event in events:
        if isinstance(event, Suspended | Finished):
            return event.outcome
        if isinstance(event, StreamRestarted):
            # The model is asked again as a whole: what it said so far is void.
            emit({"event": "restart"})
        elif isinstance(event, TextDelta):
            emit({"event": "text", "text": event.text})
        elif isinstance(event, ThinkingDelta):
            emit({"event": "thinking", "text": event.text})
    raise RuntimeError("the run's stream ended without its outcome")

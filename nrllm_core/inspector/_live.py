"""A streamed run's model text and its calls' progress as NDJSON events, between its step
events."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from nrllm_core._events import Finished, StreamEvent, Suspended, ToolProgress
from nrllm_core._messages import StreamRestarted, TextDelta, ThinkingDelta
from nrllm_core.inspector._stream import Emit

if TYPE_CHECKING:
    from nrllm_core._outcome import RunOutcome

__all__ = ["live_text"]


def live_text(events: Iterator[StreamEvent], emit: Emit) -> RunOutcome:
    """Emit the model's text and thinking as they stream, and each call's progress as it
    comes (``Host.stream`` hands the steps to ``on_event`` between them, in the order they
    happened); the run's outcome at the end."""
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
        elif isinstance(event, ToolProgress):
            shown = _progress(event)
            if shown is not None:
                emit(shown)
    raise RuntimeError("the run's stream ended without its outcome")


def _progress(event: ToolProgress) -> dict[str, Any] | None:
    """A call's progress as the page shows it; ``None`` for a progress that is no number (a
    tool can report NaN or infinity, which JSON cannot carry)."""
    if not math.isfinite(event.progress):
        return None
    total = event.total
    return {
        "event": "progress",
        "call_id": event.call_id,
        "tool": event.name,
        "progress": event.progress,
        "total": total if total is not None and math.isfinite(total) else None,
        # Already without control characters and bounded; still text, shown as text.
        "message": event.message,
    }

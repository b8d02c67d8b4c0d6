"""A streamed run's steps and the model's text as NDJSON events, in the order they happened.

``Host.stream`` hands the two over on different threads: each step reaches ``on_event`` on the
run's own thread the moment it is recorded, while the model's deltas wait in the stream's
queue for the reader. Emitted as they come, a model step could overtake the last pieces of its
own text. So a model step is held until the text read so far is the text it recorded (or, at
the latest, until a call it asked for starts, or the run ends), and the steps after it wait
behind it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, final

from nrllm_core._events import Finished, StreamEvent, Suspended, ToolCallStarted
from nrllm_core._messages import StreamRestarted, TextDelta, ThinkingDelta
from nrllm_core._payloads import StepKind, TraceEvent
from nrllm_core.inspector._stream import Emit, step_event

if TYPE_CHECKING:
    from nrllm_core._host import RunOutcome

__all__ = ["LiveRun"]


@final
class LiveRun:
    """Emits one streamed run: pass :meth:`step` as ``on_event``, then :meth:`read` its stream."""

    __slots__ = ("_emit", "_held", "_lock", "_text", "_thinking")

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._lock = threading.Lock()
        self._held: deque[TraceEvent] = deque()
        self._text: list[str] = []
        self._thinking: list[str] = []

    def step(self, event: TraceEvent) -> None:
        with self._lock:
            self._held.append(event)
            self._release()

    def read(self, events: Iterator[StreamEvent]) -> RunOutcome:
        """Emit the model's text as it streams; the run's outcome once its stream ends."""
        for event in events:
            with self._lock:
                if isinstance(event, Suspended | Finished):
                    self._release(everything=True)
                    return event.outcome
                if isinstance(event, ToolCallStarted):
                    self._release(call_id=event.call_id)
                elif isinstance(event, TextDelta | ThinkingDelta | StreamRestarted):
                    self._delta(event)
                    self._release()
        raise RuntimeError("the run's stream ended without its outcome")

    def _delta(self, delta: TextDelta | ThinkingDelta | StreamRestarted) -> None:
        if isinstance(delta, StreamRestarted):
            # The model is asked again as a whole: what it said so far is void.
            self._text.clear()
            self._thinking.clear()
            self._emit({"event": "restart"})
        elif isinstance(delta, TextDelta):
            self._text.append(delta.text)
            self._emit({"event": "text", "text": delta.text})
        else:
            self._thinking.append(delta.text)
            self._emit({"event": "thinking", "text": delta.text})

    def _release(self, *, everything: bool = False, call_id: str | None = None) -> None:
        while self._held:
            event = self._held[0]
            if event.step.kind is StepKind.LLM:
                if not (everything or self._spoken(event) or _asked_for(event, call_id)):
                    return
                self._text.clear()
                self._thinking.clear()
            self._emit(step_event(self._held.popleft()))

    def _spoken(self, event: TraceEvent) -> bool:
        """Whether every piece of the text and thinking this model step recorded was read."""
        fields = event.step.fields
        text, thinking = "".join(self._text), "".join(self._thinking)
        return text == (fields.get("content") or "") and thinking == (fields.get("thinking") or "")


def _asked_for(event: TraceEvent, call_id: str | None) -> bool:
    calls: list[dict[str, Any]] = event.step.fields.get("requested_tool_calls") or []
    return call_id is not None and any(call["id"] == call_id for call in calls)

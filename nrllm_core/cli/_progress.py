"""The progress line of ``nrllm run``: how far a long call got, on a terminal's standard error.

A call that answers within :data:`PROGRESS_AFTER_SECONDS` shows nothing (a line that flashes
past tells nobody anything); one that runs longer shows its tool's name, its progress and its
message, redrawn as progress comes, cleared when the call answers. The message is a tool's (an
MCP server's) text: it is shown through :func:`~nrllm_core.cli._terminal.status_line`.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Final, final

from nrllm_core._events import (
    Finished,
    StreamEvent,
    Suspended,
    ToolAnswered,
    ToolCallStarted,
    ToolProgress,
)
from nrllm_core.cli._terminal import status_line

if TYPE_CHECKING:
    from nrllm_core._ask_values import PersonAnswer, Question, QuestionHandler

__all__ = ["PROGRESS_AFTER_SECONDS", "ProgressLine"]

# How long a call runs before its progress is shown.
PROGRESS_AFTER_SECONDS: Final = 1.0


@final
class ProgressLine:
    """Watches a streamed run's events and keeps the progress line in step with them.

    Events come on the reader's thread, a tool's question on the call's own: the lock keeps
    the line from being redrawn over a question being asked (it stays cleared until answered).
    """

    __slots__ = ("_asking", "_clock", "_lock", "_shown", "_started")

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._started: dict[str, float] = {}
        # The call whose progress the line shows, if it shows any.
        self._shown: str | None = None
        self._asking = 0

    def see(self, event: StreamEvent) -> None:
        """Keep the line in step with ``event``."""
        with self._lock:
            if isinstance(event, ToolCallStarted):
                self._started[event.call_id] = self._clock()
            elif isinstance(event, ToolProgress):
                self._progressed(event)
            elif isinstance(event, ToolAnswered):
                self._started.pop(event.payload.call_id, None)
                if self._shown == event.payload.call_id:
                    self._clear()
            elif isinstance(event, Suspended | Finished):
                self._started.clear()
                self._clear()

    def asking(self, handler: QuestionHandler) -> QuestionHandler:
        """``handler`` with the line cleared and held while it asks the person."""

        def ask(question: Question) -> PersonAnswer:
            with self._held():
                return handler(question)

        return ask

    @contextlib.contextmanager
    def _held(self) -> Iterator[None]:
        with self._lock:
            self._asking += 1
            self._clear()
        try:
            yield
        finally:
            with self._lock:
                self._asking -= 1

    def _progressed(self, event: ToolProgress) -> None:
        started = self._started.get(event.call_id)
        if started is None or self._asking:
            return
        if self._clock() - started < PROGRESS_AFTER_SECONDS:
            return
        self._shown = event.call_id
        status_line(_text(event))

    def _clear(self) -> None:
        if self._shown is not None:
            self._shown = None
            status_line(None)


def _text(event: ToolProgress) -> str:
    done = f"{event.progress:g}" if event.total is None else f"{event.progress:g}/{event.total:g}"
    return f"{event.name}: {done}" + ("" if not event.message else f" {event.message}")

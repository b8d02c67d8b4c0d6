"""An incremental server-sent-events parser: bytes in, events out, no I/O."""

from __future__ import annotations

import re
from typing import Final, final

import attrs

__all__ = ["ServerSentEvent", "SseParser"]

_LINE_END: Final = re.compile(rb"\r\n|\r|\n")


@final
@attrs.frozen(kw_only=True)
class ServerSentEvent:
    """One dispatched event: its type (``message`` when the stream names none) and data."""

    event: str
    data: str


@final
class SseParser:
    """The event stream format of the HTML standard (9.2.6): ``event`` and ``data`` fields,
    data over several lines joined with ``\\n``, comments, and lines ended by CRLF, LF or CR.

    ``id`` and ``retry`` are read and dropped: a model API's stream is answered once and never
    reconnected to, and a broken one is asked for again as a whole. An event the stream does
    not finish with a blank line is never dispatched.
    """

    __slots__ = ("_buffer", "_data", "_event", "_first", "_scanned")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0
        self._data: list[str] = []
        self._event = ""
        self._first = True

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """The events that ``chunk`` completes, in order."""
        buffer = self._buffer
        buffer += chunk
        events: list[ServerSentEvent] = []
        start = 0
        # Resuming where the last scan stopped keeps a long line in small chunks linear.
        position = self._scanned
        while (match := _LINE_END.search(buffer, position)) is not None:
            if match.end() == len(buffer) and match.group() == b"\r":
                break  # a CR at the edge may be the first half of a CRLF
            event = self._line(bytes(buffer[start : match.start()]))
            if event is not None:
                events.append(event)
            start = position = match.end()
        del buffer[:start]
        self._scanned = max(len(buffer) - 1, 0)
        return events

    def close(self) -> list[ServerSentEvent]:
        """The event that a CR at the very end of the stream completes, if any."""
        if not self._buffer.endswith(b"\r"):
            return []
        event = self._line(bytes(self._buffer[:-1]))
        self._buffer.clear()
        return [] if event is None else [event]

    def _line(self, raw: bytes) -> ServerSentEvent | None:
        line = raw.decode("utf-8", "replace")
        if self._first:
            self._first = False
            line = line.removeprefix("\ufeff")
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent(event=event or "message", data="\n".join(data))

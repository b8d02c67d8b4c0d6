"""The W3C trace context a suspension keeps next to its sealed state: checked, never trusted."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = ["TRACESTATE_MAX_CHARS", "checked_trace_context"]

# https://www.w3.org/TR/trace-context/: version 00, a non-zero trace id and parent id.
_TRACEPARENT: Final = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")
TRACESTATE_MAX_CHARS: Final = 512
_TRACESTATE: Final = re.compile(r"[\x20-\x7e]*")


def checked_trace_context(value: object) -> dict[str, str] | None:
    """``value`` as ``{"traceparent", "tracestate"?}`` when it is exactly that and well formed;
    ``None`` for anything else (a plugin's or a database's answer is not trusted)."""
    if not isinstance(value, Mapping) or not set(value) <= {"traceparent", "tracestate"}:
        return None
    parent, state = value.get("traceparent"), value.get("tracestate")
    if not isinstance(parent, str) or not _TRACEPARENT.fullmatch(parent):
        return None
    if state is None or state == "":
        return {"traceparent": parent}
    if (
        not isinstance(state, str)
        or len(state) > TRACESTATE_MAX_CHARS
        or not _TRACESTATE.fullmatch(state)
    ):
        return None
    return {"traceparent": parent, "tracestate": state}

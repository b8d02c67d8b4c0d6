"""Bounding both channels of a tool result: valid UTF-8, byte budgets, fail closed."""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterable
from typing import Any, Final

from nrllm_core._json import EncodeError, dumps_bounded_depth
from nrllm_core._values import ArtifactType, ToolArtifact

__all__ = [
    "ARTIFACTS_MAX_BYTES",
    "ARTIFACTS_MAX_DEPTH",
    "CONTENT_MAX_BYTES",
    "bound_artifacts",
    "bound_content",
    "coerce_text",
]

CONTENT_MAX_BYTES: Final = 50_000
ARTIFACTS_MAX_BYTES: Final = 50_000
ARTIFACTS_MAX_DEPTH: Final = 64

_TRUNCATION_MARKER: Final = f"\n…[tool result truncated at {CONTENT_MAX_BYTES} bytes]"
_HEAD_BUDGET: Final = CONTENT_MAX_BYTES - len(_TRUNCATION_MARKER.encode())
_OMITTED_LABEL: Final = "Artifacts omitted"
# How many nodes the cheap size pre-check looks at before handing over to the encoder.
_PRECHECK_NODES: Final = 32
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def coerce_text(text: str) -> str:
    """``text`` as valid UTF-8: each lone surrogate becomes U+FFFD."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def bound_content(text: str) -> str:
    """The wire text: valid UTF-8, at most ``CONTENT_MAX_BYTES`` bytes, cut on a code point."""
    # A character is at least one byte, so a longer string is over budget whatever it holds;
    # only its head is ever looked at, which keeps the cost independent of the input size.
    if len(text) <= CONTENT_MAX_BYTES:
        # Python knows without a scan whether a string is ASCII: valid UTF-8, a byte a character.
        if text.isascii():
            return text
        try:
            encoded = text.encode()
        except UnicodeEncodeError:
            text = _SURROGATE.sub("\ufffd", text)
            encoded = text.encode()
        if len(encoded) <= CONTENT_MAX_BYTES:
            return text
    head = coerce_text(text[:CONTENT_MAX_BYTES]).encode()
    cut = _HEAD_BUDGET
    while cut > 0 and (head[cut] & 0xC0) == 0x80:
        cut -= 1
    return head[:cut].decode() + _TRUNCATION_MARKER


def bound_artifacts(artifacts: Iterable[ToolArtifact]) -> tuple[ToolArtifact, ...]:
    """The artifacts, coerced and within budget, or exactly one TEXT marker saying why not.

    Never a partial list: any failure replaces the whole list.
    """
    items = tuple(artifacts)
    if not items:
        return ()
    payload = _payload(items)
    if payload is None:
        return _omitted("could not be encoded")
    if _surely_over_budget(payload):
        return _omitted(f"exceeded {ARTIFACTS_MAX_BYTES} bytes")
    try:
        encoded = dumps_bounded_depth(payload, ARTIFACTS_MAX_DEPTH)
    except EncodeError:
        # The common reason is a lone surrogate; coercing strings is only paid for then.
        try:
            payload = _coerce(payload, 0)
            encoded = dumps_bounded_depth(payload, ARTIFACTS_MAX_DEPTH)
        except (EncodeError, _TooDeep):
            return _omitted("could not be encoded")
        items = tuple(
            ToolArtifact(type=ArtifactType(p["type"]), label=p["label"], data=p["data"])
            for p in payload
        )
    if len(encoded) > ARTIFACTS_MAX_BYTES:
        return _omitted(f"exceeded {ARTIFACTS_MAX_BYTES} bytes")
    return items


def _payload(items: tuple[ToolArtifact, ...]) -> list[dict[str, Any]] | None:
    payload = []
    for item in items:
        if (
            type(item) is not ToolArtifact
            or type(item.type) is not ArtifactType
            or not isinstance(item.label, str)
        ):
            return None
        payload.append({"type": item.type.value, "label": item.label, "data": item.data})
    return payload


def _omitted(reason: str) -> tuple[ToolArtifact, ...]:
    return (ToolArtifact.text(reason, label=_OMITTED_LABEL),)


def _surely_over_budget(payload: list[dict[str, Any]]) -> bool:
    """A lower bound on the encoded size, from a few hundred nodes at most.

    It catches a million-row table or a huge string before anything is encoded; whatever it
    cannot prove too large is measured exactly by the encoder.
    """
    estimate = 0
    seen = 0
    queue: deque[Any] = deque([payload])
    while queue and seen < _PRECHECK_NODES:
        node = queue.popleft()
        seen += 1
        if isinstance(node, str):
            estimate += len(node) + 2
        elif isinstance(node, dict):
            # Braces, commas, and per key at least `"":`; values count when visited.
            estimate += 4 * len(node) + 1
            queue.extend(itertools.islice(node.values(), _PRECHECK_NODES))
        elif isinstance(node, list | tuple):
            # Brackets and commas only: counting a byte per child too would count visited
            # children twice and refuse lists that fit.
            estimate += len(node) + 1
            queue.extend(itertools.islice(node, _PRECHECK_NODES))
        else:
            estimate += 1
        if estimate > ARTIFACTS_MAX_BYTES:
            return True
    return False


class _TooDeep(Exception):
    pass


def _coerce(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return coerce_text(value)
    if depth >= ARTIFACTS_MAX_DEPTH:
        if isinstance(value, dict | list | tuple):
            raise _TooDeep
        return value
    if isinstance(value, dict):
        return {k: _coerce(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_coerce(v, depth + 1) for v in value]
    return value

"""The one canonical JSON encoder: compact UTF-8, NaN and Infinity refused, no foreign types."""

from __future__ import annotations

import math
import threading
from typing import Any, Final

import orjson

__all__ = ["EncodeError", "dumps", "dumps_bounded_depth", "is_json", "loads"]

# Deeper than any configuration value or default needs; a cycle would otherwise never end.
_IS_JSON_DEPTH: Final = 64

# orjson would silently turn datetimes, dataclasses and str/int/dict/list subclasses into JSON;
# passing them through with no ``default`` makes every such value an error instead.
_OPTIONS: Final = (
    orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
# orjson refuses containers nested deeper than this many levels.
_ORJSON_DEPTH_LIMIT: Final = 254
_local = threading.local()


def is_json(value: object, depth: int = _IS_JSON_DEPTH) -> bool:
    """Whether ``value`` is JSON data as a parser makes it, at most ``depth`` containers deep:
    exact types only (``str``, ``int``, ``bool``, ``None``, a finite ``float``, ``list``,
    ``dict`` with string keys), so no tuple, subclass or NaN passes for JSON."""
    if value is None or type(value) in (str, int, bool):
        return True
    if type(value) is float:
        return math.isfinite(value)
    if depth <= 0:
        return False
    if type(value) is list:
        return all(is_json(item, depth - 1) for item in value)
    if type(value) is dict:
        return all(type(key) is str and is_json(item, depth - 1) for key, item in value.items())
    return False


class EncodeError(ValueError):
    """The value has no canonical JSON form."""


def dumps(value: Any) -> bytes:
    """Encode ``value`` canonically; raise :class:`EncodeError` when it cannot be."""
    return _finite(_encoded(value), value)


def _encoded(value: Any) -> bytes:
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise EncodeError(str(exc)) from None


def _finite(out: bytes, value: Any) -> bytes:
    """``out``, the encoding of ``value``, unless ``value`` holds NaN or Infinity."""
    # orjson writes non-finite floats as null; only then is a walk needed to tell them apart.
    if b"null" in out and _has_non_finite(value):
        raise EncodeError("NaN and Infinity have no JSON form")
    return out


def dumps_bounded_depth(value: Any, max_depth: int) -> bytes:
    """Like :func:`dumps`, but also refuse containers nested deeper than ``max_depth``.

    Wrapping the value in enough outer lists makes orjson's own recursion limit fall exactly at
    ``max_depth``, so the depth check runs at C speed inside the one encode.
    """
    padding = _ORJSON_DEPTH_LIMIT - max_depth
    outer, inner = _padding(padding)
    inner[0] = value
    try:
        out = _encoded(outer)
    finally:
        inner[0] = None
    # The walk for non-finite floats goes through ``value``, not the padding around it.
    return _finite(out[padding:-padding], value)


def _padding(levels: int) -> tuple[list[Any], list[Any]]:
    """A per-thread chain of ``levels`` nested lists, built once: (outermost, innermost)."""
    chains: dict[int, tuple[list[Any], list[Any]]] = _local.__dict__.setdefault("chains", {})
    chain = chains.get(levels)
    if chain is None:
        inner: list[Any] = [None]
        outer = inner
        for _ in range(levels - 1):
            outer = [outer]
        chain = chains[levels] = (outer, inner)
    return chain


def loads(data: bytes | str) -> Any:
    """Decode JSON text (orjson refuses NaN and Infinity on input too)."""
    return orjson.loads(data)


def _has_non_finite(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False

"""A server's tool definition: its canonical JSON and digest, its nrllm name, and its
description and input schema as a model is offered them.

Everything here is pure: the definition comes from a server and is hostile.
"""

from __future__ import annotations

import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Final, final

import attrs

__all__ = [
    "DESCRIPTION_MAX_BYTES",
    "SCHEMA_KEYWORDS",
    "Definition",
    "clean_description",
    "clean_schema",
    "nrllm_name",
]

DESCRIPTION_MAX_BYTES: Final = 1024
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
# Zero-width and bidirectional-override characters that are not "Cc"/"Cf" by accident of
# category are listed too; every format (Cf) and control (Cc) character goes anyway.
_INVISIBLE: Final = frozenset("\u200b\u200c\u200d\u2060\ufeff\u202a\u202b\u202c\u202d\u202e")

# The JSON Schema keywords a model is offered: what the seam's validator and the providers use.
# Keywords whose value is a schema, a list of schemas, or schemas by name.
_ONE_SCHEMA: Final = frozenset({"items", "additionalProperties", "not"})
_SCHEMA_LISTS: Final = frozenset({"anyOf", "oneOf", "allOf", "prefixItems"})
_NAMED_SCHEMAS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions"})
# Keywords a person or a model reads as prose: cleaned as a description is.
_PROSE: Final = frozenset({"title", "description"})
# Keywords whose value is plain JSON the server matches or acts on exactly: offered as it is.
_PLAIN: Final = frozenset(
    {
        "type",
        "enum",
        "const",
        "default",
        "format",
        "pattern",
        "$ref",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
    }
)
SCHEMA_KEYWORDS: Final = (
    _ONE_SCHEMA | _SCHEMA_LISTS | _NAMED_SCHEMAS | _PROSE | _PLAIN | {"required"}
)
# Steps of a path into the schema (a keyword, a name, an index), about 64 schemas deep: deeper
# than any schema a tool needs; a hostile one could otherwise exhaust the stack.
_MAX_DEPTH: Final = 128
# A step of a path shown as it is; any other name is shown as an escaped JSON string.
_WORD: Final = re.compile(r"\$?[A-Za-z_][A-Za-z0-9_-]{0,63}")


@final
@attrs.frozen(kw_only=True)
class Definition:
    """What is pinned of one tool: name, description, input schema and annotations."""

    name: str
    description: str
    input_schema: Mapping[str, Any]
    annotations: Mapping[str, Any]

    @classmethod
    def from_mcp(cls, tool: Any) -> Definition:
        """From the SDK's ``Tool`` (whatever extra fields it carries are not pinned)."""
        annotations = tool.annotations
        return cls(
            name=tool.name,
            description=tool.description or "",
            input_schema=dict(tool.input_schema),
            annotations={}
            if annotations is None
            else annotations.model_dump(mode="json", by_alias=True, exclude_none=True),
        )

    @classmethod
    def from_json(cls, text: str) -> Definition:
        data = json.loads(text)
        return cls(
            name=data["name"],
            description=data["description"],
            input_schema=data["inputSchema"],
            annotations=data["annotations"],
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "annotations": self.annotations,
        }

    def canonical(self) -> str:
        """Sorted keys, no spaces, UTF-8 as is: one text per definition."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode("utf-8")).hexdigest()

    def pretty(self) -> list[str]:
        """Indented JSON lines, for a person comparing two definitions."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False).splitlines()


def nrllm_name(prefix: str, tool: str) -> str | None:
    """``prefix`` + the tool's name, reduced to what nrllm accepts; ``None`` if nothing is left
    of the tool's own name."""
    reduced = _NOT_IN_NAMES.sub("_", tool)
    if not reduced.strip("_"):
        return None
    return (prefix + reduced)[:64]


def clean_description(text: str) -> str:
    """The description offered to a model: no control, zero-width or bidirectional-override
    characters (line breaks become spaces), at most 1,024 bytes of UTF-8."""
    kept = []
    for char in text:
        if char in "\n\r\t":
            kept.append(" ")
        elif not _removed(char):
            kept.append(char)
    cleaned = " ".join("".join(kept).split())
    encoded = cleaned.encode("utf-8")
    if len(encoded) <= DESCRIPTION_MAX_BYTES:
        return cleaned
    return encoded[:DESCRIPTION_MAX_BYTES].decode("utf-8", errors="ignore")


def _removed(char: str) -> bool:
    """Whether cleaning takes ``char`` out of a text (line breaks and tabs included)."""
    return char in _INVISIBLE or unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co")


def clean_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The input schema offered to a model: only :data:`SCHEMA_KEYWORDS` (``$comment``,
    ``examples``, ``x-...`` and every other keyword dropped, at every depth), each ``title``
    and ``description`` cleaned as :func:`clean_description` cleans, and every other string
    as the server wrote it. ``ValueError``, naming the keyword and its path, when cleaning
    would change such a string (an ``enum`` member, a ``pattern``, a property's name: the
    server matches them exactly, so a cleaned one would be refused), or when a keyword's
    value is not of the kind it must be."""
    return _schema_object(schema, ())


# Where a value is in the schema: keywords, names and list indexes from its root.
_Path = tuple[str | int, ...]


def _at(path: _Path) -> str:
    """``$.properties.mode.enum[0]``: a name that is not a plain word shown as a JSON string,
    escaped and cut, so no text of the server's reads as the message's own."""
    shown = ["$"]
    for step in path:
        if isinstance(step, int):
            shown.append(f"[{step}]")
        elif _WORD.fullmatch(step):
            shown.append(f".{step}")
        else:
            shown.append(f"[{json.dumps(step[:64])}]")
    return "".join(shown)


def _refuse(path: _Path, problem: str) -> ValueError:
    return ValueError(f"input schema: {_at(path)}: {problem}")


def _schema(value: object, path: _Path) -> dict[str, Any] | bool:
    if isinstance(value, bool):
        return value
    if not isinstance(value, Mapping):
        raise _refuse(path, "a schema must be an object or a boolean")
    return _schema_object(value, path)


def _schema_object(schema: Mapping[str, Any], path: _Path) -> dict[str, Any]:
    if len(path) > _MAX_DEPTH:
        raise _refuse(path[:8], "nested too deep")
    cleaned: dict[str, Any] = {}
    for keyword, value in schema.items():
        at = (*path, keyword)
        if keyword in _ONE_SCHEMA:
            cleaned[keyword] = _schema(value, at)
        elif keyword in _SCHEMA_LISTS:
            if not isinstance(value, list):
                raise _refuse(at, "must be an array of schemas")
            cleaned[keyword] = [_schema(item, (*at, i)) for i, item in enumerate(value)]
        elif keyword in _NAMED_SCHEMAS:
            if not isinstance(value, Mapping):
                raise _refuse(at, "must be an object of schemas")
            cleaned[keyword] = {_exact(n, (*at, n)): _schema(s, (*at, n)) for n, s in value.items()}
        elif keyword == "required":
            if not isinstance(value, list):
                raise _refuse(at, "must be an array of names")
            cleaned[keyword] = [_exact(n, (*at, i)) for i, n in enumerate(value)]
        elif keyword in _PROSE:
            if not isinstance(value, str):
                raise _refuse(at, "must be a string")
            cleaned[keyword] = clean_description(value)
        elif keyword in _PLAIN:
            cleaned[keyword] = _exact(value, at)
    return cleaned


def _exact(value: object, path: _Path) -> Any:
    """A value the server matches exactly (a name, an ``enum`` member, a ``pattern``), every
    string in it, keys and all, as it is: cleaning would offer the model a value the server
    refuses, or mean something else by it."""
    if len(path) > _MAX_DEPTH:
        raise _refuse(path[:8], "nested too deep")
    if isinstance(value, str):
        for char in value:
            if _removed(char):
                raise _refuse(path, f"holds U+{ord(char):04X}, which cleaning removes")
        return value
    if isinstance(value, list):
        return [_exact(item, (*path, i)) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {_exact(k, (*path, k)): _exact(v, (*path, k)) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float):
        return value
    raise _refuse(path, "a value that is not JSON")

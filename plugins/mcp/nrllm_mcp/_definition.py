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
# Keywords whose value is plain JSON, its strings cleaned.
_PLAIN: Final = frozenset(
    {
        "type",
        "title",
        "description",
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
SCHEMA_KEYWORDS: Final = _ONE_SCHEMA | _SCHEMA_LISTS | _NAMED_SCHEMAS | _PLAIN | {"required"}
# Deeper than any schema a tool needs; a hostile one could otherwise exhaust the stack.
_MAX_DEPTH: Final = 64


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
        elif char in _INVISIBLE or unicodedata.category(char) in ("Cc", "Cf", "Cs", "Co"):
            continue
        else:
            kept.append(char)
    cleaned = " ".join("".join(kept).split())
    encoded = cleaned.encode("utf-8")
    if len(encoded) <= DESCRIPTION_MAX_BYTES:
        return cleaned
    return encoded[:DESCRIPTION_MAX_BYTES].decode("utf-8", errors="ignore")


def clean_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The input schema offered to a model: only :data:`SCHEMA_KEYWORDS` (``$comment``,
    ``examples``, ``x-...`` and every other keyword dropped, at every depth) and every string
    cleaned as :func:`clean_description` cleans. ``ValueError`` when that would rename a
    property or definition the server knows by its own name, or when a keyword's value is not
    of the kind it must be."""
    return _schema_object(schema, 0)


def _schema(value: object, depth: int) -> dict[str, Any] | bool:
    if isinstance(value, bool):
        return value
    if not isinstance(value, Mapping):
        raise ValueError("input schema: a schema must be an object or a boolean")
    return _schema_object(value, depth)


def _schema_object(schema: Mapping[str, Any], depth: int) -> dict[str, Any]:
    if depth > _MAX_DEPTH:
        raise ValueError("input schema: nested too deep")
    cleaned: dict[str, Any] = {}
    for keyword, value in schema.items():
        if keyword in _ONE_SCHEMA:
            cleaned[keyword] = _schema(value, depth + 1)
        elif keyword in _SCHEMA_LISTS:
            if not isinstance(value, list):
                raise ValueError(f"input schema: {keyword} must be an array of schemas")
            cleaned[keyword] = [_schema(item, depth + 1) for item in value]
        elif keyword in _NAMED_SCHEMAS:
            if not isinstance(value, Mapping):
                raise ValueError(f"input schema: {keyword} must be an object of schemas")
            cleaned[keyword] = {_name(n): _schema(s, depth + 1) for n, s in value.items()}
        elif keyword == "required":
            if not isinstance(value, list):
                raise ValueError("input schema: required must be an array of names")
            cleaned[keyword] = [_name(n) for n in value]
        elif keyword in _PLAIN:
            cleaned[keyword] = _plain(value, depth + 1)
    return cleaned


def _name(name: object) -> str:
    """A property's (or definition's) name as the server spells it, which must stay as it is:
    a model calling with a cleaned name would call the server with a name it does not know."""
    if not isinstance(name, str) or clean_description(name) != name:
        raise ValueError("input schema: a name changes when cleaned")
    return name


def _plain(value: object, depth: int) -> Any:
    if depth > _MAX_DEPTH:
        raise ValueError("input schema: nested too deep")
    if isinstance(value, str):
        return clean_description(value)
    if isinstance(value, list):
        return [_plain(item, depth + 1) for item in value]
    if isinstance(value, Mapping):
        return {clean_description(str(k)): _plain(v, depth + 1) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float):
        return value
    raise ValueError("input schema: a value that is not JSON")

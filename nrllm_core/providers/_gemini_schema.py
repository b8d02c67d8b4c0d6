"""Which tool schemas Gemini can take: the JSON Schema subset of a function declaration's
``parametersJsonSchema``, checked keyword by keyword, never rewritten."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from nrllm_core._messages import ToolSpec

__all__ = ["NAME", "gemini_tool_problem", "schema_problems"]

# A function declaration's name, as the API takes it.
NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]{0,127}")
# The keywords of the JSON Schema subset Gemini documents for parametersJsonSchema, and those
# the google-genai SDK's own JSONSchema type adds; any other one is refused, not dropped, as
# dropping it would change what the tool accepts without anyone seeing it.
KEYWORDS: Final = frozenset(
    {
        "$id",
        "$defs",
        "$ref",
        "$anchor",
        "type",
        "format",
        "title",
        "description",
        "default",
        "enum",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "pattern",
        "anyOf",
        "oneOf",
        "properties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
        "propertyOrdering",
    }
)
TYPES: Final = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
# Keywords whose value is one schema, a list of schemas, or schemas by name.
_ONE: Final = ("items",)
_LIST: Final = ("prefixItems", "anyOf", "oneOf")
_NAMED: Final = ("properties", "$defs")


def gemini_tool_problem(tool: ToolSpec) -> str | None:
    """What Gemini cannot take of ``tool`` (its name, or the first keyword of its schema
    outside the subset, with its path); ``None`` when it can take it. The gate withholds such a
    tool from a ``gemini`` provider's runs; the adapter refuses to send it."""
    if not NAME.fullmatch(tool.name):
        return (
            "Gemini takes names of letters, digits and _.:- up to 128 characters, not starting "
            "with one of .:- or a digit"
        )
    problem = next(schema_problems(tool.parameters), None)
    return None if problem is None else f"Gemini cannot take its parameter schema ({problem})"


def schema_problems(schema: Mapping[str, Any]) -> Iterator[str]:
    """What of a tool's parameter schema Gemini cannot take, each as ``keyword at path``; the
    schema must describe an object, as the API requires of a function's parameters."""
    if schema.get("type") != "object":
        yield 'the schema\'s "type" must be "object"'
    yield from _problems(schema, "#")


def _problems(schema: object, path: str) -> Iterator[str]:
    if not isinstance(schema, Mapping):
        yield f"{path} is not a schema object"
        return
    for keyword, value in schema.items():
        where = f"{path}/{keyword}"
        if keyword not in KEYWORDS:
            yield f'the keyword "{keyword}" at {path}'
        elif keyword == "type" and not _known_type(value):
            yield f"{where} is not one of {', '.join(sorted(TYPES))} (or a list of them)"
        elif keyword in _ONE:
            yield from _problems(value, where)
        elif keyword in _LIST:
            if not isinstance(value, list):
                yield f"{where} is not a list of schemas"
                continue
            for index, item in enumerate(value):
                yield from _problems(item, f"{where}/{index}")
        elif keyword in _NAMED:
            if not isinstance(value, Mapping):
                yield f"{where} is not a table of schemas"
                continue
            for name, item in value.items():
                yield from _problems(item, f"{where}/{name}")
        elif keyword == "additionalProperties" and not isinstance(value, bool):
            yield from _problems(value, where)


def _known_type(value: object) -> bool:
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, str) and v in TYPES for v in value)
    return isinstance(value, str) and value in TYPES

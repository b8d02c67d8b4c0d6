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
    "clean_text",
    "nrllm_name",
    "visible",
]

DESCRIPTION_MAX_BYTES: Final = 1024
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
# Control, format (zero-width, bidirectional override, tag), surrogate, private-use and
# unassigned code points.
_HIDDEN_CATEGORIES: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})
# Unicode's Default_Ignorable_Code_Point ranges: what a text shows as nothing. The categories
# above miss those that are marks or letters: the variation selectors (U+FE00 to U+FE0F,
# U+E0100 to U+E01EF), which carry any text through a model's tokenizer, the Hangul fillers,
# the combining grapheme joiner, the Mongolian selectors.
_IGNORABLE_RANGES: Final = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
_IGNORABLE: Final = frozenset(
    chr(code) for first, last in _IGNORABLE_RANGES for code in range(first, last + 1)
)

# The JSON Schema keywords a model is offered: what providers use. (The seam checks arguments
# against the server's whole schema, every keyword in it.)
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
        "pattern",
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
    _ONE_SCHEMA | _SCHEMA_LISTS | _NAMED_SCHEMAS | _PROSE | _PLAIN | {"required", "format", "$ref"}
)
# JSON Schema's own formats (draft 2020-12): any other ``format`` is free text to the model,
# and dropped. A format only annotates (nothing checks it), so the offer loses no check.
_FORMATS: Final = frozenset(
    {
        "date-time",
        "date",
        "time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uuid",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
        "regex",
    }
)
# The drafts a schema may declare in ``$schema`` (with or without an empty fragment): its
# arguments are checked as that draft says; the offer is written as 2020-12, which models and
# providers read.
_DRAFTS: Final = {
    "http://json-schema.org/draft-04/schema": 4,
    "http://json-schema.org/draft-06/schema": 6,
    "http://json-schema.org/draft-07/schema": 7,
    "https://json-schema.org/draft/2019-09/schema": 2019,
    "https://json-schema.org/draft/2020-12/schema": 2020,
}
# A property's or a definition's name: an identifier, too short and too plain for prose.
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}")
# Levels of JSON nesting, about 32 schemas deep: deeper than any schema a tool needs. A
# hostile one could otherwise exhaust the stack here or in jsonschema, which checks arguments
# against the schema as the server gave it.
_MAX_DEPTH: Final = 64
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
        """Indented JSON lines, for a person comparing two definitions, through
        :func:`visible`. JSON writes a backslash of the definition's own as ``\\\\``, so no
        text of the server's reads as ``\\u{...}``. Split at the JSON's own line breaks only:
        those inside a string (U+2028, say) are written out, not lines of their own."""
        text = json.dumps(self.to_dict(), sort_keys=True, indent=2, ensure_ascii=False)
        return [visible(line) for line in text.split("\n")]


def nrllm_name(prefix: str, tool: str) -> str | None:
    """``prefix`` + the tool's name, reduced to what nrllm accepts; ``None`` if nothing is left
    of the tool's own name."""
    reduced = _NOT_IN_NAMES.sub("_", tool)
    if not reduced.strip("_"):
        return None
    return (prefix + reduced)[:64]


def clean_description(text: str) -> str:
    """The description offered to a model: no code point that shows as nothing (control,
    format, zero-width, bidirectional-override, variation selector, tag, private-use,
    unassigned; line breaks become spaces), at most 1,024 bytes of UTF-8."""
    return clean_text(text, DESCRIPTION_MAX_BYTES)


def clean_text(text: str, max_bytes: int) -> str:
    """``text`` as :func:`clean_description` cleans it, at most ``max_bytes`` of UTF-8."""
    kept = []
    for char in text:
        if char in "\n\r\t":
            kept.append(" ")
        elif not _hidden(char):
            kept.append(char)
    cleaned = " ".join("".join(kept).split())
    encoded = cleaned.encode("utf-8")
    if len(encoded) <= max_bytes:
        return cleaned
    return encoded[:max_bytes].decode("utf-8", errors="ignore")


def _hidden(char: str) -> bool:
    """Whether ``char`` shows as nothing, so cleaning takes it out (line breaks and tabs too,
    which are controls)."""
    return char in _IGNORABLE or unicodedata.category(char) in _HIDDEN_CATEGORIES


def visible(text: str) -> str:
    """``text`` for a person to read, every code point that shows as nothing, or as a space
    that is not U+0020, written out as ``\\u{FE0F}``: a definition's diff hides nothing."""
    return "".join(
        f"\\u{{{ord(char):04X}}}" if _hidden(char) or (char.isspace() and char != " ") else char
        for char in text
    )


def clean_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The input schema offered to a model: only :data:`SCHEMA_KEYWORDS` (``$comment``,
    ``examples``, ``x-...`` and every other keyword dropped, at every depth), each ``title``
    and ``description`` cleaned as :func:`clean_description` cleans, a ``format`` only when
    it is one of JSON Schema's own, and every other string as the server wrote it. Written as
    2020-12 writes it whatever draft ``$schema`` declares: a tuple of ``items`` and
    ``additionalItems`` (before 2020-12) as ``prefixItems`` and ``items``, a draft 04
    exclusive bound as the bound itself.

    ``ValueError``, naming the keyword and its path, when cleaning would change such a string
    (an ``enum`` member, a ``pattern``: the server matches them exactly, so a cleaned one would
    be refused), when a property's or a definition's name is not an identifier, when a
    ``$ref`` is not a reference that resolves within the offered schema, when ``$schema``
    names no draft from 04 to 2020-12, when a keyword's value is not of the kind it must be,
    or when the schema nests too deep."""
    if _too_deep(schema):
        raise _refuse((), f"nested more than {_MAX_DEPTH} levels deep")
    walk = _Walk(draft=_draft(schema))
    cleaned = _schema_object(schema, (), walk)
    for ref, path in walk.refs:
        if not _resolves(ref, cleaned):
            raise _refuse(path, "not a reference that resolves within the schema offered")
    return cleaned


# Where a value is in the schema: keywords, names and list indexes from its root.
_Path = tuple[str | int, ...]


@attrs.define
class _Walk:
    """What cleaning carries down one schema: the draft its root declares (2020 for
    2020-12), and each ``$ref`` met, resolved once the whole offer is built."""

    draft: int
    refs: list[tuple[str, _Path]] = attrs.Factory(list)


def _draft(schema: Mapping[str, Any]) -> int:
    """The draft the schema declares in ``$schema``; MCP's default, 2020-12, when none."""
    declared = schema.get("$schema")
    if declared is None:
        return 2020
    if isinstance(declared, str) and declared.removesuffix("#") in _DRAFTS:
        return _DRAFTS[declared.removesuffix("#")]
    raise _refuse(("$schema",), "not a draft nrllm checks against (04, 06, 07, 2019-09, 2020-12)")


def _too_deep(value: object) -> bool:
    """Whether ``value`` nests deeper than :data:`_MAX_DEPTH`, level by level: a check that
    cannot itself exhaust the stack."""
    level = [value]
    for _ in range(_MAX_DEPTH):
        inner: list[object] = []
        for item in level:
            if isinstance(item, Mapping):
                inner.extend(item.values())
            elif isinstance(item, list):
                inner.extend(item)
        if not inner:
            return False
        level = inner
    return True


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


def _schema(value: object, path: _Path, walk: _Walk) -> dict[str, Any] | bool:
    if isinstance(value, bool):
        return value
    if not isinstance(value, Mapping):
        raise _refuse(path, "a schema must be an object or a boolean")
    return _schema_object(value, path, walk)


def _schema_object(schema: Mapping[str, Any], path: _Path, walk: _Walk) -> dict[str, Any]:
    cleaned: dict[str, Any] = {}
    tuple_items = walk.draft < 2020 and isinstance(schema.get("items"), list)
    for keyword, value in schema.items():
        at = (*path, keyword)
        if walk.draft < 2020 and (keyword == "prefixItems" or (keyword == "items" and tuple_items)):
            # Not a keyword of the draft, or a tuple it writes its own way (below).
            continue
        if keyword in _ONE_SCHEMA:
            cleaned[keyword] = _schema(value, at, walk)
        elif keyword in _SCHEMA_LISTS:
            if not isinstance(value, list):
                raise _refuse(at, "must be an array of schemas")
            cleaned[keyword] = [_schema(item, (*at, i), walk) for i, item in enumerate(value)]
        elif keyword in _NAMED_SCHEMAS:
            if not isinstance(value, Mapping):
                raise _refuse(at, "must be an object of schemas")
            # Pattern properties are named by a regular expression, matched as it is.
            named = _exact if keyword == "patternProperties" else _name
            cleaned[keyword] = {
                named(n, (*at, n)): _schema(s, (*at, n), walk) for n, s in value.items()
            }
        elif keyword == "required":
            if not isinstance(value, list):
                raise _refuse(at, "must be an array of names")
            cleaned[keyword] = [_name(n, (*at, i)) for i, n in enumerate(value)]
        elif keyword in _PROSE:
            if not isinstance(value, str):
                raise _refuse(at, "must be a string")
            cleaned[keyword] = clean_description(value)
        elif keyword == "format":
            if isinstance(value, str) and value in _FORMATS:
                cleaned[keyword] = value
        elif keyword == "$ref":
            if not isinstance(value, str) or not value.startswith("#"):
                raise _refuse(at, "not a reference within the schema (#/...)")
            walk.refs.append((value, at))
            cleaned[keyword] = value
        elif keyword in _PLAIN:
            cleaned[keyword] = _exact(value, at)
    if tuple_items:
        _offer_tuple(schema, path, walk, cleaned)
    if walk.draft == 4:
        _offer_exclusive_bounds(cleaned)
    return cleaned


def _offer_tuple(
    schema: Mapping[str, Any], path: _Path, walk: _Walk, cleaned: dict[str, Any]
) -> None:
    """A tuple as drafts before 2020-12 write it (``items`` an array, ``additionalItems``
    for the rest) offered as 2020-12 writes it (``prefixItems``, ``items``)."""
    at = (*path, "items")
    cleaned["prefixItems"] = [
        _schema(item, (*at, i), walk) for i, item in enumerate(schema["items"])
    ]
    if "additionalItems" in schema:
        cleaned["items"] = _schema(schema["additionalItems"], (*path, "additionalItems"), walk)


def _offer_exclusive_bounds(cleaned: dict[str, Any]) -> None:
    """Draft 04 makes ``minimum`` or ``maximum`` exclusive with a flag beside it; 2020-12
    writes the exclusive bound itself."""
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        flag = cleaned.get(exclusive)
        if isinstance(flag, bool):
            del cleaned[exclusive]
            if flag and bound in cleaned:
                cleaned[exclusive] = cleaned.pop(bound)


def _name(name: object, path: _Path) -> str:
    """A property's or a definition's name: the server knows it by its spelling, so it cannot
    be cleaned, and a model reads it, so it must carry no prose."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _refuse(path, "a name must match ^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    return name


def _resolves(ref: str, schema: dict[str, Any]) -> bool:
    """Whether the JSON pointer in ``ref`` (``#/$defs/place``) reaches a schema in
    ``schema``; names are identifiers, so no step needs ``~`` or percent escapes."""
    target: object = schema
    pointer = ref[1:]
    if pointer and not pointer.startswith("/"):
        return False
    for step in pointer.split("/")[1:]:
        if isinstance(target, Mapping) and step in target:
            target = target[step]
        elif isinstance(target, list) and step.isdigit() and int(step) < len(target):
            target = target[int(step)]
        else:
            return False
    return isinstance(target, Mapping | bool)


def _exact(value: object, path: _Path) -> Any:
    """A value the server matches exactly (an ``enum`` member, a ``pattern``), every string in
    it, keys and all, as it is: cleaning would offer the model a value the server refuses, or
    mean something else by it."""
    if isinstance(value, str):
        for char in value:
            if _hidden(char):
                raise _refuse(path, f"holds U+{ord(char):04X}, which cleaning removes")
        return value
    if isinstance(value, list):
        return [_exact(item, (*path, i)) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {_exact(k, (*path, k)): _exact(v, (*path, k)) for k, v in value.items()}
    if value is None or isinstance(value, bool | int | float):
        return value
    raise _refuse(path, "a value that is not JSON")

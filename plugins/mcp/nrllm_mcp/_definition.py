"""A server's tool definition: its canonical JSON and digest, its nrllm name, its description.

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

__all__ = ["DESCRIPTION_MAX_BYTES", "Definition", "clean_description", "nrllm_name"]

DESCRIPTION_MAX_BYTES: Final = 1024
_NOT_IN_NAMES: Final = re.compile(r"[^A-Za-z0-9_-]")
# Zero-width and bidirectional-override characters that are not "Cc"/"Cf" by accident of
# category are listed too; every format (Cf) and control (Cc) character goes anyway.
_INVISIBLE: Final = frozenset("\u200b\u200c\u200d\u2060\ufeff\u202a\u202b\u202c\u202d\u202e")


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

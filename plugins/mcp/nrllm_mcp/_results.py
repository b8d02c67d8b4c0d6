"""A server's ``CallToolResult`` as an nrllm ``ToolResult``: text to the model, the rest to
the run only."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from nrllm_core import ToolArtifact, ToolResult

__all__ = ["resource_artifact", "to_tool_result"]


def to_tool_result(result: Any, tool_name: str) -> ToolResult:
    """Text blocks joined become ``content``; structured content, images, audio, resources and
    text whose audience leaves out the model become artifacts. A result the server marks
    ``isError`` becomes an error (the model's text only)."""
    texts: list[str] = []
    artifacts: list[ToolArtifact] = []
    for block in result.content:
        kind = getattr(block, "type", None)
        if kind == "text" and not _for_the_model(block):
            artifacts.append(
                ToolArtifact.text(block.text, label=f"text for the user from {tool_name}")
            )
        elif kind == "text":
            texts.append(block.text)
        elif kind in ("image", "audio"):
            artifacts.append(
                ToolArtifact.text(
                    f"{block.mime_type}, {_spaced(_decoded_size(block.data))} bytes",
                    label=f"{kind} from {tool_name}",
                )
            )
        elif kind == "resource":
            artifacts.append(resource_artifact(block.resource, tool_name))
        elif kind == "resource_link":
            artifacts.append(
                ToolArtifact.text(
                    _json({"uri": str(block.uri), "name": block.name, "mimeType": block.mime_type}),
                    label=f"resource link from {tool_name}",
                )
            )
    content = "\n".join(texts)
    if result.is_error:
        return ToolResult.error(content or f'Error: tool "{tool_name}" failed on the server.')
    if result.structured_content is not None:
        artifacts.insert(0, _structured(result.structured_content, tool_name))
    return ToolResult.text(content, *artifacts)


def _for_the_model(block: Any) -> bool:
    """No audience named means everyone; one named without ``assistant`` leaves the model out."""
    annotations = getattr(block, "annotations", None)
    audience = None if annotations is None else annotations.audience
    return audience is None or "assistant" in audience


def _structured(value: Any, tool_name: str) -> ToolArtifact:
    """A list of flat objects is a table; anything else its JSON."""
    rows = value.get("result") if isinstance(value, Mapping) and len(value) == 1 else value
    label = f"structured content from {tool_name}"
    if isinstance(rows, list) and rows and all(_flat(row) for row in rows):
        columns = list(dict.fromkeys(key for row in rows for key in row))
        return ToolArtifact.table(
            columns, [[_cell(row.get(c)) for c in columns] for row in rows], label=label
        )
    return ToolArtifact.text(_json(value), label=label)


def _flat(row: object) -> bool:
    return (
        isinstance(row, Mapping)
        and bool(row)
        and all(isinstance(k, str) for k in row)
        and all(v is None or isinstance(v, str | int | float | bool) for v in row.values())
    )


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value)


def resource_artifact(resource: Any, tool_name: str) -> ToolArtifact:
    """A resource's contents for the run only: its text, or a blob's type and size."""
    label = f"resource {resource.uri} from {tool_name}"
    text = getattr(resource, "text", None)
    if isinstance(text, str):
        return ToolArtifact.text(text, label=label)
    size = _decoded_size(getattr(resource, "blob", ""))
    return ToolArtifact.text(
        f"{resource.mime_type or 'application/octet-stream'}, {_spaced(size)} bytes", label=label
    )


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return len(data)


def _spaced(number: int) -> str:
    """``48213`` as ``48 213``."""
    return f"{number:,}".replace(",", " ")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True)

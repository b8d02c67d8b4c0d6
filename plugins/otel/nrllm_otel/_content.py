"""What content a span may carry, by the audit's privacy level (the records are already
filtered: this decides which of what they hold becomes an attribute or an event)."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from nrllm_otel import _names as names

__all__ = ["Level", "chat_content", "level_of", "tool_artifact_events", "tool_content"]


class Level(enum.Enum):
    """The privacy level as far as spans care: no content, redacted content, everything."""

    METADATA = "metadata"
    REDACTED = "redacted"
    FULL = "full"


def level_of(value: object) -> Level:
    """The level a ``start`` record names; anything unknown (or ``none``) carries no content."""
    if value == "full":
        return Level.FULL
    if value == "redacted":
        return Level.REDACTED
    return Level.METADATA


def chat_content(level: Level, messages: Any, payload: Mapping[str, Any] | None) -> dict[str, str]:
    """``gen_ai.input.messages`` / ``gen_ai.output.messages`` from ``redacted`` on; no output
    for a call that got no answer (``payload`` is ``None``)."""
    if level is Level.METADATA:
        return {}
    out: dict[str, str] = {}
    if isinstance(messages, list):
        out[names.GEN_AI_INPUT_MESSAGES] = _json([_message(m) for m in messages])
    if payload is None:
        return out
    parts: list[dict[str, Any]] = []
    if isinstance(payload.get("content"), str) and payload["content"]:
        parts.append({"type": "text", "content": payload["content"]})
    parts.extend(_calls(payload.get("requested_tool_calls")))
    reason = payload.get("finish_reason")
    output = {"role": "assistant", "parts": parts, "finish_reason": reason}
    out[names.GEN_AI_OUTPUT_MESSAGES] = _json([output])
    return out


def tool_content(level: Level, payload: Mapping[str, Any]) -> dict[str, str]:
    """``gen_ai.tool.call.arguments`` / ``gen_ai.tool.call.result`` from ``redacted`` on."""
    if level is Level.METADATA:
        return {}
    out: dict[str, str] = {}
    if "tool_arguments" in payload:
        out[names.GEN_AI_TOOL_CALL_ARGUMENTS] = _json(payload["tool_arguments"])
    if isinstance(payload.get("tool_result"), str):
        out[names.GEN_AI_TOOL_CALL_RESULT] = payload["tool_result"]
    return out


def tool_artifact_events(
    level: Level, payload: Mapping[str, Any]
) -> Iterator[tuple[str, dict[str, str]]]:
    """One ``nrllm.tool.artifact`` event per artifact, at ``full`` only."""
    if level is not Level.FULL:
        return
    for artifact in payload.get("tool_artifacts") or ():
        if isinstance(artifact, Mapping):
            yield (
                "nrllm.tool.artifact",
                {
                    "nrllm.artifact.type": str(artifact.get("type")),
                    "nrllm.artifact": _json(artifact),
                },
            )


def _message(message: object) -> dict[str, Any]:
    """A stored chat message in the convention's shape: a role and its parts."""
    if not isinstance(message, Mapping):
        return {"role": "unknown", "parts": []}
    parts: list[dict[str, Any]] = []
    if message.get("content"):
        kind = "tool_call_response" if message.get("role") == "tool" else "text"
        part: dict[str, Any] = {"type": kind}
        if kind == "tool_call_response":
            part.update(id=message.get("tool_call_id"), response=message.get("content"))
        else:
            part["content"] = message.get("content")
        parts.append(part)
    parts.extend(_calls(message.get("tool_calls")))
    return {"role": message.get("role"), "parts": parts}


def _calls(calls: object) -> list[dict[str, Any]]:
    """Tool calls as the convention's ``tool_call`` parts."""
    if not isinstance(calls, list):
        return []
    return [
        {
            "type": "tool_call",
            "id": call.get("id"),
            "name": call.get("name"),
            "arguments": call.get("arguments"),
        }
        for call in calls
        if isinstance(call, Mapping)
    ]


def _json(value: object) -> str:
    # Whatever the record holds is JSON already (the audit stores it so); default=str keeps a
    # stray non-JSON value from costing the span.
    return orjson.dumps(value, default=str).decode()

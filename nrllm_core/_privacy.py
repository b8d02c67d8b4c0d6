"""Privacy levels, and the one filter between a run step and what the audit persists."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from nrllm_core.redact import LEAF_MAX_CHARS, mask_secrets, redact, redact_tree

if TYPE_CHECKING:
    from nrllm_core._payloads import RunStep

__all__ = [
    "CALL_ID_MAX_CHARS",
    "CONTENT_KEYS",
    "FINISH_REASONS",
    "PrivacyLevel",
    "audit_view_for",
    "privacy_view",
]


class PrivacyLevel(enum.StrEnum):
    """How much of a run step the audit keeps: shape only, masked, or verbatim."""

    NONE = "none"
    METADATA = "metadata"
    REDACTED = "redacted"
    FULL = "full"


# The keys of a step that can carry what a person, a model or a tool said.
CONTENT_KEYS: Final = (
    "messages_sent",
    "content",
    "thinking",
    "requested_tool_calls",
    "raw",
    "tool_arguments",
    "tool_result",
    "tool_artifacts",
    "question",
    "answer",
)

_CONTENT_SET: Final = frozenset(CONTENT_KEYS)

# The finish reasons the OpenAI, Anthropic and Gemini APIs document (the Responses API's being
# its status and why it is incomplete); any other is stored as "other" below ``redacted``, so a
# provider cannot write free text into a metadata-only audit.
FINISH_REASONS: Final = frozenset(
    {
        "completed",
        "incomplete",
        "max_output_tokens",
        "stop",
        "length",
        "tool_calls",
        "content_filter",
        "function_call",
        "end_turn",
        "max_tokens",
        "stop_sequence",
        "tool_use",
        "pause_turn",
        "refusal",
        # Gemini's finishReason values, and the blockReason of a blocked prompt.
        "STOP",
        "MAX_TOKENS",
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "OTHER",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "MALFORMED_FUNCTION_CALL",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "UNEXPECTED_TOOL_CALL",
        "TOO_MANY_TOOL_CALLS",
        "MISSING_THOUGHT_SIGNATURE",
        "MODEL_ARMOR",
        "JAILBREAK",
    }
)
OTHER_FINISH_REASON: Final = "other"
CALL_ID_MAX_CHARS: Final = 128
_SEQUENCES: Final = (list, tuple)
# The content keys whose length the metadata level keeps, with the key it keeps it under.
_LENGTH_KEYS: Final = tuple(
    (key, f"{key}_length") for key in ("content", "thinking", "tool_result")
)

# Tool names already found to hold nothing to mask: a run calls the same few names again and
# again, and the scan costs more than the rest of the filter. Only exact strings no longer than
# a tool name may be are kept, and the set is emptied once full: a model cannot grow it.
_CLEAN_NAMES: Final[set[str]] = set()
_CLEAN_NAME_MAX_CHARS: Final = 64
_CLEAN_NAMES_MAX: Final = 1024


def privacy_view(step: RunStep, level: PrivacyLevel) -> dict[str, Any]:
    """The copy of ``step`` that the audit may keep at ``level``.

    ``full`` is the step verbatim; ``redacted`` keeps the shape and masks every string under a
    content key; ``none`` and ``metadata`` keep no content at all, only its shape and size.
    A value that is not a privacy level is refused rather than guessed at.
    """
    return audit_view_for(level)(step)


def audit_view_for(level: PrivacyLevel) -> Callable[[RunStep], dict[str, Any]]:
    """The ``audit_view`` to hand to :class:`~nrllm_core.RunRecorder` for ``level``."""
    return _VIEWS[PrivacyLevel(level)]


def _full(step: RunStep) -> dict[str, Any]:
    return step.to_dict()


def _redacted(step: RunStep) -> dict[str, Any]:
    data = step.to_dict()
    # Before the content is masked: a call id is cut only after its mask, wherever it stands.
    _mask_call_ids(data)
    _without_replays(data)
    for key in CONTENT_KEYS:
        if key in data:
            data[key] = redact_tree(data[key], keys=True)
    _mask_model_names(data)
    reason = data.get("finish_reason")
    if isinstance(reason, str):
        data["finish_reason"] = redact(reason)
    return data


def _without_replays(data: dict[str, Any]) -> None:
    """A replayed turn's blocks (thinking, thought signatures: the model's reasoning state,
    opaque to masking) are kept at ``full`` only; below it, their origin and number."""
    messages = data.get("messages_sent")
    if not isinstance(messages, _SEQUENCES):
        return
    kept: list[object] = []
    for message in messages:
        replay = message.get("replay") if isinstance(message, Mapping) else None
        if isinstance(replay, Mapping):
            blocks = replay.get("blocks")
            count = len(blocks) if isinstance(blocks, _SEQUENCES) else 0
            message = {**message, "replay": {"origin": replay.get("origin"), "blocks": count}}
        kept.append(message)
    data["messages_sent"] = kept


def _metadata(step: RunStep) -> dict[str, Any]:
    """Every key but the content keys; for those, their count or length, never their bytes.

    Built from the step directly: the content is never copied into a dict only to be dropped.
    """
    data = step.head()
    # A content key is read from the step only where its size is kept: a ``None`` there is
    # no content, as it is no key in ``to_dict()``.
    content = step.fields
    for key, value in content.items():
        if value is not None and key not in _CONTENT_SET:
            data[key] = value
    _mask_call_ids(data)
    _mask_model_names(data)
    _known_finish_reason(data)
    data["content_redacted"] = True
    messages = content.get("messages_sent")
    if isinstance(messages, _SEQUENCES):
        data["messages_sent_count"] = len(messages)
    for key, length_key in _LENGTH_KEYS:
        value = content.get(key)
        if isinstance(value, str):
            data[length_key] = len(value)
    if step.tool_artifacts:
        data["tool_artifacts_count"] = len(step.tool_artifacts)
        data["tool_artifact_types"] = [str(a.type) for a in step.tool_artifacts]
    elif isinstance(listed := content.get("tool_artifacts"), _SEQUENCES):
        # As in to_dict(), an artifact list among the fields counts when the step has none.
        data["tool_artifacts_count"] = len(listed)
        data["tool_artifact_types"] = _strings_at(listed, "type")
    calls = content.get("requested_tool_calls")
    if isinstance(calls, _SEQUENCES):
        data["requested_tool_names"] = [redact(name) for name in _strings_at(calls, "name")]
    return data


def _mask_model_names(data: dict[str, Any]) -> None:
    """A tool name is metadata, but the model chose it: a secret it was led to put there is
    masked like any other text the audit keeps."""
    name = data.get("tool_name")
    # Exact strings only are looked up: a subclass could claim to equal a clean name.
    if not isinstance(name, str) or (type(name) is str and name in _CLEAN_NAMES):
        return
    if len(name) > LEAF_MAX_CHARS or mask_secrets(name) is not name:
        data["tool_name"] = redact(name)
    elif type(name) is str and len(name) <= _CLEAN_NAME_MAX_CHARS:
        if len(_CLEAN_NAMES) >= _CLEAN_NAMES_MAX:
            _CLEAN_NAMES.clear()
        _CLEAN_NAMES.add(name)


def _known_finish_reason(data: dict[str, Any]) -> None:
    """The provider chose this string: kept only as a value its API documents."""
    reason = data.get("finish_reason")
    if reason is not None and not (isinstance(reason, str) and reason in FINISH_REASONS):
        data["finish_reason"] = OTHER_FINISH_REASON


def _mask_call_ids(data: dict[str, Any]) -> None:
    """Call ids (and the answer's id and model name) are text the model or its provider chose:
    each is masked, then cut, wherever the step keeps it. The same id comes out the same in
    every step, so the steps of one call still correlate. Nothing of the step itself is
    changed."""
    for key in ("tool_call_id", "response_id", "response_model"):
        if key in data:
            data[key] = _stored_id(data[key])
    for key in ("pending_calls", "requested_tool_calls"):
        if key in data:
            data[key] = _with_stored_ids(data[key], "id")
    messages = data.get("messages_sent")
    if isinstance(messages, _SEQUENCES):
        data["messages_sent"] = [_message_with_stored_ids(message) for message in messages]


def _message_with_stored_ids(message: object) -> object:
    if not isinstance(message, Mapping):
        return message
    out = dict(message)
    if "tool_call_id" in out:
        out["tool_call_id"] = _stored_id(out["tool_call_id"])
    if "tool_calls" in out:
        out["tool_calls"] = _with_stored_ids(out["tool_calls"], "id")
    return out


def _with_stored_ids(entries: object, key: str) -> object:
    if not isinstance(entries, _SEQUENCES):
        return entries
    return [
        {**entry, key: _stored_id(entry[key])}
        if isinstance(entry, Mapping) and key in entry
        else entry
        for entry in entries
    ]


def _stored_id(value: object) -> object:
    # Masked before it is cut: a key cut short would no longer read as a key.
    return mask_secrets(value)[:CALL_ID_MAX_CHARS] if isinstance(value, str) else value


_VIEWS: Final[Mapping[PrivacyLevel, Callable[[RunStep], dict[str, Any]]]] = {
    PrivacyLevel.FULL: _full,
    PrivacyLevel.REDACTED: _redacted,
    PrivacyLevel.METADATA: _metadata,
    PrivacyLevel.NONE: _metadata,
}


def _strings_at(entries: list[Any] | tuple[Any, ...], key: str) -> list[str]:
    return [
        entry[key]
        for entry in entries
        if isinstance(entry, Mapping) and isinstance(entry.get(key), str)
    ]

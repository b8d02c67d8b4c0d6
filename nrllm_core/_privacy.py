"""Privacy levels, and the one filter between a run step and what the audit persists."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from nrllm_core.redact import LEAF_MAX_CHARS, mask_secrets, redact, redact_tree

if TYPE_CHECKING:
    from nrllm_core._payloads import RunStep

__all__ = ["CONTENT_KEYS", "PrivacyLevel", "audit_view_for", "privacy_view"]


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
)

_CONTENT_SET: Final = frozenset(CONTENT_KEYS)
_MODEL_NAMED: Final = ("tool_name", "tool_call_id")
_SEQUENCES: Final = (list, tuple)


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
    for key in CONTENT_KEYS:
        if key in data:
            data[key] = redact_tree(data[key])
    _mask_model_names(data)
    return data


def _metadata(step: RunStep) -> dict[str, Any]:
    """Every key but the content keys; for those, their count or length, never their bytes.

    Built from the step directly: the content is never copied into a dict only to be dropped.
    """
    data = step.head()
    content: dict[str, Any] = {}
    for key, value in step.fields.items():
        if value is not None:
            (content if key in _CONTENT_SET else data)[key] = value
    _mask_model_names(data)
    data["content_redacted"] = True
    messages = content.get("messages_sent")
    if isinstance(messages, _SEQUENCES):
        data["messages_sent_count"] = len(messages)
    for key in ("content", "thinking", "tool_result"):
        value = content.get(key)
        if isinstance(value, str):
            data[f"{key}_length"] = len(value)
    # As in to_dict(): the step's own artifacts win over an artifact list among its fields.
    artifacts = [a.to_dict() for a in step.tool_artifacts] or content.get("tool_artifacts")
    if isinstance(artifacts, _SEQUENCES):
        data["tool_artifacts_count"] = len(artifacts)
        data["tool_artifact_types"] = _strings_at(artifacts, "type")
    calls = content.get("requested_tool_calls")
    if isinstance(calls, _SEQUENCES):
        data["requested_tool_names"] = [redact(name) for name in _strings_at(calls, "name")]
    return data


def _mask_model_names(data: dict[str, Any]) -> None:
    """Tool names and call ids are metadata, but the model chose them: a secret it was led to
    put there is masked like any other text the audit keeps."""
    names = [k for k in _MODEL_NAMED if isinstance(data.get(k), str)]
    joined = "\n".join(data[k] for k in names)
    # One scan for the common case, a registered name and a provider's id: nothing to mask.
    if len(joined) <= LEAF_MAX_CHARS and mask_secrets(joined) is joined:
        return
    for key in names:
        data[key] = redact(data[key])


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

"""What a run and a model provider exchange: messages, tool calls, tool specs, answers, usage."""

from __future__ import annotations

import enum
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from nrllm_core import _json
from nrllm_core.log import logger

__all__ = [
    "ChatMessage",
    "ProviderAnswer",
    "ProviderError",
    "Role",
    "ToolCall",
    "ToolSpec",
    "Usage",
]

# Only the factories hold this token, so every message is built by one of them.
_CREATE: Final = object()
_MESSAGE_KEYS: Final = frozenset({"role", "content", "tool_calls", "tool_call_id"})
_CALL_KEYS: Final = frozenset({"id", "name", "arguments"})


class ProviderError(Exception):
    """A model provider failed. The message is safe to show: no key, no raw answer body."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class Role(enum.StrEnum):
    """Who speaks in a message."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return types.MappingProxyType(dict(value))


def _non_empty_str(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{attribute.name} must be a non-empty string")


@final
@attrs.frozen(kw_only=True)
class ToolCall:
    """One call of a tool, as the model asked for it."""

    id: str = attrs.field(validator=_non_empty_str)
    name: str = attrs.field(validator=_non_empty_str)
    arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_mapping, hash=False)
    # False when the model's arguments were not a JSON object (or nested too deep): the seam
    # then refuses the call instead of running the tool with no arguments.
    arguments_valid: bool = True

    @classmethod
    def parse(cls, raw: object) -> ToolCall | None:
        """A call from a provider's answer, or ``None`` when it has no id or no name.

        Accepts the OpenAI wire shape ``{"id", "type", "function": {"name", "arguments"}}`` and
        the flat ``{"id", "name", "arguments"}``. Arguments may be a JSON string or an object;
        anything that is not a JSON object becomes ``{}``, so the tool's schema has the last word.
        """
        if not isinstance(raw, Mapping):
            _skipped("not_an_object")
            return None
        function = raw.get("function")
        source = function if isinstance(function, Mapping) else raw
        call_id, name = raw.get("id"), source.get("name")
        if not isinstance(call_id, str) or not call_id:
            _skipped("missing_id")
            return None
        if not isinstance(name, str) or not name:
            _skipped("missing_name")
            return None
        arguments = _arguments(source.get("arguments"))
        return cls(
            id=call_id,
            name=name,
            arguments=arguments or {},
            arguments_valid=arguments is not None,
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "name", "arguments"}``."""
        return {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}


# Deeper arguments are refused as invalid: nothing a tool needs nests further, and deep
# values break recursive consumers (error messages, renderers) downstream.
ARGUMENTS_MAX_DEPTH: Final = 32


def _skipped(reason: str) -> None:
    # The call's content came from the model: only the reason is logged, never the call.
    logger().warning("nrllm.provider.call_skipped", reason=reason)


def _arguments(raw: object) -> dict[str, Any] | None:
    """The arguments as a dict, or ``None`` when they are not a JSON object of sane depth."""
    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = _json.loads(raw)
        except ValueError:
            return None
    if not isinstance(raw, Mapping) or not all(isinstance(k, str) for k in raw):
        return None
    try:
        _json.dumps_bounded_depth(raw, ARGUMENTS_MAX_DEPTH)
    except _json.EncodeError:
        return None
    return dict(raw)


def _refuse_direct(instance: object, attribute: attrs.Attribute[object], value: object) -> None:
    if value is not _CREATE:
        raise TypeError(
            "build a ChatMessage with ChatMessage.system/user/assistant/tool_result(...)"
        )


@final
@attrs.frozen(kw_only=True)
class ChatMessage:
    """One message of a transcript, built only by its factories."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    _token: object = attrs.field(
        default=None, alias="_token", repr=False, eq=False, hash=False, validator=_refuse_direct
    )

    @classmethod
    def system(cls, text: str) -> ChatMessage:
        return cls(role=Role.SYSTEM, content=_text(text), _token=_CREATE)

    @classmethod
    def user(cls, text: str) -> ChatMessage:
        return cls(role=Role.USER, content=_text(text), _token=_CREATE)

    @classmethod
    def assistant(cls, content: str, tool_calls: Sequence[ToolCall] = ()) -> ChatMessage:
        """The model's turn: its text, and the calls it made (possibly none)."""
        calls = tuple(tool_calls)
        if not all(isinstance(c, ToolCall) for c in calls):
            raise TypeError("assistant tool calls must be ToolCall instances")
        return cls(role=Role.ASSISTANT, content=_text(content), tool_calls=calls, _token=_CREATE)

    @classmethod
    def tool_result(cls, call_id: str, content: str) -> ChatMessage:
        """The answer to one call: the single way a tool result reaches the wire.

        Only a plain ``str`` is accepted (the bounded content), never a ``ToolResult`` or any
        other object whose string form could carry more than the content channel.
        """
        if type(content) is not str:
            raise TypeError(
                f"tool_result takes the bounded content as a str, not {type(content).__name__}"
            )
        if not isinstance(call_id, str) or not call_id:
            raise ValueError("tool_result needs the call's id")
        return cls(role=Role.TOOL, content=content, tool_call_id=call_id, _token=_CREATE)

    def to_dict(self) -> dict[str, Any]:
        """JSON data for a stored transcript: ``role`` and ``content``, plus the call fields."""
        out: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChatMessage:
        """The message :meth:`to_dict` wrote; anything else raises ``ValueError``."""
        if not isinstance(data, Mapping) or not _MESSAGE_KEYS.issuperset(data):
            raise ValueError("not a stored chat message")
        role, content = data.get("role"), data.get("content")
        if not isinstance(content, str):
            raise ValueError("a stored chat message needs string content")
        calls = data.get("tool_calls", [])
        call_id = data.get("tool_call_id")
        if role != Role.ASSISTANT and calls:
            raise ValueError("only an assistant message carries tool calls")
        if role != Role.TOOL and call_id is not None:
            raise ValueError("only a tool message carries a tool_call_id")
        if role == Role.SYSTEM:
            return cls.system(content)
        if role == Role.USER:
            return cls.user(content)
        if role == Role.ASSISTANT:
            if not isinstance(calls, list):
                raise ValueError("stored tool calls must be a list")
            return cls.assistant(content, [_stored_call(c) for c in calls])
        if role == Role.TOOL:
            if not isinstance(call_id, str):
                raise ValueError("a stored tool message needs its tool_call_id")
            return cls.tool_result(call_id, content)
        raise ValueError("unknown role in a stored chat message")


def _text(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"message text must be a str, not {type(text).__name__}")
    return text


def _stored_call(data: object) -> ToolCall:
    if not isinstance(data, Mapping) or set(data) != _CALL_KEYS:
        raise ValueError("not a stored tool call")
    arguments = data["arguments"]
    if not isinstance(arguments, Mapping):
        raise ValueError("stored tool call arguments must be an object")
    return ToolCall(id=data["id"], name=data["name"], arguments=arguments)


def _parameters(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # Some servers (Ollama) reject ``"properties": []``; an empty schema is an empty object.
    params: dict[str, Any] = dict(value) if value else {"type": "object"}
    properties = params.get("properties")
    if properties is None or (not properties and not isinstance(properties, Mapping)):
        params["properties"] = {}
    return types.MappingProxyType(params)


@final
@attrs.frozen(kw_only=True)
class ToolSpec:
    """What a provider is told about one offered tool."""

    name: str = attrs.field(validator=_non_empty_str)
    description: str
    parameters: Mapping[str, Any] = attrs.field(converter=_parameters, hash=False)

    def to_dict(self) -> dict[str, Any]:
        """``{"name", "description", "parameters"}`` with plain dicts."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
        }


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int")


@final
@attrs.frozen(kw_only=True)
class Usage:
    """Tokens a provider call used; ``+`` sums calls."""

    prompt_tokens: int = attrs.field(default=0, validator=_count)
    completion_tokens: int = attrs.field(default=0, validator=_count)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
        )


def _calls(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(calls)


@final
@attrs.frozen(kw_only=True)
class ProviderAnswer:
    """One provider call's answer: text, the calls the model made, usage, why it stopped."""

    content: str
    tool_calls: tuple[ToolCall, ...] = attrs.field(converter=_calls)
    usage: Usage
    finish_reason: str | None
    thinking: str | None = None
    # The provider's id for this answer, when it gives one.
    response_id: str | None = None

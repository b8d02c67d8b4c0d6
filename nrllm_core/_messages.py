"""What a run and a model provider exchange: messages, tool calls, tool specs, answers, usage."""

from __future__ import annotations

import enum
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, Literal, final

import attrs

from nrllm_core import _json
from nrllm_core.log import logger

__all__ = [
    "ChatMessage",
    "Delta",
    "ProviderAnswer",
    "ProviderError",
    "Replay",
    "Role",
    "RunTurn",
    "Stop",
    "StreamRestarted",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolChoice",
    "ToolSpec",
    "Usage",
]

# Only the factories hold this token, so every message is built by one of them.
_CREATE: Final = object()
_MESSAGE_KEYS: Final = frozenset(
    {"role", "content", "tool_calls", "tool_call_id", "is_error", "replay"}
)
_CALL_KEYS: Final = frozenset({"id", "name", "arguments"})
_OPTIONAL_CALL_KEYS: Final = frozenset({"raw_arguments"})

# Whether the model may call a tool in this request: ``auto`` lets it choose, ``none`` asks for
# text only while the tools stay declared (the history may hold calls of them).
ToolChoice = Literal["auto", "none"]


@final
@attrs.frozen(kw_only=True)
class RunTurn:
    """Which run, and which round of it, a model request answers for: what a provider whose
    ``complete`` (``stream``, ``acomplete``, ``astream``) takes a keyword ``turn`` is told."""

    run_id: str
    round: int


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
    # The model's own arguments string when it was not a JSON object: the history sends it
    # back as the model wrote it, not as ``{}``.
    raw_arguments: str | None = None

    @classmethod
    def parse(cls, raw: object, *, provider: str | None = None) -> ToolCall:
        """A call from ``provider``'s answer.

        Accepts the OpenAI wire shape ``{"id", "type", "function": {"name", "arguments"}}`` and
        the flat ``{"id", "name", "arguments"}``. Arguments may be a JSON string or an object;
        anything that is not a JSON object becomes ``{}``, so the tool's schema has the last word.
        A call without an id or a name cannot be answered: it raises :class:`ProviderError`
        naming the problem (never the call's content) instead of being dropped.
        """
        if not isinstance(raw, Mapping):
            raise _bad_call(provider, "a tool call that is not an object")
        function = raw.get("function")
        source = function if isinstance(function, Mapping) else raw
        call_id, name = raw.get("id"), source.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise _bad_call(provider, "a tool call with an empty or missing id")
        if not isinstance(name, str) or not name:
            raise _bad_call(provider, "a tool call with an empty or missing name")
        given = source.get("arguments")
        arguments = _arguments(given)
        return cls(
            id=call_id,
            name=name,
            arguments=arguments or {},
            arguments_valid=arguments is not None,
            raw_arguments=given if arguments is None and isinstance(given, str) else None,
        )

    def to_dict(self) -> dict[str, Any]:
        """``{"id", "name", "arguments"}``, plus ``raw_arguments`` when the model's were bad."""
        out = {"id": self.id, "name": self.name, "arguments": dict(self.arguments)}
        if self.raw_arguments is not None:
            out["raw_arguments"] = self.raw_arguments
        return out


# Deeper arguments are refused as invalid: nothing a tool needs nests further, and deep
# values break recursive consumers (error messages, renderers) downstream.
ARGUMENTS_MAX_DEPTH: Final = 32


def _bad_call(provider: str | None, problem: str) -> ProviderError:
    # The call's content came from the model: only the problem is logged, never the call.
    logger().warning("nrllm.provider.bad_call", provider=provider, problem=problem)
    who = "the provider" if provider is None else f'provider "{provider}"'
    return ProviderError(f"{who} answered with {problem}")


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


def _json_blocks(blocks: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    # A deep copy through JSON: the blocks are data the provider sent, frozen as received.
    copied = _json.loads(_json.dumps(list(blocks)))
    if not all(isinstance(b, dict) for b in copied):
        raise ValueError("replay blocks must be objects")
    return tuple(types.MappingProxyType(b) for b in copied)


@final
@attrs.frozen(kw_only=True)
class Replay:
    """An assistant turn's content in its provider's own shape (Anthropic ``thinking`` blocks
    with their signatures, say), to be sent back, and only to that provider.

    ``origin`` names the adapter instance that produced it; an adapter whose origin differs
    ignores the replay and builds the turn from the message's portable fields instead.
    """

    origin: str = attrs.field(validator=_non_empty_str)
    blocks: tuple[Mapping[str, Any], ...] = attrs.field(converter=_json_blocks, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"origin": self.origin, "blocks": [dict(b) for b in self.blocks]}


@final
@attrs.frozen(kw_only=True)
class ChatMessage:
    """One message of a transcript, built only by its factories."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    # A tool result that reports a failure (schema error, unknown tool, denial, tool error).
    is_error: bool = False
    replay: Replay | None = None
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
    def assistant(
        cls, content: str, tool_calls: Sequence[ToolCall] = (), *, replay: Replay | None = None
    ) -> ChatMessage:
        """The model's turn: its text, the calls it made (possibly none), and, when its
        provider needs them back as it sent them, its own blocks."""
        calls = tuple(tool_calls)
        if not all(isinstance(c, ToolCall) for c in calls):
            raise TypeError("assistant tool calls must be ToolCall instances")
        if replay is not None and not isinstance(replay, Replay):
            raise TypeError("an assistant replay must be a Replay")
        return cls(
            role=Role.ASSISTANT,
            content=_text(content),
            tool_calls=calls,
            replay=replay,
            _token=_CREATE,
        )

    @classmethod
    def tool_result(cls, call_id: str, content: str, *, is_error: bool = False) -> ChatMessage:
        """The answer to one call: the single way a tool result reaches the wire.

        Only a plain ``str`` is accepted (the bounded content), never a ``ToolResult`` or any
        other object whose string form could carry more than the content channel.
        ``is_error`` marks a result that reports a failure, for the APIs that carry the flag.
        """
        if type(content) is not str:
            raise TypeError(
                f"tool_result takes the bounded content as a str, not {type(content).__name__}"
            )
        if not isinstance(call_id, str) or not call_id:
            raise ValueError("tool_result needs the call's id")
        if type(is_error) is not bool:
            raise TypeError("is_error must be a bool")
        return cls(
            role=Role.TOOL, content=content, tool_call_id=call_id, is_error=is_error, _token=_CREATE
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON data for a stored transcript: ``role`` and ``content``, plus the call fields."""
        out: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.is_error:
            out["is_error"] = True
        if self.replay is not None:
            out["replay"] = self.replay.to_dict()
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
        is_error = data.get("is_error", False)
        replay = data.get("replay")
        if role != Role.ASSISTANT and (calls or replay is not None):
            raise ValueError("only an assistant message carries tool calls or a replay")
        if role != Role.TOOL and (call_id is not None or is_error):
            raise ValueError("only a tool message carries a tool_call_id or is_error")
        if role == Role.SYSTEM:
            return cls.system(content)
        if role == Role.USER:
            return cls.user(content)
        if role == Role.ASSISTANT:
            if not isinstance(calls, list):
                raise ValueError("stored tool calls must be a list")
            return cls.assistant(
                content,
                [_stored_call(c) for c in calls],
                replay=None if replay is None else _stored_replay(replay),
            )
        if role == Role.TOOL:
            if not isinstance(call_id, str) or type(is_error) is not bool:
                raise ValueError("a stored tool message needs its tool_call_id")
            return cls.tool_result(call_id, content, is_error=is_error)
        raise ValueError("unknown role in a stored chat message")


def _text(text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"message text must be a str, not {type(text).__name__}")
    return text


def _stored_call(data: object) -> ToolCall:
    if not isinstance(data, Mapping) or not _CALL_KEYS <= set(data) <= (
        _CALL_KEYS | _OPTIONAL_CALL_KEYS
    ):
        raise ValueError("not a stored tool call")
    arguments, raw = data["arguments"], data.get("raw_arguments")
    if not isinstance(arguments, Mapping):
        raise ValueError("stored tool call arguments must be an object")
    if raw is not None and not isinstance(raw, str):
        raise ValueError("stored raw arguments must be a string")
    return ToolCall(
        id=data["id"],
        name=data["name"],
        arguments=arguments,
        arguments_valid=raw is None,
        raw_arguments=raw,
    )


def _stored_replay(data: object) -> Replay:
    if not isinstance(data, Mapping) or set(data) != {"origin", "blocks"}:
        raise ValueError("not a stored replay")
    blocks = data["blocks"]
    if not isinstance(blocks, list):
        raise ValueError("stored replay blocks must be a list")
    return Replay(origin=data["origin"], blocks=blocks)


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


# More tokens than any call or run is billed for: a count above it (a provider's answer may
# say anything) is held at it, so sums stay within what JSON encoders and databases hold.
TOKENS_MAX: Final = 2**40


def _count(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not int or value < 0:
        raise ValueError(f"{attribute.name} must be a non-negative int")


def _held(value: object) -> object:
    return min(value, TOKENS_MAX) if type(value) is int else value


@final
@attrs.frozen(kw_only=True)
class Usage:
    """Tokens a provider call was billed for; ``+`` sums calls.

    ``prompt_tokens`` counts every input token, cache reads and writes included;
    ``cached_tokens`` is the part of them read from the provider's prompt cache, and
    ``reasoning_tokens`` the part of ``completion_tokens`` spent on hidden reasoning.
    """

    prompt_tokens: int = attrs.field(default=0, converter=_held, validator=_count)
    completion_tokens: int = attrs.field(default=0, converter=_held, validator=_count)
    cached_tokens: int = attrs.field(default=0, converter=_held, validator=_count)
    reasoning_tokens: int = attrs.field(default=0, converter=_held, validator=_count)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, int]:
        return attrs.asdict(self)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        mine, theirs = self.to_dict(), other.to_dict()
        return Usage(**{key: mine[key] + theirs[key] for key in mine})


class Stop(enum.StrEnum):
    """Why a provider's answer ended, as the loop needs to know it."""

    # The model finished its turn: with text, or with the tool calls it made.
    END = "end"
    # The answer hit its token limit: its text is cut off and its calls are incomplete.
    LENGTH = "length"
    # The model, or the provider's filter, refused: the answer's content is the refusal.
    REFUSAL = "refusal"
    # The provider paused a long turn: sending the turn back lets the model continue it.
    PAUSE = "pause"


def _calls(calls: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(calls)


@final
@attrs.frozen(kw_only=True)
class ProviderAnswer:
    """One provider call's answer: text, the calls the model made, usage, why it stopped."""

    content: str
    tool_calls: tuple[ToolCall, ...] = attrs.field(converter=_calls)
    usage: Usage
    # The provider's own word for why it stopped, as recorded; ``stop`` is what it means.
    finish_reason: str | None
    thinking: str | None = None
    stop: Stop = Stop.END
    replay: Replay | None = None
    # The provider's id for this answer, when it gives one.
    response_id: str | None = None
    # The model that answered, as the provider names it (a dated version of the one asked for).
    response_model: str | None = None
    # Input tokens written to the provider's prompt cache (part of ``usage.prompt_tokens``):
    # only Anthropic reports them.
    cache_creation_tokens: int = attrs.field(default=0, validator=_count)


@final
@attrs.frozen(kw_only=True)
class TextDelta:
    """A piece of the answer's text, as the provider sent it while streaming."""

    text: str


@final
@attrs.frozen(kw_only=True)
class ThinkingDelta:
    """A piece of the model's thinking, as the provider sent it while streaming."""

    text: str


@final
@attrs.frozen(kw_only=True)
class StreamRestarted:
    """A broken stream is being retried as a whole: the deltas shown so far are void."""


# What a streaming call hands its ``on_delta`` callback; never persisted, the answer is.
Delta = TextDelta | ThinkingDelta | StreamRestarted

"""The Anthropic Messages API: ``tool_use`` and ``tool_result`` content blocks."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, final

from nrllm_core import _json
from nrllm_core._messages import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    Replay,
    Role,
    Stop,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)
from nrllm_core.providers._api import HttpProvider
from nrllm_core.providers._http import (
    HttpSettings,
    StreamBroken,
    StreamFailed,
    http_settings,
    response_id,
    response_model,
    token_count,
)
from nrllm_core.providers._settings import Settings
from nrllm_core.providers._sse import ServerSentEvent

__all__ = ["AnthropicProvider", "anthropic_check", "request_problems"]

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
DEFAULT_KEY_VARIABLE: Final = "ANTHROPIC_API_KEY"
DEFAULT_MAX_TOKENS: Final = 4096
API_VERSION: Final = "2023-06-01"
# The smallest thinking budget the Messages API takes.
MIN_THINKING_BUDGET: Final = 1024
_STOPS: Final = {"max_tokens": Stop.LENGTH, "refusal": Stop.REFUSAL, "pause_turn": Stop.PAUSE}
# Blocks the portable message fields carry; any other kind means the turn goes back as its
# own blocks (see _request_block).
_PORTABLE_BLOCKS: Final = frozenset({"text", "tool_use"})
# Blocks the API checks against their signature when they come back.
_SIGNED_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})
REFUSED: Final = "The model refused to answer."
# Between the text of two blocks, in the whole answer and in the deltas a viewer sees.
BLOCK_SEPARATOR: Final = "\n\n"


@final
class AnthropicProvider(HttpProvider):
    """``POST {base_url}/v1/messages`` with tools."""

    __slots__ = ("_options",)
    KIND: ClassVar = "anthropic"
    STREAM_FIELDS: ClassVar = {"stream": True}

    def __init__(
        self,
        *,
        name: str,
        model: str,
        http: HttpSettings,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(name=name, model=model, http=http)
        self._options = {"max_tokens": DEFAULT_MAX_TOKENS, **(options or {})}

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> AnthropicProvider:
        """Build from a provider section; the key is read from ``api_key_env``."""
        read = Settings(name, settings)
        options = read.request_fields()
        first = next(request_problems(options), None)
        if first is not None:
            key, problem = first
            raise read.error(f"{key} {problem}")
        key = read.secret("api_key_env", environ, DEFAULT_KEY_VARIABLE)
        http = http_settings(
            read,
            path="/v1/messages",
            default_base_url=DEFAULT_BASE_URL,
            headers={"x-api-key": key, "anthropic-version": API_VERSION},
            secrets=(key,),
            sleep=sleep,
            asleep=asleep,
        )
        return cls(name=name, model=read.text("model"), http=http, options=options)

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON request; system text goes top-level, and without tools no ``tools`` key."""
        system = "\n\n".join(m.content for m in messages if m.role is Role.SYSTEM and m.content)
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self._wire_messages(m for m in messages if m.role is not Role.SYSTEM),
            **self._options,
        }
        if system:
            body["system"] = system
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in tools
            ]
            if tool_choice == "none":
                body["tool_choice"] = {"type": "none"}
        return body

    def _assembler(self, on_delta: Callable[[Delta], None]) -> _Events:
        return _Events(on_delta)

    def _parse(self, data: Any) -> ProviderAnswer:
        blocks = data.get("content") if isinstance(data, dict) else None
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            raise ProviderError(f'provider "{self.name}" answered without content blocks')
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                thoughts.append(block["thinking"])
            elif kind == "tool_use":
                raw = {
                    "id": block.get("id"),
                    "name": block.get("name"),
                    "arguments": block.get("input"),
                }
                calls.append(ToolCall.parse(raw, provider=self.name))
        raw_stop = data.get("stop_reason")
        stop = _STOPS.get(raw_stop, Stop.END) if isinstance(raw_stop, str) else Stop.END
        content = BLOCK_SEPARATOR.join(t for t in texts if t)
        if stop is Stop.REFUSAL:
            content = content or REFUSED
        verbatim = stop is Stop.PAUSE or not all(_portable(b.get("type")) for b in blocks)
        usage = data.get("usage")
        cache_read = token_count(usage, "cache_read_input_tokens")
        cache_creation = token_count(usage, "cache_creation_input_tokens")
        return ProviderAnswer(
            content=content,
            tool_calls=tuple(calls),
            usage=Usage(
                # Billed input: uncached, read from the cache and written to it.
                prompt_tokens=token_count(usage, "input_tokens") + cache_read + cache_creation,
                completion_tokens=token_count(usage, "output_tokens"),
                cached_tokens=cache_read,
            ),
            finish_reason=raw_stop if isinstance(raw_stop, str) else None,
            thinking=BLOCK_SEPARATOR.join(t for t in thoughts if t) or None,
            stop=stop,
            replay=Replay(origin=self.origin, blocks=blocks) if verbatim else None,
            response_id=response_id(data),
            response_model=response_model(data),
            cache_creation_tokens=cache_creation,
        )

    def _wire_messages(self, messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            role = "assistant" if message.role is Role.ASSISTANT else "user"
            blocks = self._blocks(message)
            if out and out[-1]["role"] == role:
                # Consecutive results answer one assistant turn, and a paused turn continues in
                # the next answer: the API wants each as one message, roles alternating.
                previous = out[-1]
                if isinstance(previous["content"], str):
                    previous["content"] = [{"type": "text", "text": previous["content"]}]
                previous["content"].extend(
                    [{"type": "text", "text": blocks}] if isinstance(blocks, str) else blocks
                )
            else:
                out.append({"role": role, "content": blocks})
        return out

    def _blocks(self, message: ChatMessage) -> str | list[dict[str, Any]]:
        if message.role is Role.TOOL:
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.is_error:
                result["is_error"] = True
            return [result]
        replay = message.replay
        if replay is not None and replay.origin == self.origin:
            return [_request_block(b) for b in replay.blocks]
        if message.role is Role.ASSISTANT and message.tool_calls:
            content: list[dict[str, Any]] = []
            if message.content:
                content.append({"type": "text", "text": message.content})
            content.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in message.tool_calls
            )
            return content
        return message.content


@final
class _Events:
    """A message stream, assembled into the message the API sends unstreamed: each content
    block built from its start and its deltas (text, tool input JSON, thinking and its
    signature, citations), then the stop reason and usage that ``message_delta`` updates.

    The viewer sees each block's text as it comes, and ``BLOCK_SEPARATOR`` before the text of
    a block that follows another one of its kind, so that the deltas join as the answer does."""

    __slots__ = ("_blocks", "_inputs", "_message", "_on_delta", "_shown", "_texts")

    def __init__(self, on_delta: Callable[[Delta], None]) -> None:
        self._on_delta = on_delta
        self._message: dict[str, Any] | None = None
        self._blocks: list[dict[str, Any]] = []
        self._inputs: dict[int, list[str]] = {}
        # Each block's text fields in pieces, joined once in ``answer``: appending to a string
        # copies it, which made a long stream cost its length squared.
        self._texts: dict[tuple[int, str], list[str]] = {}
        # The block whose text each kind of delta showed last.
        self._shown: dict[type[TextDelta] | type[ThinkingDelta], int] = {}

    def feed(self, event: ServerSentEvent) -> bool:
        try:
            data = _json.loads(event.data)
        except ValueError:
            raise StreamBroken("a malformed event") from None
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            raise StreamBroken("an event without a type")
        if kind == "error":
            raise StreamFailed(data.get("error"))
        if kind == "message_start":
            message = data.get("message")
            if not isinstance(message, dict) or self._message is not None:
                raise StreamBroken("a malformed message_start")
            self._message = dict(message)
        elif kind in _BLOCK_EVENTS:
            self._block_event(kind, data)
        elif kind == "message_delta":
            self._message_delta(data)
        elif kind == "message_stop":
            self._started()
            return True
        # ping, and event types newer than this adapter, carry nothing the answer needs.
        return False

    def _started(self) -> dict[str, Any]:
        if self._message is None:
            raise StreamBroken("an event before message_start")
        return self._message

    def _block_event(self, kind: str, data: dict[str, Any]) -> None:
        self._started()
        index = data.get("index")
        if kind == "content_block_start":
            block = data.get("content_block")
            if index != len(self._blocks) or not isinstance(block, dict):
                raise StreamBroken("a malformed content_block_start")
            self._blocks.append(dict(block))
            return
        if type(index) is not int or not 0 <= index < len(self._blocks):
            raise StreamBroken(f"a {kind} for no started block")
        block = self._blocks[index]
        if kind == "content_block_stop":
            parts = self._inputs.pop(index, None)
            # Every block that starts with an input (tool_use, server_tool_use, ...) takes it
            # from its pieces, as the SDK does; no other block has one.
            if "input" in block and parts:
                raw = "".join(parts)
                try:
                    block["input"] = _json.loads(raw)
                except ValueError:
                    # ToolCall.parse marks a call whose input is no JSON object invalid.
                    block["input"] = raw
            return
        delta = data.get("delta")
        if not isinstance(delta, dict):
            raise StreamBroken("a content_block_delta without a delta")
        self._delta(index, block, delta)

    def _delta(self, index: int, block: dict[str, Any], delta: dict[str, Any]) -> None:
        kind = delta.get("type")
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self._inputs.setdefault(index, []).append(delta["partial_json"])
        elif kind == "citations_delta" and delta.get("citation") is not None:
            citations = block.get("citations")
            if citations is None:
                citations = block["citations"] = []
            elif not isinstance(citations, list):
                raise StreamBroken("citations that are no list")
            citations.append(delta["citation"])
        elif isinstance(kind, str) and kind in _TEXT_DELTAS:
            field, shown = _TEXT_DELTAS[kind]
            text = delta.get(field)
            if isinstance(text, str):
                self._texts.setdefault((index, field), [_str(block.get(field))]).append(text)
                if shown is not None and text:
                    self._show(shown, index, text)

    def _show(self, shown: type[TextDelta] | type[ThinkingDelta], index: int, text: str) -> None:
        if self._shown.get(shown, index) != index:
            self._on_delta(shown(text=BLOCK_SEPARATOR))
        self._shown[shown] = index
        self._on_delta(shown(text=text))

    def _message_delta(self, data: dict[str, Any]) -> None:
        message = self._started()
        delta = data.get("delta")
        if isinstance(delta, dict):
            message.update(delta)
        usage = data.get("usage")
        if isinstance(usage, dict):
            before = message.get("usage")
            counts = {k: v for k, v in usage.items() if v is not None}
            message["usage"] = {**(before if isinstance(before, dict) else {}), **counts}

    def may_end(self) -> bool:
        return False

    def answer(self) -> Any:
        for (index, field), parts in self._texts.items():
            self._blocks[index][field] = "".join(parts)
        self._texts.clear()
        return {**self._started(), "content": self._blocks}


# A delta's field, appended to the block's field of the same name, and what the viewer sees.
_TEXT_DELTAS: Final[dict[str, tuple[str, type[TextDelta] | type[ThinkingDelta] | None]]] = {
    "text_delta": ("text", TextDelta),
    "thinking_delta": ("thinking", ThinkingDelta),
    "signature_delta": ("signature", None),
}
_BLOCK_EVENTS: Final = frozenset(
    {"content_block_start", "content_block_delta", "content_block_stop"}
)


def anthropic_check(
    name: str, settings: Mapping[str, Any], *, config_dir: Path | None
) -> Iterator[tuple[str, str]]:
    """The section's request fields (its settings and its params) the Messages API refuses."""
    params = settings.get("params")
    fields = {
        **(params if isinstance(params, Mapping) else {}),
        "max_tokens": settings.get("max_tokens"),
        "max_completion_tokens": settings.get("max_completion_tokens"),
    }
    return request_problems(fields)


def request_problems(fields: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(key, problem)`` for each request field of a section (its settings and its params,
    merged) that the Messages API refuses whatever the model: OpenAI's token limit, and a
    thinking budget under the minimum or not under ``max_tokens`` (nrllm sends no beta header
    that would let it exceed them)."""
    if fields.get("max_completion_tokens") is not None:
        yield "max_completion_tokens", "is OpenAI's; the Messages API takes max_tokens"
    thinking = fields.get("thinking")
    if not isinstance(thinking, Mapping) or "budget_tokens" not in thinking:
        return
    budget = thinking["budget_tokens"]
    max_tokens = fields.get("max_tokens") or DEFAULT_MAX_TOKENS
    key = "params.thinking.budget_tokens"
    if type(budget) is not int:
        yield key, "must be an integer"
    elif budget < MIN_THINKING_BUDGET:
        yield key, f"must be at least {MIN_THINKING_BUDGET}"
    elif budget >= max_tokens:
        yield key, f"must be less than max_tokens ({max_tokens})"


def _portable(kind: object) -> bool:
    return isinstance(kind, str) and kind in _PORTABLE_BLOCKS


def _request_block(block: Mapping[str, Any]) -> dict[str, Any]:
    """A block of an answer as a request carries it back: thinking blocks exactly as received,
    other blocks without the keys an answer may send as null (``caller``, ``citations``), as
    a request takes no null for some of them and absent means the same for all. Only the
    block's own keys: a tool's ``input`` goes back as the model wrote it, nulls included."""
    kind = block.get("type")
    if isinstance(kind, str) and kind in _SIGNED_BLOCKS:
        return dict(block)
    return {key: value for key, value in block.items() if value is not None}


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""

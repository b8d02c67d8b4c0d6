"""The Anthropic Messages API: ``tool_use`` and ``tool_result`` content blocks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, final

from nrllm_core._messages import (
    ChatMessage,
    ProviderAnswer,
    ProviderError,
    Replay,
    Role,
    Stop,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)
from nrllm_core.providers._http import (
    HttpSettings,
    http_settings,
    post_json,
    response_id,
    token_count,
)
from nrllm_core.providers._settings import Settings

__all__ = ["AnthropicProvider", "anthropic_factory"]

DEFAULT_BASE_URL: Final = "https://api.anthropic.com"
DEFAULT_KEY_VARIABLE: Final = "ANTHROPIC_API_KEY"
DEFAULT_MAX_TOKENS: Final = 4096
API_VERSION: Final = "2023-06-01"
_STOPS: Final = {"max_tokens": Stop.LENGTH, "refusal": Stop.REFUSAL, "pause_turn": Stop.PAUSE}
# Blocks the portable message fields carry; any other kind means the turn is sent back verbatim.
_PORTABLE_BLOCKS: Final = frozenset({"text", "tool_use"})
REFUSED: Final = "The model refused to answer."


@final
class AnthropicProvider:
    """``POST {base_url}/v1/messages`` with tools."""

    __slots__ = ("_http", "_options", "model", "name")

    def __init__(
        self,
        *,
        name: str,
        model: str,
        http: HttpSettings,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self._http = http
        self._options = {"max_tokens": DEFAULT_MAX_TOKENS, **(options or {})}

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
    ) -> AnthropicProvider:
        """Build from a provider section; the key is read from ``api_key_env``."""
        read = Settings(name, settings)
        options = read.request_fields()
        if "max_completion_tokens" in options:
            raise read.error(
                '"max_completion_tokens" is OpenAI\'s; the Messages API takes max_tokens'
            )
        key = read.secret("api_key_env", environ, DEFAULT_KEY_VARIABLE)
        http = http_settings(
            read,
            path="/v1/messages",
            default_base_url=DEFAULT_BASE_URL,
            headers={"x-api-key": key, "anthropic-version": API_VERSION},
            secrets=(key,),
            sleep=sleep,
        )
        return cls(name=name, model=read.text("model"), http=http, options=options)

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, model={self.model!r})"

    @property
    def origin(self) -> str:
        """Who may be sent this adapter's replayed blocks: itself, with the same model."""
        return f"anthropic:{self.name}:{self.model}"

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

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> ProviderAnswer:
        body = self.request_body(messages, tools, tool_choice=tool_choice)
        return self._parse(post_json(self._http, body))

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
        stop = _STOPS.get(raw_stop, Stop.END)
        content = "\n\n".join(t for t in texts if t)
        if stop is Stop.REFUSAL:
            content = content or REFUSED
        verbatim = stop is Stop.PAUSE or any(b.get("type") not in _PORTABLE_BLOCKS for b in blocks)
        usage = data.get("usage")
        cache_read = token_count(usage, "cache_read_input_tokens")
        return ProviderAnswer(
            content=content,
            tool_calls=tuple(calls),
            usage=Usage(
                # Billed input: uncached, read from the cache and written to it.
                prompt_tokens=token_count(usage, "input_tokens")
                + cache_read
                + token_count(usage, "cache_creation_input_tokens"),
                completion_tokens=token_count(usage, "output_tokens"),
                cached_tokens=cache_read,
            ),
            finish_reason=raw_stop if isinstance(raw_stop, str) else None,
            thinking="\n\n".join(thoughts) or None,
            stop=stop,
            replay=Replay(origin=self.origin, blocks=blocks) if verbatim else None,
            response_id=response_id(data),
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
            # Thinking blocks go back exactly as received, signatures included.
            return [dict(b) for b in replay.blocks]
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


def anthropic_factory(
    name: str,
    settings: Mapping[str, Any],
    *,
    config_dir: Path | None,
    environ: Mapping[str, str],
) -> AnthropicProvider:
    """The ``anthropic`` kind."""
    return AnthropicProvider.from_settings(name, settings, environ=environ)

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
    Role,
    ToolCall,
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


@final
class AnthropicProvider:
    """``POST {base_url}/v1/messages`` with tools."""

    __slots__ = ("_http", "_temperature", "max_tokens", "model", "name")

    def __init__(
        self,
        *,
        name: str,
        model: str,
        http: HttpSettings,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        temperature: float | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.max_tokens = max_tokens
        self._http = http
        self._temperature = temperature

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
        key = read.secret("api_key_env", environ, DEFAULT_KEY_VARIABLE)
        http = http_settings(
            read,
            path="/v1/messages",
            default_base_url=DEFAULT_BASE_URL,
            headers={"x-api-key": key, "anthropic-version": API_VERSION},
            secrets=(key,),
            sleep=sleep,
        )
        return cls(
            name=name,
            model=read.text("model"),
            http=http,
            max_tokens=read.count("max_tokens", DEFAULT_MAX_TOKENS, minimum=1),
            temperature=read.optional_number("temperature"),
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(name={self.name!r}, model={self.model!r})"

    def request_body(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> dict[str, Any]:
        """The JSON request; system text goes top-level, and without tools no ``tools`` key."""
        system = "\n\n".join(m.content for m in messages if m.role is Role.SYSTEM)
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": _wire_messages(m for m in messages if m.role is not Role.SYSTEM),
        }
        if system:
            body["system"] = system
        if self._temperature is not None:
            body["temperature"] = self._temperature
        if tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in tools
            ]
        return body

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderAnswer:
        return self._parse(post_json(self._http, self.request_body(messages, tools)))

    def _parse(self, data: Any) -> ProviderAnswer:
        blocks = data.get("content") if isinstance(data, dict) else None
        if not isinstance(blocks, list):
            raise ProviderError(f'provider "{self.name}" answered without content blocks')
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                thoughts.append(block["thinking"])
            elif kind == "tool_use":
                call = ToolCall.parse(
                    {
                        "id": block.get("id"),
                        "name": block.get("name"),
                        "arguments": block.get("input"),
                    }
                )
                if call is not None:
                    calls.append(call)
        usage = data.get("usage")
        stop = data.get("stop_reason")
        return ProviderAnswer(
            content="".join(texts),
            tool_calls=tuple(calls),
            usage=Usage(
                prompt_tokens=token_count(usage, "input_tokens"),
                completion_tokens=token_count(usage, "output_tokens"),
            ),
            finish_reason=stop if isinstance(stop, str) else None,
            response_id=response_id(data),
            thinking="\n".join(thoughts) or None,
        )


def _wire_messages(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    # Consecutive results answer one assistant turn: they travel in one user message.
    results: list[dict[str, Any]] | None = None
    for message in messages:
        if message.role is Role.TOOL:
            if results is None:
                results = []
                out.append({"role": "user", "content": results})
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
                    "content": message.content,
                }
            )
            continue
        results = None
        if message.role is Role.ASSISTANT and message.tool_calls:
            content: list[dict[str, Any]] = []
            if message.content:
                content.append({"type": "text", "text": message.content})
            content.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in message.tool_calls
            )
            out.append({"role": "assistant", "content": content})
        else:
            out.append({"role": message.role.value, "content": message.content})
    return out


def anthropic_factory(
    name: str,
    settings: Mapping[str, Any],
    *,
    config_dir: Path | None,
    environ: Mapping[str, str],
) -> AnthropicProvider:
    """The ``anthropic`` kind."""
    return AnthropicProvider.from_settings(name, settings, environ=environ)

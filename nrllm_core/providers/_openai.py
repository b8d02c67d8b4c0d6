"""The OpenAI-compatible Chat Completions API (OpenAI, Ollama, vLLM, llama.cpp, Groq, ...)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, final

from nrllm_core import _json
from nrllm_core._messages import (
    ChatMessage,
    ProviderAnswer,
    ProviderError,
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

__all__ = ["OpenAIProvider", "openai_factory"]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
_STOPS: Final = {"length": Stop.LENGTH, "content_filter": Stop.REFUSAL}
CONTENT_FILTERED: Final = "The provider's content filter stopped the answer."


@final
class OpenAIProvider:
    """``POST {base_url}/chat/completions`` with function tools."""

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
        self._options = dict(options or {})

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
    ) -> OpenAIProvider:
        """Build from a provider section; ``api_key_env`` is optional (local servers need none)."""
        read = Settings(name, settings)
        headers: dict[str, str] = {}
        secrets: tuple[str, ...] = ()
        if read.optional_text("api_key_env") is not None:
            key = read.secret("api_key_env", environ)
            headers["authorization"] = f"Bearer {key}"
            secrets = (key,)
        options = read.request_fields()
        if "max_tokens" in options and "max_completion_tokens" in options:
            # The API refuses both; o-series models take only max_completion_tokens.
            raise read.error('set "max_tokens" or "max_completion_tokens", not both')
        http = http_settings(
            read,
            path="/chat/completions",
            default_base_url=DEFAULT_BASE_URL,
            headers=headers,
            secrets=secrets,
            sleep=sleep,
        )
        return cls(name=name, model=read.text("model"), http=http, options=options)

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, model={self.model!r})"

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON request; without tools there is no ``tools`` key at all."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [_wire_message(m) for m in messages],
            **self._options,
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in tools
            ]
            if tool_choice == "none":
                body["tool_choice"] = "none"
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
        choices = data.get("choices") if isinstance(data, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise ProviderError(f'provider "{self.name}" answered without a message')
        raw_calls = message.get("tool_calls")
        calls = (
            [ToolCall.parse(c, provider=self.name) for c in raw_calls]
            if isinstance(raw_calls, list)
            else []
        )
        thinking = message.get("reasoning_content", message.get("reasoning"))
        finish = choice.get("finish_reason") if isinstance(choice, dict) else None
        finish = finish if isinstance(finish, str) else None
        content = _str_or_empty(message.get("content"))
        refusal = _str_or_empty(message.get("refusal"))
        stop = Stop.REFUSAL if refusal else _STOPS.get(finish or "", Stop.END)
        if stop is Stop.REFUSAL:
            content = refusal or content or CONTENT_FILTERED
        usage = data.get("usage")
        prompt_details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
        completion_details = (
            usage.get("completion_tokens_details") if isinstance(usage, dict) else None
        )
        return ProviderAnswer(
            content=content,
            tool_calls=tuple(calls),
            usage=Usage(
                prompt_tokens=token_count(usage, "prompt_tokens"),
                completion_tokens=token_count(usage, "completion_tokens"),
                cached_tokens=token_count(prompt_details, "cached_tokens"),
                reasoning_tokens=token_count(completion_details, "reasoning_tokens"),
            ),
            finish_reason=finish,
            response_id=response_id(data),
            thinking=thinking if isinstance(thinking, str) and thinking else None,
            stop=stop,
        )


def _wire_message(message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role.value, "content": message.content}
    if message.role is Role.TOOL:
        out["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        # A turn of calls only has no text: null, not an empty string.
        out["content"] = message.content or None
        out["tool_calls"] = [
            {
                "id": c.id,
                "type": "function",
                "function": {
                    "name": c.name,
                    "arguments": c.raw_arguments
                    if c.raw_arguments is not None
                    else _json.dumps(dict(c.arguments)).decode(),
                },
            }
            for c in message.tool_calls
        ]
    return out


def _str_or_empty(value: object) -> str:
    return value if isinstance(value, str) else ""


def openai_factory(
    name: str,
    settings: Mapping[str, Any],
    *,
    config_dir: Path | None,
    environ: Mapping[str, str],
) -> OpenAIProvider:
    """The ``openai`` kind."""
    return OpenAIProvider.from_settings(name, settings, environ=environ)

"""The Converse API: ``content`` blocks (``text``, ``toolUse``, ``toolResult``,
``reasoningContent``), whole or streamed."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, final
from urllib.parse import quote

from nrllm_bedrock._auth import SigV4
from nrllm_bedrock._settings import DEFAULT_KEY_VARIABLE, bedrock_check, endpoint, own_settings
from nrllm_bedrock._stream import BLOCK_SEPARATOR, EventFrames, Events
from nrllm_core import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    Replay,
    Role,
    Stop,
    ToolCall,
    ToolSpec,
    Usage,
)
from nrllm_core.providers.http import HttpProvider, HttpSettings, Settings, token_count

if TYPE_CHECKING:
    from botocore.credentials import Credentials

__all__ = ["BedrockProvider"]

_STOPS: Final = {
    "max_tokens": Stop.LENGTH,
    "model_context_window_exceeded": Stop.LENGTH,
    "guardrail_intervened": Stop.REFUSAL,
    "content_filtered": Stop.REFUSAL,
}
REFUSED: Final = "The provider's guardrail or content filter stopped the answer."
# Blocks the portable message fields carry; an answer with any other kind (reasoning) goes
# back as its own blocks.
_PORTABLE_BLOCKS: Final = frozenset({"text", "toolUse"})


@final
class BedrockProvider(HttpProvider):
    """``POST {endpoint}/model/{modelId}/converse``, or ``/converse-stream`` to stream."""

    __slots__ = ("_inference", "_top")
    KIND: ClassVar = "bedrock"
    # ConverseStream takes Converse's request as it is, on a URL of its own.
    STREAM_FIELDS: ClassVar = {}
    FRAMING: ClassVar = EventFrames

    def __init__(
        self,
        *,
        name: str,
        model: str,
        http: HttpSettings,
        stream_http: HttpSettings,
        inference: Mapping[str, Any] | None = None,
        params: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(name=name, model=model, http=http, stream_http=stream_http)
        self._inference = dict(inference or {})
        self._top = dict(params or {})

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str],
        credentials: Credentials | None = None,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> BedrockProvider:
        """Build from a provider section. A Bedrock API key from ``api_key_env``
        (``AWS_BEARER_TOKEN_BEDROCK`` when not given, and then only when set) is sent as a
        bearer token; otherwise each request is signed (SigV4) with ``credentials``, or the
        standard AWS credential chain's, resolved on the first request."""
        read = Settings(name, settings)
        first = next(bedrock_check(name, settings, config_dir=None), None)
        if first is not None:
            key, problem = first
            raise read.error(f"{key} {problem}")
        fields = read.request_fields()
        inference: dict[str, Any] = dict(fields.pop("inferenceConfig", None) or {})
        if "max_tokens" in fields:
            inference["maxTokens"] = fields.pop("max_tokens")
        if "temperature" in fields:
            inference["temperature"] = fields.pop("temperature")
        model = read.text("model")
        url = endpoint(name, settings)
        if url is None:
            raise read.error("region must be set (or endpoint_url)")
        variable = settings.get("api_key_env")
        headers: dict[str, str] = {}
        secrets: tuple[str, ...] = ()
        sign = None
        if variable is not None or environ.get(DEFAULT_KEY_VARIABLE):
            key = read.secret("api_key_env", environ, DEFAULT_KEY_VARIABLE)
            headers, secrets = {"authorization": f"Bearer {key}"}, (key,)
        else:
            region = own_settings(name, settings).region
            if region is None:
                raise read.error("region must be set to sign requests (SigV4)")
            sign = SigV4(provider=name, region=region, credentials=credentials)
        timeout = read.seconds("timeout_seconds", 60.0)
        max_retries = read.count("max_retries", 2)
        # A model id may be an ARN: ':' and '/' are escaped as botocore escapes them.
        path = f"{url}/model/{quote(model, safe='')}"
        whole, streamed = (
            HttpSettings(
                provider=name,
                url=f"{path}/{operation}",
                headers=headers,
                secrets=secrets,
                timeout=timeout,
                max_retries=max_retries,
                sleep=sleep,
                asleep=asleep,
                sign=sign,
            )
            for operation in ("converse", "converse-stream")
        )
        return cls(
            name=name,
            model=model,
            http=whole,
            stream_http=streamed,
            inference=inference,
            params=fields,
        )

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: Literal["auto", "none"] = "auto",
    ) -> dict[str, Any]:
        """The JSON request; system text goes to ``system``.

        Converse has no tool choice "none", and refuses a history with ``toolUse`` or
        ``toolResult`` blocks unless ``toolConfig`` is there: with ``tool_choice="none"`` the
        tools stay declared and ``toolChoice`` is left out (auto). The loop executes no call
        of that answer; its text is the answer."""
        system = "\n\n".join(m.content for m in messages if m.role is Role.SYSTEM and m.content)
        body: dict[str, Any] = {
            "messages": self._wire_messages(m for m in messages if m.role is not Role.SYSTEM),
            **self._top,
        }
        if system:
            body["system"] = [{"text": system}]
        if self._inference:
            body["inferenceConfig"] = dict(self._inference)
        if tools:
            body["toolConfig"] = {
                "tools": [
                    {
                        "toolSpec": {
                            "name": t.name,
                            "description": t.description,
                            "inputSchema": {"json": dict(t.parameters)},
                        }
                    }
                    for t in tools
                ]
            }
        return body

    def _wire_messages(self, messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            role = "assistant" if message.role is Role.ASSISTANT else "user"
            blocks = self._blocks(message)
            if out and out[-1]["role"] == role:
                # The results of one turn's calls answer it in one message: roles alternate.
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})
        return out

    def _blocks(self, message: ChatMessage) -> list[dict[str, Any]]:
        if message.role is Role.TOOL:
            result: dict[str, Any] = {
                "toolUseId": message.tool_call_id,
                "content": [{"text": message.content}],
            }
            if message.is_error:
                result["status"] = "error"
            return [{"toolResult": result}]
        replay = message.replay
        if replay is not None and replay.origin == self.origin:
            # As received: a reasoning block goes back with its signature, unchanged.
            return [dict(block) for block in replay.blocks]
        blocks: list[dict[str, Any]] = []
        # Converse refuses a blank text block: an empty one is sent only when it is all.
        if message.content or not message.tool_calls:
            blocks.append({"text": message.content})
        blocks.extend(
            {"toolUse": {"toolUseId": c.id, "name": c.name, "input": dict(c.arguments)}}
            for c in message.tool_calls
        )
        return blocks

    def _assembler(self, on_delta: Callable[[Delta], None]) -> Events:
        return Events(on_delta)

    def _parse(self, data: Any) -> ProviderAnswer:
        output = data.get("output") if isinstance(data, dict) else None
        message = output.get("message") if isinstance(output, dict) else None
        blocks = message.get("content") if isinstance(message, dict) else None
        if not isinstance(blocks, list) or not all(isinstance(b, dict) for b in blocks):
            raise ProviderError(f'provider "{self.name}" answered without content blocks')
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCall] = []
        for block in blocks:
            if isinstance(block.get("text"), str):
                texts.append(block["text"])
            elif isinstance(block.get("toolUse"), dict):
                use = block["toolUse"]
                raw = {
                    "id": use.get("toolUseId"),
                    "name": use.get("name"),
                    "arguments": use.get("input"),
                }
                calls.append(ToolCall.parse(raw, provider=self.name))
            elif isinstance(block.get("reasoningContent"), dict):
                reasoning = block["reasoningContent"].get("reasoningText")
                if isinstance(reasoning, dict) and isinstance(reasoning.get("text"), str):
                    thoughts.append(reasoning["text"])
        raw_stop = data.get("stopReason")
        stop = _STOPS.get(raw_stop, Stop.END) if isinstance(raw_stop, str) else Stop.END
        content = BLOCK_SEPARATOR.join(t for t in texts if t)
        if stop is Stop.REFUSAL:
            content = content or REFUSED
        verbatim = not all(set(b) <= _PORTABLE_BLOCKS for b in blocks)
        usage = data.get("usage")
        cache_read = token_count(usage, "cacheReadInputTokens")
        cache_write = token_count(usage, "cacheWriteInputTokens")
        return ProviderAnswer(
            content=content,
            tool_calls=tuple(calls),
            usage=Usage(
                # Billed input: uncached, read from the cache and written to it.
                prompt_tokens=token_count(usage, "inputTokens") + cache_read + cache_write,
                completion_tokens=token_count(usage, "outputTokens"),
                cached_tokens=cache_read,
            ),
            finish_reason=raw_stop if isinstance(raw_stop, str) else None,
            thinking=BLOCK_SEPARATOR.join(t for t in thoughts if t) or None,
            stop=stop,
            replay=Replay(origin=self.origin, blocks=blocks) if verbatim else None,
            cache_creation_tokens=cache_write,
        )

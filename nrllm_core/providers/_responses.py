"""The OpenAI Responses API (``POST /v1/responses``): function tools, and reasoning items kept
encrypted in the transcript and sent back unchanged, so that no turn lives on the server."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
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
    response_id,
    response_model,
    token_count,
)
from nrllm_core.providers._openai import (
    CONTENT_FILTERED,
    endpoint_problems,
    gateway_http,
    openai_endpoint,
    str_or_empty,
)
from nrllm_core.providers._settings import Settings
from nrllm_core.providers._sse import ServerSentEvent

__all__ = [
    "ResponsesProvider",
    "request_problems",
    "responses_check",
    "responses_endpoint",
]

DEFAULT_BASE_URL: Final = "https://api.openai.com"
PATH: Final = "/v1/responses"
DEFAULT_KEY_VARIABLE: Final = "OPENAI_API_KEY"
# Without it a reasoning item comes back without its state when nothing is stored (store:
# false), and cannot be sent back.
ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"
# Items the portable message fields carry; a turn with any other (reasoning) goes back as
# its own items (see _request_item).
_PORTABLE_ITEMS: Final = frozenset({"message", "function_call"})
# Why an incomplete response stopped; any other reason also cut the answer off.
_INCOMPLETE_STOPS: Final = {"max_output_tokens": Stop.LENGTH, "content_filter": Stop.REFUSAL}
# What a response's status may be besides done, as a failure may quote it.
_NOT_DONE: Final = frozenset({"failed", "cancelled", "queued", "in_progress"})
# Fields that would keep the conversation on the server, which this kind never does: every
# request carries the whole transcript.
_SERVER_STATE: Final = frozenset({"previous_response_id", "conversation"})
# Fields the adapter writes from the transcript.
_WRITTEN: Final = frozenset({"input", "instructions"})
# Between two reasoning texts, in the thinking and in the deltas a viewer sees.
THOUGHT_SEPARATOR: Final = "\n\n"


def request_problems(fields: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(key, problem)`` for each request field of a section (its settings, and its params
    under ``params.``) that the Responses API refuses, or that would move the conversation's
    state to the server."""
    params = fields.get("params")
    params = params if isinstance(params, Mapping) else {}
    if fields.get("max_completion_tokens") is not None:
        yield (
            "max_completion_tokens",
            "is Chat Completions'; the Responses API takes max_output_tokens: set max_tokens",
        )
    if fields.get("max_tokens") is not None and "max_output_tokens" in params:
        yield "params.max_output_tokens", "is what max_tokens sends: set one of the two"
    for key in sorted(_WRITTEN & params.keys()):
        yield f"params.{key}", "is written by the adapter and cannot be set in params"
    for key in sorted(_SERVER_STATE & params.keys()):
        yield f"params.{key}", "keeps the conversation on the server; nrllm sends it whole"
    include = params.get("include")
    if include is not None and not (
        isinstance(include, list | tuple) and all(isinstance(i, str) for i in include)
    ):
        yield "params.include", "must be an array of strings"
    reasoning = params.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, Mapping):
        yield "params.reasoning", 'must be a table, such as {effort = "low"}'


def responses_check(
    name: str, settings: Mapping[str, Any], *, config_dir: Path | None
) -> Iterator[tuple[str, str]]:
    """The ``openai-responses`` kind's check: its endpoint, as the ``openai`` kind's, then
    its request fields (:func:`request_problems`)."""
    yield from endpoint_problems(name, settings, key_default=DEFAULT_KEY_VARIABLE)
    base_url = settings.get("base_url")
    if isinstance(base_url, str) and base_url.rstrip("/").endswith("/v1"):
        # An openai section's base_url ends in /v1; copied here, it would post to /v1/v1/.
        yield "base_url", f"must not end in /v1: the request goes to {{base_url}}{PATH}"
    yield from request_problems(settings)


def responses_endpoint(
    name: str, settings: Mapping[str, Any]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What :func:`~nrllm_core.providers._openai.openai_endpoint` says, for this kind."""
    return openai_endpoint(
        name,
        settings,
        path=PATH,
        default_base_url=DEFAULT_BASE_URL,
        key_default=DEFAULT_KEY_VARIABLE,
    )


@final
class ResponsesProvider(HttpProvider):
    """``POST {base_url}/v1/responses`` with function tools, storing nothing on the server."""

    __slots__ = ("_options",)
    KIND: ClassVar = "openai-responses"
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
        options = dict(options or {})
        if "max_tokens" in options:
            options["max_output_tokens"] = options.pop("max_tokens")
        # A section's own include replaces this one: a model that does not reason (gpt-4o,
        # gpt-4.1) refuses it ("Encrypted content is not supported with this model").
        if options.setdefault("include", [ENCRYPTED_REASONING]) == []:
            del options["include"]
        self._options = {"store": False, **options}

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> ResponsesProvider:
        """Build from a provider section: the ``openai`` kind's endpoint settings (the key of
        ``api_key_env``, ``OPENAI_API_KEY`` by default, ``headers`` and ``query``)."""
        read = Settings(name, settings)
        first = next(responses_check(name, settings, config_dir=None), None)
        if first is not None:
            key, problem = first
            raise read.error(f"{key} {problem}")
        http = gateway_http(
            read,
            settings,
            environ,
            path=PATH,
            default_base_url=DEFAULT_BASE_URL,
            key_default=DEFAULT_KEY_VARIABLE,
            sleep=sleep,
            asleep=asleep,
        )
        options = read.request_fields()
        return cls(name=name, model=read.text("model"), http=http, options=options)

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON request; system text goes into ``instructions``, and without tools there
        is no ``tools`` key."""
        system = "\n\n".join(m.content for m in messages if m.role is Role.SYSTEM and m.content)
        body: dict[str, Any] = {"model": self.model}
        if system:
            body["instructions"] = system
        body["input"] = [
            item for m in messages if m.role is not Role.SYSTEM for item in self._items(m)
        ]
        body.update(self._options)
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": t.name,
                    "description": t.description,
                    "parameters": dict(t.parameters),
                    # The API makes a function strict unless told not to, and strict refuses a
                    # schema with an optional property; the seam checks the arguments anyway.
                    "strict": False,
                }
                for t in tools
            ]
            if tool_choice == "none":
                body["tool_choice"] = "none"
        return body

    def _items(self, message: ChatMessage) -> list[dict[str, Any]]:
        if message.role is Role.USER:
            return [{"role": "user", "content": message.content}]
        if message.role is Role.TOOL:
            call_id = message.tool_call_id
            return [{"type": "function_call_output", "call_id": call_id, "output": message.content}]
        replay = message.replay
        if replay is not None and replay.origin == self.origin:
            return [_request_item(b) for b in replay.blocks if self._sendable(b)]
        items: list[dict[str, Any]] = []
        if message.content or not message.tool_calls:
            items.append({"role": "assistant", "content": message.content})
        items.extend(
            {
                "type": "function_call",
                "call_id": c.id,
                "name": c.name,
                "arguments": c.raw_arguments
                if c.raw_arguments is not None
                else _json.dumps(dict(c.arguments)).decode(),
            }
            for c in message.tool_calls
        )
        return items

    def _sendable(self, item: Mapping[str, Any]) -> bool:
        # Nothing stored, a reasoning item is its encrypted state: one that came without it
        # (a section that did not include it) would be looked up by its id, and not found.
        stateless = self._options.get("store") is False
        return not (
            stateless and item.get("type") == "reasoning" and not item.get("encrypted_content")
        )

    def _assembler(self, on_delta: Callable[[Delta], None]) -> _Events:
        return _Events(on_delta)

    def _parse(self, data: Any) -> ProviderAnswer:
        output = data.get("output") if isinstance(data, dict) else None
        if not isinstance(output, list) or not all(isinstance(i, dict) for i in output):
            raise ProviderError(f'provider "{self.name}" answered without output items')
        status = data.get("status")
        if status not in ("completed", "incomplete", None):
            # A failed response carries an error object, refused with its message already
            # (_http); a cancelled, queued or unfinished one has no answer at all.
            shown = status if status in _NOT_DONE else "unknown"
            raise ProviderError(f'provider "{self.name}" answered with a {shown} response')
        texts: list[str] = []
        refusals: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCall] = []
        for item in output:
            kind = item.get("type")
            if kind == "message":
                for part in _dicts(item.get("content")):
                    if part.get("type") == "output_text":
                        texts.append(str_or_empty(part.get("text")))
                    elif part.get("type") == "refusal":
                        refusals.append(str_or_empty(part.get("refusal")))
            elif kind == "function_call":
                raw = {
                    "id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": item.get("arguments"),
                }
                calls.append(ToolCall.parse(raw, provider=self.name))
            elif kind == "reasoning":
                thoughts.extend(_thoughts(item))
        details = data.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        stop = Stop.END
        if status == "incomplete":
            stop = _INCOMPLETE_STOPS.get(reason if isinstance(reason, str) else "", Stop.LENGTH)
        if refusals:
            stop = Stop.REFUSAL
        content = "".join(texts)
        if stop is Stop.REFUSAL:
            content = "".join(refusals) or content or CONTENT_FILTERED
        if status == "incomplete":
            finish = reason if isinstance(reason, str) else "incomplete"
        else:
            finish = status
        verbatim = not all(item.get("type") in _PORTABLE_ITEMS for item in output)
        usage = data.get("usage")
        input_details = usage.get("input_tokens_details") if isinstance(usage, dict) else None
        output_details = usage.get("output_tokens_details") if isinstance(usage, dict) else None
        return ProviderAnswer(
            content=content,
            tool_calls=tuple(calls),
            usage=Usage(
                prompt_tokens=token_count(usage, "input_tokens"),
                completion_tokens=token_count(usage, "output_tokens"),
                cached_tokens=token_count(input_details, "cached_tokens"),
                reasoning_tokens=token_count(output_details, "reasoning_tokens"),
            ),
            finish_reason=finish,
            thinking=THOUGHT_SEPARATOR.join(t for t in thoughts if t) or None,
            stop=stop,
            replay=Replay(origin=self.origin, blocks=output) if verbatim else None,
            response_id=response_id(data),
            response_model=response_model(data),
        )


@final
class _Events:
    """A response stream, assembled into the response the API sends unstreamed: the
    response of its final event (``response.completed``, or ``response.incomplete``), whose
    output, should a server leave it out, is made of the items of the
    ``response.output_item.done`` events, each whole (a reasoning item's encrypted content
    included), as the openai SDK makes it.

    The viewer sees ``response.output_text.delta`` as ``TextDelta`` and the reasoning's
    summary and text deltas as ``ThinkingDelta``, with ``THOUGHT_SEPARATOR`` before the text of
    a part that follows another one, so that the deltas join as the answer's thinking does."""

    __slots__ = ("_items", "_on_delta", "_response", "_shown", "_streamed")

    def __init__(self, on_delta: Callable[[Delta], None]) -> None:
        self._on_delta = on_delta
        self._response: dict[str, Any] | None = None
        self._items: dict[int, dict[str, Any]] = {}
        # The text the viewer was shown, held to the final response's (see ``answer``).
        self._streamed: list[str] = []
        # The reasoning part whose text a ThinkingDelta showed last.
        self._shown: tuple[object, ...] | None = None

    def feed(self, event: ServerSentEvent) -> bool:
        try:
            data = _json.loads(event.data)
        except ValueError:
            raise StreamBroken("a malformed event") from None
        kind = data.get("type") if isinstance(data, dict) else None
        if not isinstance(kind, str):
            raise StreamBroken("an event without a type")
        if kind == "error":
            error = data.get("error")
            raise StreamFailed(error if isinstance(error, dict) else _error_fields(data))
        if kind == "response.failed":
            response = data.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            raise StreamFailed(error or {"message": "the response failed"})
        if kind == "response.output_text.delta":
            self._text(data)
        elif kind in _THINKING_DELTAS:
            self._thinking(kind, data)
        elif kind == "response.output_item.done":
            index, item = data.get("output_index"), data.get("item")
            if type(index) is not int or not isinstance(item, dict):
                raise StreamBroken("a malformed response.output_item.done")
            self._items[index] = item
        elif kind in _FINAL_EVENTS or kind in _RESPONSE_EVENTS:
            response = data.get("response")
            if not isinstance(response, dict):
                raise StreamBroken(f"a {kind} without its response")
            self._response = response
            return kind in _FINAL_EVENTS
        # The argument deltas are joined in their item's done event; other events (parts
        # added and done, newer types) carry nothing the answer needs.
        return False

    def _text(self, data: dict[str, Any]) -> None:
        delta = data.get("delta")
        if isinstance(delta, str) and delta:
            self._streamed.append(delta)
            self._on_delta(TextDelta(text=delta))

    def _thinking(self, kind: str, data: dict[str, Any]) -> None:
        delta = data.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        part = (data.get("output_index"), kind, data.get(_THINKING_DELTAS[kind]))
        if self._shown is not None and self._shown != part:
            self._on_delta(ThinkingDelta(text=THOUGHT_SEPARATOR))
        self._shown = part
        self._on_delta(ThinkingDelta(text=delta))

    def may_end(self) -> bool:
        return False

    def answer(self) -> Any:
        if self._response is None:
            raise StreamBroken("the stream ended before its response")
        response = dict(self._response)
        if response.get("output") is None:
            response["output"] = [item for _, item in sorted(self._items.items())]
        # The answer is the final response's, the viewer saw the deltas: a server whose two
        # differ would show a person one text and record another.
        if self._streamed and "".join(self._streamed) != _output_text(response["output"]):
            raise StreamBroken("a streamed text that is not the answer's")
        return response


# Each reasoning delta's event, with the key of the part it adds to.
_THINKING_DELTAS: Final = {
    "response.reasoning_summary_text.delta": "summary_index",
    "response.reasoning_text.delta": "content_index",
}
_FINAL_EVENTS: Final = frozenset({"response.completed", "response.incomplete"})
_RESPONSE_EVENTS: Final = frozenset({"response.created", "response.in_progress"})


def _error_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    # The Responses API's error event holds the error's fields at its top level.
    return {key: data[key] for key in ("message", "code") if data.get(key) is not None}


def _thoughts(item: Mapping[str, Any]) -> Iterator[str]:
    """A reasoning item's readable text: its summary parts, then its reasoning text parts
    (which some servers, such as vLLM for gpt-oss, send)."""
    for part in _dicts(item.get("summary")):
        if part.get("type") == "summary_text":
            yield str_or_empty(part.get("text"))
    for part in _dicts(item.get("content")):
        if part.get("type") == "reasoning_text":
            yield str_or_empty(part.get("text"))


def _request_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """An output item as a request carries it back: unchanged, except for the keys an
    answer may send as null (``content``, ``status``, ``phase``, ``logprobs``), which a
    request does not take and whose absence means the same. A reasoning item's
    ``encrypted_content`` and summary go back as received."""
    return {key: _without_nulls(value) for key, value in item.items() if value is not None}


def _without_nulls(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_without_nulls(v) for v in value]
    return value


def _output_text(output: object) -> str:
    """The text of the message items' ``output_text`` parts, joined as they streamed."""
    return "".join(
        str_or_empty(part.get("text"))
        for item in _dicts(output)
        if item.get("type") == "message"
        for part in _dicts(item.get("content"))
        if part.get("type") == "output_text"
    )


def _dicts(value: object) -> Iterator[dict[str, Any]]:
    for item in value if isinstance(value, list) else ():
        if isinstance(item, dict):
            yield item

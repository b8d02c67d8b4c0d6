"""The OpenAI-compatible Chat Completions API (OpenAI, Ollama, vLLM, llama.cpp, Groq, ...)."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, Final, final

import attrs

from nrllm_core import _json
from nrllm_core._messages import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    Role,
    Stop,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolChoice,
    ToolSpec,
    Usage,
)
from nrllm_core._providers import ProviderConfigError
from nrllm_core.providers._api import HttpProvider
from nrllm_core.providers._http import (
    HttpSettings,
    StreamBroken,
    StreamFailed,
    http_settings,
    request_url,
    response_id,
    response_model,
    token_count,
)
from nrllm_core.providers._settings import Settings
from nrllm_core.providers._sse import ServerSentEvent

__all__ = [
    "OpenAIProvider",
    "OpenAISettings",
    "gateway_http",
    "openai_check",
    "openai_endpoint",
    "str_or_empty",
]

DEFAULT_BASE_URL: Final = "https://api.openai.com/v1"
PATH: Final = "/chat/completions"
# RFC 9110's token: what a header's name may be made of.
_HEADER_NAME: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
# What the HTTP client writes itself to frame the request and type its body.
_CLIENT_HEADERS: Final = frozenset(
    {"host", "content-length", "content-type", "transfer-encoding", "connection"}
)
# A variable's name as a shell writes it; a value pasted in its place (an "sk-..." key) is not one.
_VARIABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_STOPS: Final = {"length": Stop.LENGTH, "content_filter": Stop.REFUSAL}
CONTENT_FILTERED: Final = "The provider's content filter stopped the answer."
_REASONING_KEYS: Final = ("reasoning_content", "reasoning")


def _table(value: Mapping[str, str]) -> Mapping[str, str]:
    # A read-only copy, as core's params are: the settings cannot change after the load.
    return MappingProxyType(dict(value))


@final
@attrs.frozen(kw_only=True)
class OpenAISettings:
    """The ``openai`` kind's own keys, for a gateway in front of the API (Azure OpenAI,
    OpenRouter, a proxy): ``headers``, each header's name with the environment variable its
    value is read from (never a value: the file holds no secret), and ``query``, parameters
    added to every request's URL."""

    headers: Mapping[str, str] = attrs.field(factory=dict, converter=_table)
    query: Mapping[str, str] = attrs.field(factory=dict, converter=_table)


def endpoint_problems(
    name: str, settings: Mapping[str, Any], *, key_default: str | None = None
) -> Iterator[tuple[str, str]]:
    """``(key, problem)`` for what of an ``openai`` section's endpoint cannot be sent to: an
    empty ``base_url`` or ``api_key_env``, a header or a query parameter. A header's name is
    an RFC 9110 token, none of the headers the client writes (``host``, ``content-length``,
    ``content-type``, ``transfer-encoding``, ``connection``), nor ``authorization`` when
    ``api_key_env`` sends that (always, for a kind whose key has a ``key_default`` variable),
    and no two names differ only in case; its variable's name is letters, digits and ``_``."""
    own = _own(name, settings)
    keyed = settings.get("api_key_env") is not None or key_default is not None
    for key in ("base_url", "api_key_env"):
        if settings.get(key) == "":
            yield key, "must not be empty (leave it out instead)"
    seen: dict[str, str] = {}
    for header, variable in own.headers.items():
        folded = header.lower()
        if not _HEADER_NAME.fullmatch(header):
            yield (
                "headers",
                f"{header!r} is not a header name (letters, digits and !#$%&'*+-.^_`|~)",
            )
        elif folded in _CLIENT_HEADERS:
            yield f"headers.{header}", "is written by the HTTP client and cannot be set"
        elif folded == "authorization" and keyed:
            yield f"headers.{header}", "is sent with the key of api_key_env: set one of the two"
        elif folded in seen:
            yield f"headers.{header}", f"repeats {seen[folded]} (header names ignore case)"
        # The value is not quoted: it may be a key pasted where its variable's name belongs.
        if not _VARIABLE.fullmatch(variable):
            yield (
                f"headers.{header}",
                "must name an environment variable (letters, digits and _), not hold a value",
            )
        seen.setdefault(folded, header)
    if "" in own.query:
        yield "query", "a parameter's name must not be empty"


def openai_check(
    name: str, settings: Mapping[str, Any], *, config_dir: Path | None
) -> Iterator[tuple[str, str]]:
    """The ``openai`` kind's check: its endpoint (:func:`endpoint_problems`)."""
    return endpoint_problems(name, settings)


def openai_endpoint(
    name: str,
    settings: Mapping[str, Any],
    *,
    path: str = PATH,
    default_base_url: str = DEFAULT_BASE_URL,
    key_default: str | None = None,
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Where the section's requests go (the URL, query included) and the environment
    variables it reads, each with the header its value is sent as; no variable is read.
    ``path``, ``default_base_url`` and ``key_default`` are those of the kind (another API of
    OpenAI's, whose key is not optional, takes the same settings)."""
    read, own = Settings(name, settings), _own(name, settings)
    url = request_url(read, path=path, default_base_url=default_base_url, query=own.query)
    key = read.optional_text("api_key_env") or key_default
    variables = tuple((variable, header) for header, variable in own.headers.items())
    return url, ((key, "authorization"), *variables) if key is not None else variables


def gateway_http(
    read: Settings,
    settings: Mapping[str, Any],
    environ: Mapping[str, str],
    *,
    path: str,
    default_base_url: str,
    key_default: str | None,
    sleep: Callable[[float], None],
    asleep: Callable[[float], Awaitable[None]] | None,
) -> HttpSettings:
    """Where and with which headers a section of an OpenAI API's kind posts: its endpoint
    checked (:func:`endpoint_problems`), the key of ``api_key_env`` (or of ``key_default``;
    none without either) as a bearer token, and each of ``headers`` read from its variable."""
    own = _own(read.name, settings)
    first = next(endpoint_problems(read.name, settings, key_default=key_default), None)
    if first is not None:
        key, problem = first
        raise read.error(f"{key} {problem}")
    headers: dict[str, str] = {}
    secrets: list[str] = []
    if key_default is not None or read.optional_text("api_key_env") is not None:
        secrets.append(read.secret("api_key_env", environ, key_default))
        headers["authorization"] = f"Bearer {secrets[-1]}"
    for header, variable in own.headers.items():
        secrets.append(read.header_value(variable, environ, f"the {header} variable"))
        headers[header] = secrets[-1]
    return http_settings(
        read,
        path=path,
        default_base_url=default_base_url,
        headers=headers,
        secrets=tuple(secrets),
        sleep=sleep,
        asleep=asleep,
        query=own.query,
    )


def _own(name: str, settings: Mapping[str, Any]) -> OpenAISettings:
    """The section's own settings: those the load structured, or the defaults for a section
    built in code without them."""
    own = settings.get("options")
    if own is None:
        return OpenAISettings()
    if not isinstance(own, OpenAISettings):
        raise ProviderConfigError(f'provider "{name}": its options must be OpenAISettings')
    return own


@final
class OpenAIProvider(HttpProvider):
    """``POST {base_url}/chat/completions`` with function tools."""

    __slots__ = ("_options",)
    KIND: ClassVar = "openai"
    # Without include_usage a streamed answer reports no usage at all.
    STREAM_FIELDS: ClassVar = {"stream": True, "stream_options": {"include_usage": True}}

    def __init__(
        self,
        *,
        name: str,
        model: str,
        http: HttpSettings,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(name=name, model=model, http=http)
        self._options = dict(options or {})

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> OpenAIProvider:
        """Build from a provider section; ``api_key_env`` is optional (local servers need none),
        and so are the gateway's ``headers`` and ``query`` (:class:`OpenAISettings`)."""
        read = Settings(name, settings)
        http = gateway_http(
            read,
            settings,
            environ,
            path=PATH,
            default_base_url=DEFAULT_BASE_URL,
            key_default=None,
            sleep=sleep,
            asleep=asleep,
        )
        options = read.request_fields()
        if "max_tokens" in options and "max_completion_tokens" in options:
            # The API refuses both; o-series models take only max_completion_tokens.
            raise read.error('set "max_tokens" or "max_completion_tokens", not both')
        return cls(name=name, model=read.text("model"), http=http, options=options)

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

    def _assembler(self, on_delta: Callable[[Delta], None]) -> _Chunks:
        return _Chunks(on_delta)

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
        content = str_or_empty(message.get("content"))
        refusal = str_or_empty(message.get("refusal"))
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
            response_model=response_model(data),
            thinking=thinking if isinstance(thinking, str) and thinking else None,
            stop=stop,
        )


@final
class _Chunks:
    """A streamed chat completion, assembled into the answer the API sends unstreamed: the
    first choice's text, refusal, reasoning and tool-call fragments (joined by their index),
    its finish reason, the id, and the usage that the last chunk carries."""

    __slots__ = (
        "_calls",
        "_content",
        "_finish",
        "_id",
        "_model",
        "_on_delta",
        "_reasoning",
        "_refusal",
        "_seen",
        "_usage",
    )

    def __init__(self, on_delta: Callable[[Delta], None]) -> None:
        self._on_delta = on_delta
        self._id: str | None = None
        self._model: str | None = None
        self._seen = False
        self._content: list[str] = []
        self._refusal: list[str] = []
        self._reasoning: dict[str, list[str]] = {key: [] for key in _REASONING_KEYS}
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: object = None
        self._usage: object = None

    def feed(self, event: ServerSentEvent) -> bool:
        if event.data == "[DONE]":
            return True
        try:
            chunk = _json.loads(event.data)
        except ValueError:
            raise StreamBroken("a malformed event") from None
        if not isinstance(chunk, dict):
            raise StreamBroken("an event that is not an object")
        if chunk.get("error") is not None:
            raise StreamFailed(chunk["error"])
        # Azure opens with the prompt's filter results in a chunk whose id and model are empty.
        identifier, model = chunk.get("id"), chunk.get("model")
        if not self._id and isinstance(identifier, str):
            self._id = identifier
        if not self._model and isinstance(model, str):
            self._model = model
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)
        return False

    def _choice(self, choice: dict[str, Any]) -> None:
        self._seen = True
        if choice.get("finish_reason") is not None:
            self._finish = choice["finish_reason"]
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return
        text = delta.get("content")
        if isinstance(text, str) and text:
            self._content.append(text)
            self._on_delta(TextDelta(text=text))
        refusal = delta.get("refusal")
        if isinstance(refusal, str):
            self._refusal.append(refusal)
        for key in _REASONING_KEYS:
            thought = delta.get(key)
            if isinstance(thought, str) and thought:
                self._reasoning[key].append(thought)
                self._on_delta(ThinkingDelta(text=thought))
        fragments = delta.get("tool_calls")
        for fragment in fragments if isinstance(fragments, list) else ():
            self._call(fragment)

    def _call(self, fragment: object) -> None:
        if not isinstance(fragment, dict) or type(fragment.get("index")) is not int:
            raise StreamBroken("a tool call fragment without an index")
        call = self._calls.setdefault(fragment["index"], {"id": None, "name": [], "arguments": []})
        if call["id"] is None and isinstance(fragment.get("id"), str):
            call["id"] = fragment["id"]
        function = fragment.get("function")
        if isinstance(function, dict):
            for key in ("name", "arguments"):
                if isinstance(function.get(key), str):
                    call[key].append(function[key])

    def may_end(self) -> bool:
        # Some servers end the body without [DONE], as the SDK allows: the answer is whole once
        # the finish reason and the usage (always asked for, see STREAM_FIELDS) have come.
        return self._finish is not None and self._usage is not None

    def answer(self) -> Any:
        if not self._seen:
            return {"id": self._id, "model": self._model, "choices": []}
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._content) if self._content else None,
            "refusal": "".join(self._refusal) if self._refusal else None,
        }
        for key, parts in self._reasoning.items():
            if parts:
                message[key] = "".join(parts)
        if self._calls:
            message["tool_calls"] = [
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {
                        "name": "".join(call["name"]),
                        "arguments": "".join(call["arguments"]),
                    },
                }
                for _, call in sorted(self._calls.items())
            ]
        choice = {"index": 0, "message": message, "finish_reason": self._finish}
        return {"id": self._id, "model": self._model, "choices": [choice], "usage": self._usage}


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


def str_or_empty(value: object) -> str:
    """A string an answer gave, or "" for anything else (absent, null, another type)."""
    return value if isinstance(value, str) else ""

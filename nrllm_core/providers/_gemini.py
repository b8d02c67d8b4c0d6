"""The Gemini API (``generateContent``), or Vertex AI's: ``functionCall`` and
``functionResponse`` parts, model turns sent back with their thought signatures."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, final
from urllib.parse import quote

import attrs

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
from nrllm_core._providers import ProviderConfigError
from nrllm_core.providers._api import HttpProvider
from nrllm_core.providers._gemini_schema import gemini_tool_problem
from nrllm_core.providers._http import (
    HttpSettings,
    StreamBroken,
    StreamFailed,
    request_url,
    token_count,
)
from nrllm_core.providers._settings import Settings
from nrllm_core.providers._sse import ServerSentEvent

__all__ = ["GeminiProvider", "GeminiSettings", "gemini_check", "gemini_endpoint"]

DEFAULT_BASE_URL: Final = "https://generativelanguage.googleapis.com"
DEFAULT_KEY_VARIABLE: Final = "GEMINI_API_KEY"
DEFAULT_TOKEN_VARIABLE: Final = "GOOGLE_ACCESS_TOKEN"
_STOPS: Final = {
    "MAX_TOKENS": Stop.LENGTH,
    **dict.fromkeys(
        (
            "SAFETY",
            "RECITATION",
            "PROHIBITED_CONTENT",
            "BLOCKLIST",
            "SPII",
            "IMAGE_SAFETY",
            "IMAGE_PROHIBITED_CONTENT",
            "IMAGE_RECITATION",
            "MODEL_ARMOR",
        ),
        Stop.REFUSAL,
    ),
}
REFUSED: Final = "The provider's safety filter stopped the answer."
PROMPT_BLOCKED: Final = "The provider's safety filter blocked the prompt."
# Request fields that sit beside generationConfig; every other field of params goes into it.
_TOP_LEVEL: Final = frozenset({"safetySettings", "cachedContent", "labels"})
# The fields the adapter writes: params may not set them.
_WRITTEN: Final = frozenset({"contents", "systemInstruction", "toolConfig", "generationConfig"})
# generationConfig's fields (those the google-genai SDK's GenerationConfig has had since 1.30,
# the oldest the tests run against): the API refuses a request with an unknown one, so the
# check does first.
GENERATION_FIELDS: Final = frozenset(
    {
        "audioTimestamp",
        "candidateCount",
        "enableAffectiveDialog",
        "frequencyPenalty",
        "logprobs",
        "maxOutputTokens",
        "mediaResolution",
        "modelSelectionConfig",
        "presencePenalty",
        "responseJsonSchema",
        "responseLogprobs",
        "responseMimeType",
        "responseModalities",
        "responseSchema",
        "routingConfig",
        "seed",
        "speechConfig",
        "stopSequences",
        "temperature",
        "thinkingConfig",
        "topK",
        "topP",
    }
)
_LOCATION: Final = re.compile(r"[a-z]+(?:-[a-z0-9]+)*")
_THINKING_LEVELS: Final = frozenset({"minimal", "low", "medium", "high"})
# Parts the portable message fields carry (plain text and calls); a turn with any other part,
# or a signed one, goes back as its own parts.
_PORTABLE_PARTS: Final = frozenset({"text", "functionCall"})
# The start of an id made up for a call the API gave none: such an id is never sent back.
SYNTHETIC_ID: Final = "gemini-call-"


def _optional_text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@final
@attrs.frozen(kw_only=True)
class GeminiSettings:
    """The ``gemini`` kind's own keys, for Vertex AI: ``vertex_project`` and
    ``vertex_location`` select its endpoint, and ``access_token_env`` names the environment
    variable holding the OAuth access token sent as a bearer token (``GOOGLE_ACCESS_TOKEN``
    when not given)."""

    vertex_project: str | None = None
    vertex_location: str | None = None
    access_token_env: str | None = None


def _own(name: str, settings: Mapping[str, Any]) -> GeminiSettings:
    own = settings.get("options")
    if own is None:
        return GeminiSettings()
    if not isinstance(own, GeminiSettings):
        raise ProviderConfigError(f'provider "{name}": its options must be GeminiSettings')
    return own


def endpoint_problems(name: str, settings: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(key, problem)`` for what of a ``gemini`` section's endpoint cannot be sent to."""
    own = _own(name, settings)
    for key, value in (
        ("base_url", settings.get("base_url")),
        ("api_key_env", settings.get("api_key_env")),
        ("vertex_project", own.vertex_project),
        ("vertex_location", own.vertex_location),
        ("access_token_env", own.access_token_env),
    ):
        if value == "":
            yield key, "must not be empty (leave it out instead)"
    model = settings.get("model")
    if not isinstance(model, str) or not model:
        yield "model", "must be set: the model is part of the request's URL"
    vertex = own.vertex_project is not None
    if own.vertex_location and not _LOCATION.fullmatch(own.vertex_location):
        # It names the endpoint's host: nothing but a region's name may go there.
        yield "vertex_location", "must be a region's name (us-central1, europe-west4, global)"
    if vertex and own.vertex_location is None:
        yield "vertex_location", "must be set with vertex_project"
    if own.vertex_location is not None and not vertex:
        yield "vertex_location", "belongs to Vertex AI: set vertex_project too"
    if own.access_token_env is not None and not vertex:
        yield "access_token_env", "belongs to Vertex AI: set vertex_project too"
    if vertex and settings.get("api_key_env") is not None:
        yield "api_key_env", "is the Gemini API's key: Vertex AI takes access_token_env"


def _endpoint(
    name: str, settings: Mapping[str, Any], *, stream: bool
) -> tuple[str, str, str, str | None]:
    """The URL, the header the credential goes in, the variable it is read from, and the
    prefix of its value; no variable is read."""
    read, own = Settings(name, settings), _own(name, settings)
    model = quote(read.text("model"), safe="")
    method = "streamGenerateContent" if stream else "generateContent"
    query = {"alt": "sse"} if stream else None
    if own.vertex_project is None:
        path = f"/v1beta/models/{model}:{method}"
        url = request_url(read, path=path, default_base_url=DEFAULT_BASE_URL, query=query)
        return url, "x-goog-api-key", read.text("api_key_env", DEFAULT_KEY_VARIABLE), None
    project = quote(own.vertex_project, safe="")
    location = quote(own.vertex_location or "", safe="")
    path = f"/v1/projects/{project}/locations/{location}/publishers/google/models/{model}:{method}"
    # The global endpoint has no region in its host name.
    host = "aiplatform" if location == "global" else f"{location}-aiplatform"
    base = f"https://{host}.googleapis.com"
    url = request_url(read, path=path, default_base_url=base, query=query)
    variable = own.access_token_env or DEFAULT_TOKEN_VARIABLE
    return url, "authorization", variable, "Bearer "


def gemini_endpoint(
    name: str, settings: Mapping[str, Any]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Where the section's whole answers are asked for (streams go to
    ``:streamGenerateContent?alt=sse`` beside it) and the environment variable it reads, with
    the header its value is sent in; no variable is read."""
    url, header, variable, _ = _endpoint(name, settings, stream=False)
    return url, ((variable, header),)


def gemini_check(
    name: str, settings: Mapping[str, Any], *, config_dir: Path | None
) -> Iterator[tuple[str, str]]:
    """The ``gemini`` kind's check: its endpoint, then the request fields the API refuses."""
    yield from endpoint_problems(name, settings)
    params = settings.get("params")
    fields = {
        **(params if isinstance(params, Mapping) else {}),
        "temperature": settings.get("temperature"),
        "max_tokens": settings.get("max_tokens"),
        "max_completion_tokens": settings.get("max_completion_tokens"),
    }
    yield from request_problems({k: v for k, v in fields.items() if v is not None})


def request_problems(fields: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """``(key, problem)`` for each request field of a section (its settings and its params,
    merged) that the API refuses whatever the model."""
    for key in fields:
        if key in ("temperature", "max_tokens", "max_completion_tokens"):
            continue
        where = f"params.{key}"
        if key in _WRITTEN:
            yield where, "is written by the adapter (set generationConfig's fields in params)"
        elif key not in _TOP_LEVEL and key not in GENERATION_FIELDS:
            yield where, "is no field of a Gemini request nor of its generationConfig"
    if "max_completion_tokens" in fields:
        yield "max_completion_tokens", "is OpenAI's; Gemini takes max_tokens (maxOutputTokens)"
    if "max_tokens" in fields and "maxOutputTokens" in fields:
        yield "params.maxOutputTokens", "is what max_tokens sets: set one of the two"
    temperature = fields.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 2:
        yield "temperature", "must be between 0 and 2"
    if fields.get("candidateCount", 1) != 1:
        yield "params.candidateCount", "must be 1: a run reads one candidate"
    if "thinkingConfig" in fields:
        yield from _thinking_problems(fields["thinkingConfig"])


def _thinking_problems(thinking: object) -> Iterator[tuple[str, str]]:
    key = "params.thinkingConfig"
    if not isinstance(thinking, Mapping):
        yield key, "must be a table"
        return
    for field in sorted(set(thinking) - {"includeThoughts", "thinkingBudget", "thinkingLevel"}):
        yield f"{key}.{field}", "is no field of thinkingConfig"
    budget, level = thinking.get("thinkingBudget"), thinking.get("thinkingLevel")
    if budget is not None and (type(budget) is not int or budget < -1):
        yield f"{key}.thinkingBudget", "must be an integer: -1 (dynamic), 0 (off) or more"
    if level is not None and (not isinstance(level, str) or level.lower() not in _THINKING_LEVELS):
        yield f"{key}.thinkingLevel", "must be one of minimal, low, medium, high"
    if budget is not None and level is not None:
        yield key, "takes thinkingBudget or thinkingLevel, not both"
    if "includeThoughts" in thinking and type(thinking["includeThoughts"]) is not bool:
        yield f"{key}.includeThoughts", "must be true or false"


@final
class GeminiProvider(HttpProvider):
    """``POST .../models/{model}:generateContent`` (``:streamGenerateContent?alt=sse`` to
    stream) with function declarations."""

    __slots__ = ("_generation", "_top")
    KIND: ClassVar = "gemini"
    # The stream is asked for by its URL, not by a field.
    STREAM_FIELDS: ClassVar = {}

    def __init__(
        self,
        *,
        name: str,
        model: str,
        http: HttpSettings,
        stream_http: HttpSettings | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(name=name, model=model, http=http, stream_http=stream_http)
        fields = dict(options or {})
        if "max_tokens" in fields:
            fields["maxOutputTokens"] = fields.pop("max_tokens")
        self._top = {k: v for k, v in fields.items() if k in _TOP_LEVEL}
        self._generation = {k: v for k, v in fields.items() if k not in _TOP_LEVEL}

    @classmethod
    def from_settings(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        environ: Mapping[str, str],
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> GeminiProvider:
        """Build from a provider section: the key from ``api_key_env`` (``GEMINI_API_KEY``),
        or for Vertex AI the token from ``access_token_env`` (:class:`GeminiSettings`)."""
        read = Settings(name, settings)
        options = read.request_fields()
        first = next(gemini_check(name, settings, config_dir=None), None)
        if first is not None:
            key, problem = first
            raise read.error(f"{key} {problem}")
        url, header, variable, prefix = _endpoint(name, settings, stream=False)
        secret = read.header_value(variable, environ, "the credential variable")
        timeout = read.seconds("timeout_seconds", 60.0)
        max_retries = read.count("max_retries", 2)
        whole, streamed = (
            HttpSettings(
                provider=name,
                url=target,
                headers={header: (prefix or "") + secret},
                secrets=(secret,),
                timeout=timeout,
                max_retries=max_retries,
                sleep=sleep,
                asleep=asleep,
            )
            for target in (url, _endpoint(name, settings, stream=True)[0])
        )
        return cls(
            name=name, model=read.text("model"), http=whole, stream_http=streamed, options=options
        )

    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON request; system text goes to ``systemInstruction``. A tool whose name or
        schema Gemini cannot take raises :class:`ProviderError` before anything is sent."""
        system = "\n\n".join(m.content for m in messages if m.role is Role.SYSTEM and m.content)
        body: dict[str, Any] = {
            "contents": self._contents(m for m in messages if m.role is not Role.SYSTEM),
            **self._top,
        }
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        if tools:
            body["tools"] = [{"functionDeclarations": [self._declaration(t) for t in tools]}]
            if tool_choice == "none":
                body["toolConfig"] = {"functionCallingConfig": {"mode": "NONE"}}
        if self._generation:
            body["generationConfig"] = dict(self._generation)
        return body

    def _declaration(self, tool: ToolSpec) -> dict[str, Any]:
        # parametersJsonSchema, not the OpenAPI-subset "parameters": it takes JSON Schema as
        # the catalog holds it, so a schema Gemini can take is sent unchanged.
        # The gate withholds such a tool; one offered anyway (a provider built by hand) is
        # refused, never sent changed.
        problem = gemini_tool_problem(tool)
        if problem is not None:
            raise ProviderError(
                f'provider "{self.name}" cannot offer the tool "{tool.name}": {problem}'
            )
        return {
            "name": tool.name,
            "description": tool.description,
            "parametersJsonSchema": dict(tool.parameters),
        }

    def _contents(self, messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
        messages = list(messages)
        # A functionResponse names its function: each call's name by its id.
        names = {c.id: c.name for m in messages for c in m.tool_calls}
        out: list[dict[str, Any]] = []
        for message in messages:
            role = "model" if message.role is Role.ASSISTANT else "user"
            parts = self._parts(message, names)
            if out and out[-1]["role"] == role:
                # The results of one turn's calls answer it together, in one content.
                out[-1]["parts"].extend(parts)
            else:
                out.append({"role": role, "parts": parts})
        return out

    def _parts(self, message: ChatMessage, names: Mapping[str, str]) -> list[dict[str, Any]]:
        if message.role is Role.TOOL:
            call_id = message.tool_call_id or ""
            if call_id not in names:
                raise ProviderError(f'provider "{self.name}": a tool result answers no call')
            key = "error" if message.is_error else "output"
            response: dict[str, Any] = {"name": names[call_id], "response": {key: message.content}}
            if not call_id.startswith(SYNTHETIC_ID):
                response["id"] = call_id
            return [{"functionResponse": response}]
        replay = message.replay
        if replay is not None and replay.origin == self.origin:
            # Exactly as received: each thought signature stays on the part that carried it.
            return [dict(part) for part in replay.blocks]
        parts: list[dict[str, Any]] = []
        if message.content or not message.tool_calls:
            parts.append({"text": message.content})
        for call in message.tool_calls:
            function: dict[str, Any] = {"name": call.name, "args": dict(call.arguments)}
            if not call.id.startswith(SYNTHETIC_ID):
                function["id"] = call.id
            parts.append({"functionCall": function})
        return parts

    def _assembler(self, on_delta: Callable[[Delta], None]) -> _Chunks:
        return _Chunks(on_delta)

    def _parse(self, data: Any) -> ProviderAnswer:
        if not isinstance(data, dict):
            raise ProviderError(f'provider "{self.name}" answered with no response object')
        candidates = data.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        feedback = data.get("promptFeedback")
        blocked = (
            _optional_text(feedback.get("blockReason")) if isinstance(feedback, dict) else None
        )
        if not isinstance(candidate, dict):
            if blocked is None:
                raise ProviderError(f'provider "{self.name}" answered without a candidate')
            candidate = {"finishReason": blocked}
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        parts = parts if isinstance(parts, list) else []
        if not all(isinstance(p, dict) for p in parts):
            raise ProviderError(f'provider "{self.name}" answered with a part that is no object')
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[ToolCall] = []
        for part in parts:
            if isinstance(part.get("functionCall"), dict):
                calls.append(self._call(part["functionCall"], len(calls), data))
            elif isinstance(part.get("text"), str):
                (thoughts if part.get("thought") is True else texts).append(part["text"])
        finish = _optional_text(candidate.get("finishReason"))
        stop = Stop.REFUSAL if blocked is not None else _STOPS.get(finish or "", Stop.END)
        text = "".join(texts)
        if stop is Stop.REFUSAL:
            text = text or (PROMPT_BLOCKED if blocked is not None else REFUSED)
        verbatim = any(not _portable(part) for part in parts)
        usage = data.get("usageMetadata")
        thinking = token_count(usage, "thoughtsTokenCount")
        return ProviderAnswer(
            content=text,
            tool_calls=tuple(calls),
            usage=Usage(
                # promptTokenCount counts the cached content too; tool-use prompts are input.
                prompt_tokens=token_count(usage, "promptTokenCount")
                + token_count(usage, "toolUsePromptTokenCount"),
                # candidatesTokenCount leaves the thoughts out; they are billed as output.
                completion_tokens=token_count(usage, "candidatesTokenCount") + thinking,
                cached_tokens=token_count(usage, "cachedContentTokenCount"),
                reasoning_tokens=thinking,
            ),
            finish_reason=finish,
            thinking="".join(thoughts) or None,
            stop=stop,
            replay=Replay(origin=self.origin, blocks=parts) if verbatim else None,
            response_id=_optional_text(data.get("responseId")),
            response_model=_optional_text(data.get("modelVersion")),
        )

    def _call(self, function: Mapping[str, Any], ordinal: int, data: Mapping[str, Any]) -> ToolCall:
        call_id = _optional_text(function.get("id"))
        if call_id is None:
            # Stable for the same answer, distinct between its calls and between answers.
            seed = _json.dumps([data.get("responseId"), ordinal, dict(function)])
            call_id = f"{SYNTHETIC_ID}{ordinal}-{hashlib.sha256(seed).hexdigest()[:16]}"
        raw = {"id": call_id, "name": function.get("name"), "arguments": function.get("args")}
        return ToolCall.parse(raw, provider=self.name)


def _portable(part: Mapping[str, Any]) -> bool:
    return len(part) == 1 and next(iter(part)) in _PORTABLE_PARTS


@final
class _Chunks:
    """A ``streamGenerateContent`` stream, assembled into the response the API sends whole:
    the first candidate's parts (the text of consecutive text parts of one kind joined, as a
    whole answer has it; a part with a thought signature keeps it, and text after a signed
    part starts a part of its own), its finish reason, and the last usage, id and model.

    The stream has no final event: it is whole once a finish reason (or a blocked prompt) came.
    """

    __slots__ = ("_candidate", "_on_delta", "_parts", "_texts", "_top")

    def __init__(self, on_delta: Callable[[Delta], None]) -> None:
        self._on_delta = on_delta
        self._parts: list[dict[str, Any]] = []
        # A joined part's text in pieces, by the part's place, joined once in ``answer``:
        # appending to a string copies it, which made a long stream cost its length squared.
        self._texts: dict[int, list[str]] = {}
        self._candidate: dict[str, Any] | None = None
        self._top: dict[str, Any] = {}

    def feed(self, event: ServerSentEvent) -> bool:
        try:
            chunk = _json.loads(event.data)
        except ValueError:
            raise StreamBroken("a malformed event") from None
        if not isinstance(chunk, dict):
            raise StreamBroken("an event that is not an object")
        if chunk.get("error") is not None:
            raise StreamFailed(chunk["error"])
        for key in ("responseId", "modelVersion", "usageMetadata", "promptFeedback"):
            if chunk.get(key) is not None:
                self._top[key] = chunk[key]
        candidates = chunk.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if isinstance(candidate, dict):
            self._take(candidate)
        return False

    def _take(self, candidate: dict[str, Any]) -> None:
        kept = self._candidate = self._candidate or {}
        for key, value in candidate.items():
            if key != "content" and value is not None:
                kept[key] = value
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                raise StreamBroken("a part that is not an object")
            self._part(part)

    def _part(self, part: dict[str, Any]) -> None:
        text = part.get("text")
        if not isinstance(text, str) or not set(part) <= {"text", "thought", "thoughtSignature"}:
            self._parts.append(dict(part))
            return
        thought = part.get("thought") is True
        if text:
            self._on_delta(ThinkingDelta(text=text) if thought else TextDelta(text=text))
        last = self._parts[-1] if self._parts else None
        if (
            last is not None
            and isinstance(last.get("text"), str)
            and set(last) <= {"text", "thought", "thoughtSignature"}
            and (last.get("thought") is True) == thought
            and "thoughtSignature" not in last
        ):
            self._texts.setdefault(len(self._parts) - 1, [last["text"]]).append(text)
            if "thoughtSignature" in part:
                last["thoughtSignature"] = part["thoughtSignature"]
            return
        self._parts.append(dict(part))

    def may_end(self) -> bool:
        feedback = self._top.get("promptFeedback")
        blocked = isinstance(feedback, dict) and feedback.get("blockReason") is not None
        return blocked or (self._candidate or {}).get("finishReason") is not None

    def answer(self) -> Any:
        for place, pieces in self._texts.items():
            self._parts[place]["text"] = "".join(pieces)
        self._texts.clear()
        whole = dict(self._top)
        if self._candidate is not None:
            content = {"role": "model", "parts": self._parts}
            whole["candidates"] = [{**self._candidate, "content": content}]
        return whole

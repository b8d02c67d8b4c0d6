"""The ``gemini`` kind against a loopback server, with the google-genai SDK as the oracle.

Requests are validated with the SDK's own request types (its pydantic models forbid unknown
keys); every answer is built with the SDK's response models and served as their JSON, and what
the adapter makes of it is compared with what the SDK's client parses from the same bytes.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from google import genai
from google.genai import types as gt

from nrllm_core import (
    ChatMessage,
    DataClass,
    Effect,
    ProviderError,
    StreamRestarted,
    TextDelta,
    ThinkingDelta,
    Tool,
    ToolContext,
    ToolResult,
    ToolSpec,
)
from nrllm_core._host import Host
from nrllm_core._messages import Stop
from nrllm_core._providers import ProviderConfigError, ProviderRegistry
from nrllm_core.cli import cli
from nrllm_core.providers import GeminiProvider
from nrllm_core.providers._gemini import GENERATION_FIELDS, GeminiSettings, gemini_check
from nrllm_core.providers._gemini_schema import gemini_tool_problem
from nrllm_core.providers._kinds import register_core_kinds

KEY = "AIzaSy-test-0123456789abcdefghijklmn"
SIG_1 = "c2lnbmF0dXJlLW9uZQ=="  # base64, as the API sends thoughtSignature
SIG_2 = "c2lnbmF0dXJlLXR3bw=="
LOOKUP = ToolSpec(
    name="lookup",
    description="Find a page.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
HELLO = [ChatMessage.user("Grüße: find the home page")]
TOP_LEVEL = {
    "contents",
    "systemInstruction",
    "tools",
    "toolConfig",
    "generationConfig",
    "safetySettings",
    "cachedContent",
    "labels",
}


def ignore(delta: Any) -> None:
    pass


def gemini(server: Any, sleeps: Any = None, asleeps: Any = None, **settings: Any) -> GeminiProvider:
    section = {"model": "gemini-test", "base_url": server.url, **settings}
    return GeminiProvider.from_settings(
        "g",
        section,
        environ={"GEMINI_API_KEY": KEY},
        sleep=sleeps if sleeps is not None else (lambda seconds: None),
        asleep=asleeps,
    )


# -- SDK-built answers ---------------------------------------------------------------------------


def part(**fields: Any) -> gt.Part:
    return gt.Part(**fields)


def call(name: str, args: dict[str, Any], call_id: str | None = None, **extra: Any) -> gt.Part:
    return gt.Part(function_call=gt.FunctionCall(name=name, args=args, id=call_id), **extra)


def response(
    *parts: gt.Part,
    finish: str | None = "STOP",
    usage: gt.GenerateContentResponseUsageMetadata | None = None,
    blocked: str | None = None,
) -> gt.GenerateContentResponse:
    candidates = (
        None
        if blocked
        else [
            gt.Candidate(
                content=gt.Content(role="model", parts=list(parts)),
                finish_reason=finish,
                index=0,
            )
        ]
    )
    return gt.GenerateContentResponse(
        candidates=candidates,
        prompt_feedback=gt.GenerateContentResponsePromptFeedback(block_reason=blocked)
        if blocked
        else None,
        usage_metadata=usage
        or gt.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=2, total_token_count=12
        ),
        model_version="gemini-test-001",
        response_id="resp-1",
    )


def wire(answer: gt.GenerateContentResponse) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(answer.model_dump_json(by_alias=True, exclude_none=True))
    return data


def sse(*chunks: gt.GenerateContentResponse | dict[str, Any]) -> list[bytes]:
    return [
        b"data: "
        + json.dumps(c if isinstance(c, dict) else wire(c), ensure_ascii=False).encode()
        + b"\r\n\r\n"
        for c in chunks
    ]


def sdk_client(server: Any) -> genai.Client:
    return genai.Client(api_key=KEY, http_options=gt.HttpOptions(base_url=server.url))


# -- the request oracle --------------------------------------------------------------------------


def oracle(body: dict[str, Any]) -> None:
    """``body`` as the SDK's request types take it (unknown keys forbidden, thought signatures
    base64), with roles alternating and every call answered in order by name (and id)."""
    assert set(body) <= TOP_LEVEL
    contents = [gt.Content.model_validate_json(json.dumps(c)) for c in body["contents"]]
    if "systemInstruction" in body:
        gt.Content.model_validate_json(json.dumps(body["systemInstruction"]))
    for tool in body.get("tools", []):
        gt.Tool.model_validate_json(json.dumps(tool))
        for declaration in tool["functionDeclarations"]:
            gt.JSONSchema.model_validate(declaration["parametersJsonSchema"])
    if "toolConfig" in body:
        gt.ToolConfig.model_validate_json(json.dumps(body["toolConfig"]))
    if "generationConfig" in body:
        gt.GenerationConfig.model_validate_json(json.dumps(body["generationConfig"]))
    assert contents[0].role == "user"
    for index, content in enumerate(contents):
        assert content.parts, "an empty content"
        if index:
            assert content.role != contents[index - 1].role, f"same role twice at {index}"
        calls = [p.function_call for p in content.parts if p.function_call is not None]
        if calls:
            following = contents[index + 1].parts or []
            answers = [p.function_response for p in following if p.function_response]
            assert [a.name for a in answers] == [c.name for c in calls]
            assert [a.id for a in answers] == [c.id for c in calls]


# -- requests --------------------------------------------------------------------------------------


def test_a_transcript_with_parallel_calls_results_and_signatures_is_valid_for_the_sdk(server):
    model = gemini(server, temperature=0.3, max_tokens=500, params={"topK": 4})
    calling = wire(
        response(
            part(text="Ich denke nach.", thought=True),
            call("lookup", {"q": "Start"}, thought_signature=SIG_1),
            call("lookup", {"q": "Ende"}),
        )
    )
    server.answer(calling, wire(response(part(text="Gefunden.", thought_signature=SIG_2))))
    first = model.complete(
        [ChatMessage.system("Antworte kurz."), *HELLO], [LOOKUP], tool_choice="auto"
    )
    assert [c.arguments for c in first.tool_calls] == [{"q": "Start"}, {"q": "Ende"}]
    transcript = [
        ChatMessage.system("Antworte kurz."),
        *HELLO,
        ChatMessage.assistant(first.content, first.tool_calls, replay=first.replay),
        ChatMessage.tool_result(first.tool_calls[0].id, "Seite „Start“ ✓"),
        ChatMessage.tool_result(first.tool_calls[1].id, "no such page", is_error=True),
    ]
    model.complete(transcript, [LOOKUP])

    for body in server.bodies:
        oracle(body)
    sent = server.bodies[1]
    assert sent["systemInstruction"] == {"parts": [{"text": "Antworte kurz."}]}
    assert sent["generationConfig"] == {"temperature": 0.3, "maxOutputTokens": 500, "topK": 4}
    assert sent["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "lookup",
                    "description": "Find a page.",
                    "parametersJsonSchema": dict(LOOKUP.parameters),
                }
            ]
        }
    ]
    # The model turn goes back exactly as it came, its signature on the part that carried it.
    assert sent["contents"][1] == calling["candidates"][0]["content"]
    assert sent["contents"][1]["parts"][1]["thoughtSignature"] == SIG_1
    # Both results answer the turn together; the ids were made up, so none is sent.
    assert sent["contents"][2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "lookup", "response": {"output": "Seite „Start“ ✓"}}},
            {"functionResponse": {"name": "lookup", "response": {"error": "no such page"}}},
        ],
    }
    # Non-ASCII travels as UTF-8, not as escapes.
    assert "„Start“".encode() in server.raw[1]


def test_ids_the_api_gave_go_back_on_the_call_and_its_response(server):
    model = gemini(server)
    server.answer(wire(response(call("lookup", {"q": "a"}, call_id="fc-7"))), wire(response()))
    answer = model.complete(HELLO, [LOOKUP])
    assert answer.tool_calls[0].id == "fc-7"
    model.complete(
        [
            *HELLO,
            ChatMessage.assistant("", answer.tool_calls, replay=answer.replay),
            ChatMessage.tool_result("fc-7", "ok"),
        ],
        [LOOKUP],
    )
    oracle(server.bodies[1])
    assert server.bodies[1]["contents"][2]["parts"] == [
        {"functionResponse": {"name": "lookup", "id": "fc-7", "response": {"output": "ok"}}}
    ]


def test_a_turn_of_another_provider_is_sent_from_its_portable_fields(server):
    model = gemini(server)
    server.answer(wire(response()))
    from nrllm_core._messages import Replay, ToolCall

    turn = ChatMessage.assistant(
        "Suche.",
        [ToolCall(id="toolu_1", name="lookup", arguments={"q": "x"})],
        replay=Replay(origin="anthropic:c:m", blocks=[{"type": "thinking", "thinking": "t"}]),
    )
    model.complete([*HELLO, turn, ChatMessage.tool_result("toolu_1", "ok")], [LOOKUP])
    body = server.bodies[0]
    oracle(body)
    assert body["contents"][1]["parts"] == [
        {"text": "Suche."},
        {"functionCall": {"name": "lookup", "args": {"q": "x"}, "id": "toolu_1"}},
    ]


def test_the_last_round_asks_for_text_only_with_the_tools_still_declared(server):
    server.answer(wire(response(part(text="ok"))))
    gemini(server).complete(HELLO, [LOOKUP], tool_choice="none")
    oracle(server.bodies[0])
    assert server.bodies[0]["toolConfig"] == {"functionCallingConfig": {"mode": "NONE"}}


def test_the_key_goes_in_its_header_and_streams_go_to_their_own_url(server):
    server.answer(wire(response(part(text="ok"))))
    server.stream(*sse(response(part(text="ok"))))
    model = gemini(server)
    model.complete(HELLO, [])
    model.stream(HELLO, [], on_delta=ignore)
    assert server.targets == [
        "/v1beta/models/gemini-test:generateContent",
        "/v1beta/models/gemini-test:streamGenerateContent?alt=sse",
    ]
    assert [h["x-goog-api-key"] for h in server.headers] == [KEY, KEY]
    assert server.bodies[0] == server.bodies[1] == {"contents": [HELLO_WIRE]}


HELLO_WIRE = {"role": "user", "parts": [{"text": "Grüße: find the home page"}]}


def test_vertex_ai_takes_a_bearer_token_on_its_own_path(server):
    options = GeminiSettings(
        vertex_project="proj", vertex_location="europe-west4", access_token_env="TOKEN"
    )
    section = {"model": "gemini-test", "base_url": server.url, "options": options}
    model = GeminiProvider.from_settings("v", section, environ={"TOKEN": "ya29.token"})
    server.answer(wire(response(part(text="ok"))))
    assert model.complete(HELLO, []).content == "ok"
    assert server.targets == [
        "/v1/projects/proj/locations/europe-west4/publishers/google/models/gemini-test"
        ":generateContent"
    ]
    assert server.headers[0]["authorization"] == "Bearer ya29.token"
    assert "x-goog-api-key" not in server.headers[0]


def test_the_default_endpoints():
    from nrllm_core.providers._gemini import gemini_endpoint

    plain = {"model": "gemini-2.5-flash"}
    assert gemini_endpoint("g", plain) == (
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-flash:generateContent",
        (("GEMINI_API_KEY", "x-goog-api-key"),),
    )
    vertex = {**plain, "options": GeminiSettings(vertex_project="p", vertex_location="us-east1")}
    assert gemini_endpoint("g", vertex) == (
        "https://us-east1-aiplatform.googleapis.com/v1/projects/p/locations/us-east1"
        "/publishers/google/models/gemini-2.5-flash:generateContent",
        (("GOOGLE_ACCESS_TOKEN", "authorization"),),
    )
    worldwide = {**plain, "options": GeminiSettings(vertex_project="p", vertex_location="global")}
    assert gemini_endpoint("g", worldwide)[0].startswith(
        "https://aiplatform.googleapis.com/v1/projects/p/locations/global/"
    )


# -- schemas ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameters", "problem"),
    [
        (
            {"type": "object", "properties": {"a": {"allOf": [{"type": "string"}]}}},
            'the keyword "allOf" at #/properties/a',
        ),
        (
            {"type": "object", "properties": {"a": {"type": "string", "const": "x"}}},
            'the keyword "const" at #/properties/a',
        ),
        ({"type": "object", "not": {"required": ["a"]}}, 'the keyword "not" at #'),
        ({"type": "array", "items": {"type": "string"}}, '"type" must be "object"'),
    ],
)
def test_a_schema_gemini_cannot_take_is_refused_before_anything_is_sent(
    parameters, problem, server
):
    tool = ToolSpec(name="picky", description="", parameters=parameters)
    with pytest.raises(ProviderError, match="picky") as refused:
        gemini(server).complete(HELLO, [LOOKUP, tool])
    assert problem in str(refused.value)
    assert server.bodies == []


def test_every_accepted_keyword_is_one_the_sdks_json_schema_takes(server):
    schema = {
        "type": "object",
        "title": "T",
        "description": "d",
        "properties": {
            "n": {"type": ["integer", "null"], "minimum": 0, "maximum": 9, "default": 1},
            "s": {"type": "string", "enum": ["a", "b"], "minLength": 1, "pattern": "^a"},
            "l": {"type": "array", "items": {"$ref": "#/$defs/x"}, "minItems": 1},
            "u": {"anyOf": [{"type": "string"}, {"type": "number"}]},
        },
        "$defs": {"x": {"type": "string", "format": "date"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    server.answer(wire(response()))
    gemini(server).complete(HELLO, [ToolSpec(name="ok", description="", parameters=schema)])
    oracle(server.bodies[0])
    assert server.bodies[0]["tools"][0]["functionDeclarations"][0]["parametersJsonSchema"] == (
        schema
    )


def test_a_tool_name_gemini_refuses_is_refused(server):
    with pytest.raises(ProviderError, match='"9lives"'):
        gemini(server).complete(HELLO, [ToolSpec(name="9lives", description="", parameters={})])


# -- answers, compared with the SDK's parse -------------------------------------------------------


def sdk_whole(server: Any, answer: gt.GenerateContentResponse) -> gt.GenerateContentResponse:
    server.answer(wire(answer))
    # The client is held: collected, it closes its connections under the request.
    client = sdk_client(server)
    return client.models.generate_content(model="gemini-test", contents="hi")


def sdk_stream(server: Any, chunks: list[bytes]) -> list[gt.GenerateContentResponse]:
    server.stream(*chunks)
    client = sdk_client(server)
    return list(client.models.generate_content_stream(model="gemini-test", contents="hi"))


def agrees(ours: Any, sdk: list[gt.GenerateContentResponse]) -> None:
    """Our answer means what the SDK parsed: text, thoughts, calls, finish reason, usage."""
    parts = [p for r in sdk for c in (r.candidates or [])[:1] for p in (c.content.parts or [])]
    texts = "".join(p.text for p in parts if p.text and not p.thought)
    thoughts = "".join(p.text for p in parts if p.text and p.thought)
    calls = [p.function_call for p in parts if p.function_call]
    finishes = [c.finish_reason for r in sdk for c in (r.candidates or [])[:1] if c.finish_reason]
    usage = sdk[-1].usage_metadata
    assert usage is not None
    if ours.stop is Stop.END:
        assert ours.content == texts
    assert (ours.thinking or "") == thoughts
    assert [(c.name, dict(c.arguments)) for c in ours.tool_calls] == [
        (c.name, c.args) for c in calls
    ]
    assert ours.finish_reason == (finishes[-1].value if finishes else None)
    assert ours.usage.prompt_tokens == (usage.prompt_token_count or 0)
    thought_tokens = usage.thoughts_token_count or 0
    assert ours.usage.completion_tokens == (usage.candidates_token_count or 0) + thought_tokens
    assert ours.usage.reasoning_tokens == thought_tokens
    assert ours.usage.cached_tokens == (usage.cached_content_token_count or 0)


USAGE = gt.GenerateContentResponseUsageMetadata(
    prompt_token_count=120,
    candidates_token_count=30,
    thoughts_token_count=50,
    cached_content_token_count=100,
    total_token_count=200,
)
ANSWERS = {
    "text": response(part(text="Hallo "), part(text="Welt 👋"), usage=USAGE),
    "parallel": response(
        part(text="Ich prüfe.", thought=True),
        part(text="Einen Moment."),
        call("lookup", {"q": "a"}, thought_signature=SIG_1),
        call("lookup", {"q": "b"}),
        usage=USAGE,
    ),
    "max_tokens": response(part(text="Abgeschnit"), finish="MAX_TOKENS"),
    "safety": response(finish="SAFETY"),
}


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_whole_answer_means_what_the_sdk_parses(name, server):
    sdk = sdk_whole(server, ANSWERS[name])
    server.answer(wire(ANSWERS[name]))
    ours = gemini(server).complete(HELLO, [LOOKUP])
    agrees(ours, [sdk])
    assert (ours.response_id, ours.response_model) == ("resp-1", "gemini-test-001")
    expected = {"max_tokens": Stop.LENGTH, "safety": Stop.REFUSAL}.get(name, Stop.END)
    assert ours.stop is expected
    if name == "safety":
        assert ours.content == "The provider's safety filter stopped the answer."
    if name == "parallel":
        assert ours.thinking == "Ich prüfe."
        assert ours.replay is not None
        assert ours.replay.origin == "gemini:g:gemini-test"
        assert [dict(b) for b in ours.replay.blocks] == wire(ANSWERS[name])["candidates"][0][
            "content"
        ]["parts"]


def test_a_blocked_prompt_is_a_refusal(server):
    blocked = response(blocked="PROHIBITED_CONTENT")
    sdk = sdk_whole(server, blocked)
    assert sdk.prompt_feedback is not None
    server.answer(wire(blocked))
    ours = gemini(server).complete(HELLO, [])
    assert (ours.stop, ours.finish_reason) == (Stop.REFUSAL, "PROHIBITED_CONTENT")
    assert ours.content == "The provider's safety filter blocked the prompt."


def chunked(name: str) -> list[gt.GenerateContentResponse]:
    """``ANSWERS[name]`` as a stream sends it: text split, each call whole in one chunk, the
    finish reason and the full usage on the last chunk."""
    if name == "text":
        return [
            response(part(text="Hal"), finish=None),
            response(part(text="lo "), finish=None),
            response(part(text="Welt 👋"), usage=USAGE),
        ]
    if name == "parallel":
        return [
            response(part(text="Ich ", thought=True), finish=None),
            response(part(text="prüfe.", thought=True), finish=None),
            response(part(text="Einen Moment."), finish=None),
            response(call("lookup", {"q": "a"}, thought_signature=SIG_1), finish=None),
            response(call("lookup", {"q": "b"}), usage=USAGE),
        ]
    if name == "max_tokens":
        return [
            response(part(text="Abge"), finish=None),
            response(part(text="schnit"), finish="MAX_TOKENS"),
        ]
    return [response(part(text=""), finish=None), response(finish="SAFETY")]


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_stream_means_what_the_sdk_parses_and_what_the_whole_answer_does(name, server):
    chunks = sse(*chunked(name))
    sdk = sdk_stream(server, chunks)
    server.stream(*chunks)
    deltas: list[Any] = []
    ours = gemini(server).stream(HELLO, [LOOKUP], on_delta=deltas.append)
    agrees(ours, sdk)
    server.answer(wire(ANSWERS[name]))
    whole = gemini(server).complete(HELLO, [LOOKUP])
    assert ours == whole
    shown = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    thought = "".join(d.text for d in deltas if isinstance(d, ThinkingDelta))
    if ours.stop is not Stop.REFUSAL:
        assert shown == ours.content
    assert thought == (ours.thinking or "")


def test_a_signature_that_comes_after_its_text_stays_on_that_text(server):
    server.stream(
        *sse(
            response(part(text="Fertig"), finish=None),
            response(part(text="."), finish=None),
            response(part(text="", thought_signature=SIG_2)),
        )
    )
    answer = gemini(server).stream(HELLO, [], on_delta=ignore)
    assert answer.content == "Fertig."
    assert answer.replay is not None
    assert [dict(b) for b in answer.replay.blocks] == [
        {"text": "Fertig.", "thoughtSignature": SIG_2}
    ]


def test_a_cut_stream_is_asked_for_again_as_a_whole(server, sleeps):
    chunks = sse(*chunked("parallel"))
    # The SDK ends a cut stream quietly, with what came: no call, no finish reason. The adapter
    # takes that for what it is, an answer cut short, and asks for it again.
    partial = sdk_stream(server, chunks[:3])
    assert [c.candidates[0].finish_reason for c in partial if c.candidates] == [None] * 3
    server.stream(*chunks[:3], cut=True)
    server.stream(*chunks)
    deltas: list[Any] = []
    answer = gemini(server, sleeps).stream(HELLO, [LOOKUP], on_delta=deltas.append)
    assert [c.arguments for c in answer.tool_calls] == [{"q": "a"}, {"q": "b"}]
    assert sum(isinstance(d, StreamRestarted) for d in deltas) == 1
    assert len(sleeps) == 1


def test_a_stream_that_ends_without_a_finish_reason_is_broken(server, sleeps):
    for _ in range(3):
        server.stream(*sse(response(part(text="Hal"), finish=None)))
    with pytest.raises(ProviderError, match="ended before its final event"):
        gemini(server, sleeps).stream(HELLO, [], on_delta=ignore)


def test_an_error_mid_stream_fails_at_once(server, sleeps):
    error = {"error": {"code": 500, "message": "Internal error", "status": "INTERNAL"}}
    chunks = sse(response(part(text="Hal"), finish=None), error)
    with pytest.raises(genai.errors.APIError, match="Internal error"):
        sdk_stream(server, chunks)
    server.stream(*chunks)
    with pytest.raises(ProviderError, match="Internal error"):
        gemini(server, sleeps).stream(HELLO, [], on_delta=ignore)
    assert sleeps == []


# -- async ------------------------------------------------------------------------------------


class AsyncSleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.mark.anyio
async def test_acomplete_and_astream_answer_as_complete_and_stream_do(server, sleeps):
    asleeps = AsyncSleeps()
    model = gemini(server, sleeps, asleeps)
    server.answer(wire(ANSWERS["parallel"]))
    server.answer(wire(ANSWERS["parallel"]))
    whole = model.complete(HELLO, [LOOKUP])
    assert await model.acomplete(HELLO, [LOOKUP]) == whole
    chunks = sse(*chunked("parallel"))
    server.stream(*chunks[:2], cut=True)
    server.stream(*chunks)
    deltas: list[Any] = []
    assert await model.astream(HELLO, [LOOKUP], on_delta=deltas.append) == whole
    assert len(asleeps) == 1
    assert sleeps == []
    assert any(isinstance(d, StreamRestarted) for d in deltas)
    await model.aclose()


# -- retries ----------------------------------------------------------------------------------


def test_resource_exhausted_is_retried_after_the_retry_delay_it_gives(server, sleeps):
    exhausted = {
        "error": {
            "code": 429,
            "message": "Resource has been exhausted (e.g. check quota).",
            "status": "RESOURCE_EXHAUSTED",
            "details": [
                {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7.5s"}
            ],
        }
    }
    server.answer(exhausted, status=429)
    server.answer(wire(response(part(text="ok"))))
    assert gemini(server, sleeps).complete(HELLO, []).content == "ok"
    assert sleeps == [7.5]


def test_an_error_names_the_status_and_never_the_key(server, sleeps):
    denied = {"error": {"code": 400, "message": f"API key {KEY} not valid", "status": "X"}}
    server.answer(denied, status=400)
    with pytest.raises(ProviderError) as failed:
        gemini(server, sleeps).complete(HELLO, [])
    assert "HTTP 400" in str(failed.value)
    assert KEY not in str(failed.value)


# -- configuration ------------------------------------------------------------------------------


def problems(**section: Any) -> list[tuple[str, str]]:
    return list(gemini_check("g", {"model": "m", **section}, config_dir=None))


@pytest.mark.parametrize(
    ("section", "key"),
    [
        ({"max_completion_tokens": 9}, "max_completion_tokens"),
        ({"temperature": 2.5}, "temperature"),
        ({"params": {"top_p": 0.5}}, "params.top_p"),
        ({"params": {"generationConfig": {}}}, "params.generationConfig"),
        ({"params": {"candidateCount": 2}}, "params.candidateCount"),
        ({"max_tokens": 5, "params": {"maxOutputTokens": 5}}, "params.maxOutputTokens"),
        (
            {"params": {"thinkingConfig": {"thinkingBudget": -2}}},
            "params.thinkingConfig.thinkingBudget",
        ),
        (
            {"params": {"thinkingConfig": {"thinkingLevel": "max"}}},
            "params.thinkingConfig.thinkingLevel",
        ),
        (
            {"params": {"thinkingConfig": {"thinkingLevel": "low", "thinkingBudget": 10}}},
            "params.thinkingConfig",
        ),
        ({"options": GeminiSettings(vertex_project="p")}, "vertex_location"),
        (
            {"options": GeminiSettings(vertex_project="p", vertex_location="evil.example/")},
            "vertex_location",
        ),
        ({"model": None}, "model"),
        ({"options": GeminiSettings(access_token_env="T")}, "access_token_env"),
        (
            {
                "api_key_env": "K",
                "options": GeminiSettings(vertex_project="p", vertex_location="l"),
            },
            "api_key_env",
        ),
    ],
)
def test_the_check_refuses_what_the_api_would(section, key):
    assert key in [k for k, _ in problems(**section)]


def test_the_check_takes_what_the_api_takes():
    params = {
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
        "topP": 0.9,
    }
    assert problems(temperature=1.0, max_tokens=100, params=params) == []


def test_generation_fields_are_the_sdks():
    assert {f.alias for f in gt.GenerationConfig.model_fields.values()} >= GENERATION_FIELDS


def test_thinking_and_safety_params_go_where_the_api_reads_them(server):
    params = {
        "thinkingConfig": {"thinkingLevel": "low", "includeThoughts": True},
        "safetySettings": [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}],
    }
    server.answer(wire(response()))
    gemini(server, params=params).complete(HELLO, [])
    body = server.bodies[0]
    oracle(body)
    assert body["generationConfig"] == {"thinkingConfig": params["thinkingConfig"]}
    assert body["safetySettings"] == params["safetySettings"]


def test_a_missing_key_is_named_not_shown(server):
    with pytest.raises(ProviderConfigError, match="GEMINI_API_KEY is not set"):
        GeminiProvider.from_settings("g", {"model": "m"}, environ={})


def test_gemini_is_a_core_kind_with_its_check_and_settings():
    registry = ProviderRegistry()
    register_core_kinds(registry)
    kind = registry.kind("gemini")
    assert kind is not None
    assert (kind.check, kind.settings, kind.tools) == (
        gemini_check,
        GeminiSettings,
        gemini_tool_problem,
    )


# -- a governed run -------------------------------------------------------------------------------


class Lookup(Tool):
    name = "lookup"
    description = "Find a page by its title."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text(f"Seite „{arguments['q']}“ gefunden")


class WriteNote(Tool):
    name = "write_note"
    description = "Write a note."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    effect = Effect.NON_IDEMPOTENT_WRITE
    requires_approval = True
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"text": {"type": "string"}},
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult.text("noted")


@pytest.fixture
def make_host(tmp_path: Path, server: Any, tools_plugin: Any) -> Callable[..., Host]:
    def make(*tools: Tool, privacy: str = "full") -> Host:
        section = {
            "kind": "gemini",
            "model": "gemini-test",
            "trust_zone": "local",
            "base_url": server.url,
            "api_key_env": "TEST_GEMINI_KEY",
        }
        return Host.from_config(
            data={
                "providers": {"model": section},
                "defaults": {"provider": "model"},
                "actor": {"id": "alice"},
                "privacy": {"level": privacy},
            },
            plugins=[tools_plugin(*tools)],
            load_entry_points=False,
            data_dir=tmp_path / "home",
            environ={"TEST_GEMINI_KEY": KEY},
        )

    return make


CALLING = response(
    part(text="Ich notiere das.", thought=True),
    call("write_note", {"text": "Grüße"}, thought_signature=SIG_1),
)


def test_a_suspended_turn_goes_back_with_its_signatures_after_approval(make_host, server):
    note = WriteNote()
    server.answer(wire(CALLING), wire(response(part(text="Fertig.", thought_signature=SIG_2))))
    host = make_host(note)
    suspended = host.run("Schreib eine Notiz.")
    assert suspended.status == "awaiting_approval"

    outcome = host.approve(
        suspended.run_id, approve=True, approver="alice", turn_digest=suspended.turn_digest
    )

    assert (outcome.status, outcome.final_content) == ("completed", "Fertig.")
    assert note.calls == [{"text": "Grüße"}]
    for body in server.bodies:
        oracle(body)
    sent = server.bodies[1]["contents"]
    assert sent[1] == {"role": "model", "parts": wire(CALLING)["candidates"][0]["content"]["parts"]}
    assert sent[2]["parts"] == [
        {"functionResponse": {"name": "write_note", "response": {"output": "noted"}}}
    ]


class Picky(Tool):
    name = "picky"
    description = "Takes a value that must be a string and a date."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"a": {"allOf": [{"type": "string"}, {"format": "date"}]}},
    }

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text("never")


def test_a_tool_gemini_cannot_express_is_withheld_by_the_gate_with_its_keyword(make_host, server):
    server.answer(wire(response(part(text="Nur lookup."))))
    host = make_host(Lookup(), Picky())
    report = host.gate(provider="model", skill=None, actor=host.config.actor())
    outcome = host.run("Was kannst du?")
    detail = host.store.get_run(outcome.run_id)
    host.store.close()

    (picky,) = [d for d in report.decisions if d.tool == "picky"]
    assert (picky.offered, picky.reason) == (False, "schemaUnsupported")
    assert picky.detail == (
        'Gemini cannot take its parameter schema (the keyword "allOf" at #/properties/a)'
    )
    assert report.offered_names == ("lookup",)
    (declarations,) = server.bodies[0]["tools"]
    assert [d["name"] for d in declarations["functionDeclarations"]] == ["lookup"]
    assert outcome.final_content == "Nur lookup."
    assert detail is not None
    (gate,) = [s.payload for s in detail.steps if s.kind == "gate"]
    assert {"tool": "picky", "reason": "schemaUnsupported", "detail": picky.detail}.items() <= (
        next(d for d in gate["decisions"] if d["tool"] == "picky").items()
    )


@pytest.mark.parametrize("level", ["none", "metadata", "redacted", "full"])
def test_signatures_reach_the_audit_only_at_full(level, make_host, server):
    server.answer(
        wire(response(call("lookup", {"q": "a"}, thought_signature=SIG_1))),
        wire(response(part(text="Fertig."))),
    )
    host = make_host(Lookup(), privacy=level)
    run_id = host.run("Such.").run_id
    detail = host.store.get_run(run_id)
    assert detail is not None
    recorded = json.dumps([s.payload for s in detail.steps])
    assert (SIG_1 in recorded) is (level == "full")


def test_nrllm_never_imports_the_google_genai_sdk():
    root = Path(__file__).resolve().parents[2]
    sources = [*(root / "nrllm_core").rglob("*.py"), *(root / "plugins").glob("*/nrllm_*/**/*.py")]
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.startswith("google") for n in names), path
    code = (
        "import sys, nrllm_core.providers\n"
        "from nrllm_core.providers import GeminiProvider\n"
        "GeminiProvider.from_settings('g', {'model': 'm'}, environ={'GEMINI_API_KEY': 'k'})\n"
        "print(sorted(m for m in sys.modules if m.startswith('google')))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"


def test_config_check_prints_the_url_and_the_variables(tmp_path):
    config = tmp_path / "nrllm.toml"
    config.write_text(
        '[providers.flash]\nkind = "gemini"\nmodel = "gemini-2.5-flash"\n\n'
        '[providers.vertex]\nkind = "gemini"\nmodel = "gemini-2.5-pro"\n'
        'vertex_project = "acme"\nvertex_location = "europe-west4"\n'
        'access_token_env = "VERTEX_TOKEN"\n',
        encoding="utf-8",
    )

    result = CliRunner().invoke(cli, ["--config", str(config), "config", "check"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        "provider flash url: https://generativelanguage.googleapis.com/v1beta/models/"
        "gemini-2.5-flash:generateContent"
    ) in lines
    assert "provider flash environment: GEMINI_API_KEY (x-goog-api-key)" in lines
    assert (
        "provider vertex url: https://europe-west4-aiplatform.googleapis.com/v1/projects/acme/"
        "locations/europe-west4/publishers/google/models/gemini-2.5-pro:generateContent"
    ) in lines
    assert "provider vertex environment: VERTEX_TOKEN (authorization)" in lines


def test_config_check_refuses_what_the_api_would(tmp_path):
    config = tmp_path / "nrllm.toml"
    config.write_text(
        '[providers.flash]\nkind = "gemini"\nmodel = "m"\n'
        "[providers.flash.params]\nthinkingConfig = { thinkingBudget = -5 }\n",
        encoding="utf-8",
    )
    result = CliRunner().invoke(cli, ["--config", str(config), "config", "check"])
    assert result.exit_code != 0
    assert "thinkingBudget" in result.output


@pytest.mark.parametrize(
    ("headers", "delay", "expected"),
    [
        ({}, "7.5s", 7.5),
        ({}, "3600s", 30.0),
        ({"retry-after": "2"}, "7.5s", 2.0),
        ({}, "soon", None),
    ],
)
def test_retry_info_comes_after_the_headers_and_is_capped(headers, delay, expected):
    from nrllm_core.providers._retry import retry_after

    body = {
        "error": {
            "code": 429,
            "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}],
        }
    }
    assert retry_after(headers, json.dumps(body).encode()) == expected

"""The ``openai-responses`` kind against a loopback server, checked with the openai SDK.

Every answer is validated with the SDK's ``Response`` model and served as its dump; every
stream event with the SDK's ``ResponseStreamEvent``; every request with its
``ResponseCreateParams`` (strict, unknown keys forbidden). A streamed answer must equal the
same answer unstreamed, and what the SDK's own stream accumulator builds from the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from nrllm_core import ChatMessage, ProviderError, StreamRestarted, TextDelta, ThinkingDelta
from nrllm_core import ToolSpec as Spec
from nrllm_core._messages import ProviderAnswer, Replay, Stop
from nrllm_core._providers import acomplete, astream, stream
from nrllm_core.cli import _common, cli
from nrllm_core.providers import ResponsesProvider
from nrllm_core.providers._openai import OpenAISettings

KEY = "sk-proj-test0123456789abcdefghijklmnop"
ENCRYPTED = "gAAAAB-encrypted-reasoning-0123456789"
HELLO = [ChatMessage.system("Antworte kurz."), ChatMessage.user("Grüße: find the home page")]
LOOKUP = Spec(
    name="lookup",
    description="Find a page.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)
EVENT = TypeAdapter(ResponseStreamEvent)


def ignore(delta: Any) -> None:
    pass


class AsyncSleeps(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def provider(server: Any, sleeps: Any, asleeps: Any = None, **settings: Any) -> ResponsesProvider:
    section = {"model": "gpt-test", "base_url": server.url} | settings
    return ResponsesProvider.from_settings(
        "gpt", section, environ={"OPENAI_API_KEY": KEY}, sleep=sleeps, asleep=asleeps
    )


# -- SDK-built answers ---------------------------------------------------------------------------


def reasoning(item_id: str, *summary: str, encrypted: str | None = ENCRYPTED) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": item_id,
        "summary": [{"type": "summary_text", "text": s} for s in summary],
        "encrypted_content": encrypted,
    }


def message(text: str, *, item_id: str = "msg_1", refusal: bool = False) -> dict[str, Any]:
    part = (
        {"type": "refusal", "refusal": text}
        if refusal
        else {"type": "output_text", "text": text, "annotations": []}
    )
    return {
        "type": "message",
        "id": item_id,
        "role": "assistant",
        "status": "completed",
        "content": [part],
    }


def _thought(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": "completed",
    }


USAGE = {
    "input_tokens": 30,
    "input_tokens_details": {"cached_tokens": 12, "cache_write_tokens": 0},
    "output_tokens": 20,
    "output_tokens_details": {"reasoning_tokens": 9},
    "total_tokens": 50,
}


def response(
    *output: dict[str, Any], status: str = "completed", reason: str | None = None
) -> dict[str, Any]:
    """The whole answer, as the SDK's ``Response`` model dumps it (nulls included)."""
    data = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "gpt-test-2026",
        "status": status,
        "output": list(output),
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "incomplete_details": {"reason": reason} if reason else None,
        "usage": USAGE,
        "error": None,
    }
    dumped: dict[str, Any] = Response.model_validate(data).model_dump(mode="json")
    return dumped


def events_of(whole: dict[str, Any]) -> list[bytes]:
    """The stream the API sends for ``whole``: each item added, its text, arguments and
    reasoning summary in two deltas each, the item done, then the final event."""
    events: list[dict[str, Any]] = []
    start = {**whole, "status": "in_progress", "output": [], "usage": None}
    events.append({"type": "response.created", "response": start})
    events.append({"type": "response.in_progress", "response": start})
    for index, item in enumerate(whole["output"]):
        events.extend(_item_events(index, item))
    final = "response.incomplete" if whole["status"] == "incomplete" else "response.completed"
    events.append({"type": final, "response": whole})
    return [frame(e, n) for n, e in enumerate(events)]


def frame(event: dict[str, Any], number: int) -> bytes:
    """One event as the SDK's stream event type takes it, framed as the API sends it."""
    data = EVENT.validate_python({**event, "sequence_number": number}).model_dump_json()
    return raw_frame(json.loads(data))


def raw_frame(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


def _halves(text: str) -> list[str]:
    middle = len(text) // 2
    return [text[:middle], text[middle:]]


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    at = {"output_index": index, "item_id": item["id"]}
    kind = item["type"]
    if kind == "message":
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        }
        for part_index, part in enumerate(item["content"]):
            field = "text" if part["type"] == "output_text" else "refusal"
            empty = {**part, field: ""}
            where = {**at, "content_index": part_index}
            yield {"type": "response.content_part.added", **where, "part": empty}
            for piece in _halves(part[field]):
                if field == "text":
                    yield {
                        "type": "response.output_text.delta",
                        **where,
                        "delta": piece,
                        "logprobs": [],
                    }
                else:
                    yield {"type": "response.refusal.delta", **where, "delta": piece}
            if field == "text":
                yield {
                    "type": "response.output_text.done",
                    **where,
                    "text": part["text"],
                    "logprobs": [],
                }
            else:
                yield {"type": "response.refusal.done", **where, "refusal": part["refusal"]}
            yield {"type": "response.content_part.done", **where, "part": part}
    elif kind == "function_call":
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "arguments": "", "status": "in_progress"},
        }
        for piece in _halves(item["arguments"]):
            yield {"type": "response.function_call_arguments.delta", **at, "delta": piece}
        yield {
            "type": "response.function_call_arguments.done",
            **at,
            "arguments": item["arguments"],
        }
    else:
        yield {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "summary": [], "encrypted_content": None},
        }
        for summary_index, part in enumerate(item["summary"]):
            where = {**at, "summary_index": summary_index}
            empty = {"type": "summary_text", "text": ""}
            yield {"type": "response.reasoning_summary_part.added", **where, "part": empty}
            for piece in _halves(part["text"]):
                yield {"type": "response.reasoning_summary_text.delta", **where, "delta": piece}
            yield {"type": "response.reasoning_summary_text.done", **where, "text": part["text"]}
            yield {"type": "response.reasoning_summary_part.done", **where, "part": part}
        for content_index, part in enumerate(item.get("content") or ()):
            where = {**at, "content_index": content_index}
            for piece in _halves(part["text"]):
                yield {"type": "response.reasoning_text.delta", **where, "delta": piece}
            yield {"type": "response.reasoning_text.done", **where, "text": part["text"]}
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def sdk_final(server: Any, chunks: list[bytes]) -> tuple[dict[str, Any], str]:
    """What the openai SDK's stream accumulator builds from ``chunks``: the final response
    (of ``response.completed``, or of ``response.incomplete``) and the text of its deltas."""
    import openai

    server.stream(*chunks)
    client = openai.OpenAI(api_key=KEY, base_url=f"{server.url}/v1", max_retries=0)
    texts: list[str] = []
    final: Any = None
    with client, client.responses.stream(model="gpt-test", input="hi") as events:
        for event in events:
            if event.type == "response.output_text.delta":
                texts.append(event.delta)
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
    assert final is not None
    return _wire(final.model_dump(mode="json")), "".join(texts)


def sdk_response(server: Any, whole: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """What the openai SDK makes of ``whole``, answered unstreamed, and its ``output_text``."""
    import openai

    server.answer(whole)
    client = openai.OpenAI(api_key=KEY, base_url=f"{server.url}/v1", max_retries=0)
    with client:
        answer = client.responses.create(model="gpt-test", input="hi")
    return _wire(answer.model_dump(mode="json")), answer.output_text


def _wire(value: Any) -> Any:
    # The SDK adds what it parsed from the text and the arguments; the API sent neither.
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items() if k not in ("parsed", "parsed_arguments")}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value


# -- scenarios -----------------------------------------------------------------------------------

SCENARIOS: dict[str, dict[str, Any]] = {
    "reasoning and parallel calls": response(
        reasoning("rs_1", "Ich brauche Daten.", "Zwei Seiten."),
        message("Ich schaue nach. 🌸"),
        call("call_1", "lookup", '{"q": "home"}'),
        call("call_2", "lookup", '{"q": "about"}'),
    ),
    "text": response(message("Hallo Welt 👋")),
    # As vLLM serves gpt-oss: the reasoning as text parts, in two items, no encrypted state.
    "reasoning text": response(
        {
            **reasoning("rs_1", encrypted=None),
            "content": [_thought("Erst dies."), _thought("Dann das.")],
        },
        {**reasoning("rs_2", encrypted=None), "content": [_thought("Fertig.")]},
        message("Gut."),
    ),
    "refusal": response(message("Dabei helfe ich nicht.", refusal=True)),
    "truncated": response(
        reasoning("rs_1", "Lang."),
        message("Die Antwort ist"),
        status="incomplete",
        reason="max_output_tokens",
    ),
    "filtered": response(message("Die"), status="incomplete", reason="content_filter"),
}
SCENARIO = pytest.mark.parametrize("scenario", sorted(SCENARIOS))


@SCENARIO
def test_a_streamed_answer_is_the_whole_answer_and_what_the_sdk_assembles(
    scenario, server, sleeps, responses_oracle, responses_stream_oracle
):
    whole = SCENARIOS[scenario]
    chunks = events_of(whole)
    server.answer(whole)
    server.stream(*chunks)
    model = provider(server, sleeps)
    deltas: list[Any] = []

    unstreamed = model.complete(HELLO, [LOOKUP])
    streamed = model.stream(HELLO, [LOOKUP], on_delta=deltas.append)
    sdk, sdk_text = sdk_final(server, chunks)
    sdk_whole, sdk_output_text = sdk_response(server, whole)

    assert streamed == unstreamed
    # The SDK's dump adds null keys of its own (``async``): nulls mean nothing on the wire.
    assert meaning(model._parse(sdk)) == meaning(streamed)
    assert meaning(model._parse(sdk_whole)) == meaning(unstreamed)
    responses_oracle(server.bodies[0])
    responses_stream_oracle(server.bodies[1])
    assert server.bodies[1] == {**server.bodies[0], "stream": True}
    text = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    thinking = "".join(d.text for d in deltas if isinstance(d, ThinkingDelta))
    assert text == sdk_text
    if streamed.stop is not Stop.REFUSAL:
        assert text == streamed.content == sdk_output_text
    assert thinking == (streamed.thinking or "")
    if scenario == "reasoning text":
        assert thinking == "Erst dies.\n\nDann das.\n\nFertig."
    assert streamed.response_id == "resp_1"
    assert streamed.response_model == "gpt-test-2026"


def test_an_answer_with_reasoning_and_parallel_calls_means_what_the_api_says(server, sleeps):
    server.answer(SCENARIOS["reasoning and parallel calls"])

    answer = provider(server, sleeps).complete(HELLO, [LOOKUP])

    assert answer.content == "Ich schaue nach. 🌸"
    assert [(c.id, c.name, dict(c.arguments)) for c in answer.tool_calls] == [
        ("call_1", "lookup", {"q": "home"}),
        ("call_2", "lookup", {"q": "about"}),
    ]
    assert answer.thinking == "Ich brauche Daten.\n\nZwei Seiten."
    assert (answer.stop, answer.finish_reason) == (Stop.END, "completed")
    assert answer.usage.to_dict() == {
        "prompt_tokens": 30,
        "completion_tokens": 20,
        "cached_tokens": 12,
        "reasoning_tokens": 9,
    }
    assert answer.replay is not None
    assert answer.replay.origin == "openai-responses:gpt:gpt-test"
    assert [b["type"] for b in answer.replay.blocks] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert answer.replay.blocks[0]["encrypted_content"] == ENCRYPTED


@pytest.mark.parametrize(
    ("scenario", "stop", "finish", "content"),
    [
        ("text", Stop.END, "completed", "Hallo Welt 👋"),
        ("refusal", Stop.REFUSAL, "completed", "Dabei helfe ich nicht."),
        ("truncated", Stop.LENGTH, "max_output_tokens", "Die Antwort ist"),
        ("filtered", Stop.REFUSAL, "content_filter", "Die"),
    ],
)
def test_stops_refusals_and_truncation(scenario, stop, finish, content, server, sleeps):
    server.answer(SCENARIOS[scenario])

    answer = provider(server, sleeps).complete(HELLO, [])

    assert (answer.stop, answer.finish_reason, answer.content) == (stop, finish, content)
    # Only a turn with reasoning needs its own items back.
    assert (answer.replay is not None) is (scenario == "truncated")


def test_a_call_whose_arguments_are_no_json_object_is_invalid_and_goes_back_as_written(
    server, sleeps, responses_oracle
):
    server.answer(response(call("call_1", "lookup", '{"q": "home"')))
    model = provider(server, sleeps)

    answer = model.complete(HELLO, [LOOKUP])

    (bad,) = answer.tool_calls
    assert (bad.arguments_valid, dict(bad.arguments)) == (False, {})
    transcript = [
        *HELLO,
        ChatMessage.assistant("", answer.tool_calls),
        ChatMessage.tool_result("call_1", "Error: bad"),
    ]
    body = model.request_body(transcript, [LOOKUP])
    responses_oracle(body)
    assert body["input"][1]["arguments"] == '{"q": "home"'


def test_a_call_without_a_call_id_fails_the_answer(server, sleeps):
    server.answer(response({**call("x", "lookup", "{}"), "call_id": ""}))

    with pytest.raises(ProviderError, match="empty or missing id"):
        provider(server, sleeps).complete(HELLO, [LOOKUP])


def test_a_failed_response_is_a_provider_error_with_the_redacted_message(server, sleeps):
    failed = {
        **response(),
        "status": "failed",
        "error": {"code": "server_error", "message": f"boom with {KEY}"},
    }
    server.answer(failed)

    with pytest.raises(ProviderError) as info:
        provider(server, sleeps).complete(HELLO, [])

    assert "boom with ***" in str(info.value)
    assert "(code server_error)" in str(info.value)
    assert KEY not in str(info.value)


def test_a_response_not_done_is_a_provider_error(server, sleeps):
    server.answer({**response(), "status": "queued"})

    with pytest.raises(ProviderError, match="answered with a queued response"):
        provider(server, sleeps).complete(HELLO, [])


def without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def meaning(answer: ProviderAnswer) -> ProviderAnswer:
    """The answer with its replayed items as a request sends them back: without nulls."""
    if answer.replay is None:
        return answer
    blocks = [without_nulls(dict(b)) for b in answer.replay.blocks]
    return attrs.evolve(answer, replay=Replay(origin=answer.replay.origin, blocks=blocks))


# -- requests ------------------------------------------------------------------------------------


def test_the_request_carries_the_transcript_as_items_and_replays_reasoning_to_itself_only(
    server, sleeps, responses_oracle
):
    model = provider(
        server,
        sleeps,
        temperature=0.2,
        max_tokens=500,
        params={"reasoning": {"effort": "low", "summary": "auto"}},
    )
    server.answer(SCENARIOS["reasoning and parallel calls"])
    first = model.complete(HELLO, [LOOKUP])
    transcript = [
        *HELLO,
        ChatMessage.assistant(first.content, first.tool_calls, replay=first.replay),
        ChatMessage.tool_result("call_1", "Start ✓"),
        ChatMessage.tool_result("call_2", "Error: not found", is_error=True),
        ChatMessage.assistant("Gefunden."),
        ChatMessage.user("Danke"),
    ]

    body = model.request_body(transcript, [LOOKUP])

    responses_oracle(body)
    assert body["instructions"] == "Antworte kurz."
    assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])
    assert (body["temperature"], body["max_output_tokens"]) == (0.2, 500)
    assert body["reasoning"] == {"effort": "low", "summary": "auto"}
    assert "max_tokens" not in body
    assert "previous_response_id" not in body
    assert body["tools"] == [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find a page.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            "strict": False,
        }
    ]
    assert "tool_choice" not in body
    replayed = [without_nulls(item) for item in SCENARIOS["reasoning and parallel calls"]["output"]]
    assert body["input"] == [
        {"role": "user", "content": "Grüße: find the home page"},
        *replayed,
        {"type": "function_call_output", "call_id": "call_1", "output": "Start ✓"},
        {"type": "function_call_output", "call_id": "call_2", "output": "Error: not found"},
        {"role": "assistant", "content": "Gefunden."},
        {"role": "user", "content": "Danke"},
    ]
    # The reasoning goes back exactly as it came: the encrypted state and the summary.
    assert replayed[0] == {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [
            {"type": "summary_text", "text": "Ich brauche Daten."},
            {"type": "summary_text", "text": "Zwei Seiten."},
        ],
        "encrypted_content": ENCRYPTED,
    }

    other = provider(server, sleeps, model="gpt-other").request_body(transcript, [LOOKUP])
    responses_oracle(other)
    assert ENCRYPTED not in repr(other)
    assert other["input"][1:4] == [
        {"role": "assistant", "content": "Ich schaue nach. 🌸"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "lookup",
            "arguments": '{"q":"home"}',
        },
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "lookup",
            "arguments": '{"q":"about"}',
        },
    ]


def test_an_empty_include_asks_for_no_encrypted_reasoning_and_unencrypted_items_stay_home(
    server, sleeps, responses_oracle
):
    # A model that does not reason refuses the include; a reasoning one then sends its
    # reasoning items without their state, which a stateless request cannot send back.
    model = provider(server, sleeps, params={"include": []})
    whole = response(reasoning("rs_1", "Hm.", encrypted=None), call("call_1", "lookup", "{}"))
    server.answer(whole)
    answer = model.complete(HELLO, [LOOKUP])
    transcript = [
        *HELLO,
        ChatMessage.assistant(answer.content, answer.tool_calls, replay=answer.replay),
        ChatMessage.tool_result("call_1", "found"),
    ]

    body = model.request_body(transcript, [LOOKUP])

    responses_oracle(server.bodies[0])
    responses_oracle(body)
    assert "include" not in server.bodies[0]
    assert [item.get("type") for item in body["input"]] == [
        None,
        "function_call",
        "function_call_output",
    ]
    stored = provider(server, sleeps, params={"include": [], "store": True})
    assert stored.request_body(transcript, [LOOKUP])["input"][1]["type"] == "reasoning"


def test_tool_choice_none_keeps_the_tools_and_asks_for_text(server, sleeps, responses_oracle):
    body = provider(server, sleeps).request_body(HELLO, [LOOKUP], tool_choice="none")

    responses_oracle(body)
    assert body["tool_choice"] == "none"
    assert [t["name"] for t in body["tools"]] == ["lookup"]
    assert "tools" not in provider(server, sleeps).request_body(HELLO, [])


def test_the_request_goes_to_v1_responses_with_the_bearer_key_headers_and_query(server, sleeps):
    server.answer(SCENARIOS["text"])
    model = ResponsesProvider.from_settings(
        "gpt",
        {
            "model": "gpt-test",
            "base_url": f"{server.url}/",
            "options": OpenAISettings(
                headers={"OpenAI-Project": "PROJECT"}, query={"api-version": "preview"}
            ),
            "params": {"include": ["message.output_text.logprobs"], "store": True},
        },
        environ={"OPENAI_API_KEY": KEY, "PROJECT": "proj_1"},
        sleep=sleeps,
    )

    model.complete(HELLO, [])

    assert server.targets == ["/v1/responses?api-version=preview"]
    assert server.headers[0]["authorization"] == f"Bearer {KEY}"
    assert server.headers[0]["openai-project"] == "proj_1"
    body = server.bodies[0]
    assert body["store"] is True
    # The section's own include replaces the adapter's.
    assert body["include"] == ["message.output_text.logprobs"]
    assert KEY not in repr(model)


# -- streams that go wrong -----------------------------------------------------------------------


def test_a_cut_stream_is_asked_for_again_as_a_whole(server, sleeps):
    chunks = events_of(SCENARIOS["reasoning and parallel calls"])
    server.stream(*chunks[:9], cut=True)
    server.stream(*chunks)
    deltas: list[Any] = []

    answer = provider(server, sleeps).stream(HELLO, [LOOKUP], on_delta=deltas.append)

    assert len(answer.tool_calls) == 2
    assert sum(isinstance(d, StreamRestarted) for d in deltas) == 1
    assert len(server.bodies) == 2


def test_a_stream_cut_on_every_attempt_fails_after_max_retries(server, sleeps):
    chunks = events_of(SCENARIOS["text"])
    for _ in range(3):
        server.stream(*chunks[:-1])

    with pytest.raises(ProviderError, match=r"after 3 attempts"):
        provider(server, sleeps).stream(HELLO, [], on_delta=ignore)


@pytest.mark.parametrize(
    "failure",
    [
        {"type": "error", "code": "server_error", "message": f"kaputt {KEY}", "param": None},
        {
            "type": "response.failed",
            "response": {
                **response(),
                "status": "failed",
                "error": {"code": "server_error", "message": f"kaputt {KEY}"},
            },
        },
    ],
    ids=["error event", "response.failed"],
)
def test_an_error_mid_stream_fails_at_once_with_the_redacted_error(failure, server, sleeps):
    chunks = events_of(SCENARIOS["text"])
    server.stream(*chunks[:5], frame(failure, 5))

    with pytest.raises(ProviderError) as info:
        provider(server, sleeps).stream(HELLO, [], on_delta=ignore)

    assert "kaputt ***" in str(info.value)
    assert "(code server_error)" in str(info.value)
    assert len(server.bodies) == 1


def test_a_malformed_event_breaks_the_stream_and_is_retried(server, sleeps):
    chunks = events_of(SCENARIOS["text"])
    server.stream(chunks[0], b"data: {not json\n\n")
    server.stream(*chunks)

    answer = provider(server, sleeps).stream(HELLO, [], on_delta=ignore)

    assert answer.content == "Hallo Welt 👋"


def test_a_stream_whose_text_is_not_its_final_answers_is_broken_and_asked_again(server, sleeps):
    whole = SCENARIOS["text"]
    chunks = events_of(whole)
    # The final event says another text than the deltas the viewer was shown.
    other = json.loads(json.dumps(whole))
    other["output"][-1]["content"][0]["text"] = "Something else"
    lying = [*chunks[:-1], raw_frame({"type": "response.completed", "response": other})]
    server.stream(*lying)
    server.stream(*chunks)
    deltas: list[Any] = []

    answer = provider(server, sleeps).stream(HELLO, [], on_delta=deltas.append)

    assert answer.content == "Hallo Welt 👋"
    assert sum(isinstance(d, StreamRestarted) for d in deltas) == 1
    assert len(server.bodies) == 2


def test_a_final_event_without_output_takes_the_items_done_as_the_sdk_does(server, sleeps):
    whole = SCENARIOS["reasoning and parallel calls"]
    chunks = events_of(whole)
    final = {**whole}
    del final["output"]
    chunks[-1] = raw_frame({"type": "response.completed", "sequence_number": 99, "response": final})
    server.stream(*chunks)
    server.answer(whole)
    model = provider(server, sleeps)

    assert model.stream(HELLO, [LOOKUP], on_delta=ignore) == model.complete(HELLO, [LOOKUP])
    sdk, _ = sdk_final(server, chunks)
    assert meaning(model._parse(sdk)) == meaning(model._parse(whole))


# -- async, dispatch and retries -----------------------------------------------------------------


@pytest.mark.anyio
async def test_acomplete_and_astream_answer_as_complete_does(server, sleeps):
    whole = SCENARIOS["reasoning and parallel calls"]
    server.answer(whole, whole)
    server.stream(*events_of(whole))
    model = provider(server, sleeps, asleeps=AsyncSleeps())
    deltas: list[Any] = []

    expected = model.complete(HELLO, [LOOKUP])
    assert await model.acomplete(HELLO, [LOOKUP]) == expected
    assert await model.astream(HELLO, [LOOKUP], on_delta=deltas.append) == expected
    assert "".join(d.text for d in deltas if isinstance(d, TextDelta)) == expected.content
    await model.aclose()
    model.close()


@pytest.mark.anyio
async def test_the_loops_dispatch_reaches_the_kinds_own_calls(server, sleeps):
    whole = SCENARIOS["text"]
    server.answer(whole)
    server.stream(*events_of(whole), cut=False)
    server.stream(*events_of(whole))
    model = provider(server, sleeps, asleeps=AsyncSleeps())

    assert (await acomplete(model, HELLO, [])).content == "Hallo Welt 👋"
    assert stream(model, HELLO, [], on_delta=ignore).content == "Hallo Welt 👋"
    assert (await astream(model, HELLO, [], on_delta=ignore)).content == "Hallo Welt 👋"
    assert [b.get("stream") for b in server.bodies] == [None, True, True]
    await model.aclose()


def test_a_429_with_retry_after_is_retried(server, sleeps):
    server.answer(
        {"error": {"message": "slow down", "type": "requests"}},
        status=429,
        headers={"retry-after": "3"},
    )
    server.answer(SCENARIOS["text"])

    answer = provider(server, sleeps).complete(HELLO, [])

    assert answer.content == "Hallo Welt 👋"
    assert sleeps == [3.0]


# -- configuration -------------------------------------------------------------------------------


def check(**section: Any) -> list[tuple[str, str]]:
    from nrllm_core.providers._responses import responses_check

    return list(responses_check("gpt", section, config_dir=None))


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ({"max_completion_tokens": 10}, ("max_completion_tokens", "is Chat Completions'")),
        (
            {"max_tokens": 10, "params": {"max_output_tokens": 5}},
            ("params.max_output_tokens", "is what max_tokens sends"),
        ),
        ({"params": {"input": []}}, ("params.input", "is written by the adapter")),
        ({"params": {"previous_response_id": "r"}}, ("params.previous_response_id", "keeps the")),
        ({"params": {"include": "x"}}, ("params.include", "must be an array of strings")),
        ({"params": {"reasoning": "low"}}, ("params.reasoning", "must be a table")),
        ({"base_url": "https://api.openai.com/v1"}, ("base_url", "must not end in /v1")),
        ({"options": None, "base_url": ""}, ("base_url", "must not be empty")),
    ],
)
def test_the_check_refuses_what_the_api_would(section, problem):
    (found,) = check(**section)
    assert found[0] == problem[0]
    assert found[1].startswith(problem[1])


def test_the_check_refuses_an_authorization_header_beside_the_key():
    (found,) = check(options=OpenAISettings(headers={"Authorization": "TOKEN"}))
    assert found == (
        "headers.Authorization",
        "is sent with the key of api_key_env: set one of the two",
    )


def test_a_section_the_check_refuses_is_not_built(server, sleeps):
    from nrllm_core import ProviderConfigError

    with pytest.raises(ProviderConfigError, match="max_completion_tokens is Chat Completions'"):
        provider(server, sleeps, max_completion_tokens=10)
    with pytest.raises(ProviderConfigError, match="the API key variable OPENAI_API_KEY is not set"):
        ResponsesProvider.from_settings("gpt", {"model": "m"}, environ={})


DOCS = Path(__file__).parents[2] / "docs" / "reference" / "providers.md"


def test_config_check_prints_what_the_docs_show_and_no_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: __import__("nrllm_core").make_plugin_manager(load_entry_points=False),
    )
    section = DOCS.read_text(encoding="utf-8").split("## `openai-responses`", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    shown = section.split("as for `openai`:\n\n```\n", 1)[1].split("```", 1)[0]
    gateway = """
[providers.azure]
kind = "openai-responses"
model = "gpt-5"
base_url = "https://res.openai.azure.com/openai"
api_key_env = "AZ_KEY"
headers = { "OpenAI-Project" = "PROJECT" }
query = { "api-version" = "preview" }
"""
    config = tmp_path / "nrllm.toml"
    config.write_text(example + gateway, encoding="utf-8")

    result = CliRunner().invoke(cli, ["--config", str(config), "config", "check"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    for line in shown.splitlines():
        assert line in lines
    assert (
        "provider azure url: https://res.openai.azure.com/openai/v1/responses?api-version=preview"
    ) in lines
    assert "provider azure environment: AZ_KEY (authorization), PROJECT (OpenAI-Project)" in lines
    assert KEY not in result.output


def test_config_check_refuses_a_section_the_api_would_refuse(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    config = tmp_path / "nrllm.toml"
    config.write_text(
        '[providers.o4]\nkind = "openai-responses"\nmodel = "o4-mini"\n'
        'base_url = "https://api.openai.com/v1"\n',
        encoding="utf-8",
    )

    result = CliRunner().invoke(cli, ["--config", str(config), "config", "check"])

    assert result.exit_code == 2
    assert "providers.o4.base_url: must not end in /v1" in result.output

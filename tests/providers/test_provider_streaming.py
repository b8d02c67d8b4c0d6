"""Streamed and async calls of the HTTP adapters, against a loopback server.

Every streamed answer is built from the official SDKs' own stream types (``ChatCompletionChunk``,
Anthropic's ``RawMessageStreamEvent`` models) and served as their ``model_dump_json()``; the
same answer unstreamed is built with their response models, and the two must mean the same.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from anthropic import types as at
from anthropic.types.raw_message_delta_event import Delta as MessageDelta
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionChunk, ChatCompletionMessage
from openai.types.chat import chat_completion_chunk as oc
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.completion_usage import CompletionTokensDetails, PromptTokensDetails

from nrllm_core import (
    ChatMessage,
    ProviderError,
    StreamRestarted,
    TextDelta,
    ThinkingDelta,
    ToolSpec,
)
from nrllm_core._providers import acomplete, astream, stream
from nrllm_core.providers import AnthropicProvider, OpenAIProvider, _http

HELLO = [ChatMessage.user("Grüße: find the home page")]
TOOLS = [ToolSpec(name="lookup", description="Find a page.", parameters={"type": "object"})]
KEY = "sk-ant-test-0123456789abcdefghij"
KINDS = pytest.mark.parametrize("kind", ["openai", "anthropic"])


def ignore(delta: Any) -> None:
    pass


class AsyncSleeps(list[float]):
    """An injected async sleep: records each wait, never waits."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def provider(kind: str, server: Any, sleeps: Any, asleeps: Any = None, **settings: Any) -> Any:
    if kind == "openai":
        base = {"model": "gpt-test", "base_url": f"{server.url}/v1"}
        return OpenAIProvider.from_settings(
            "p", base | settings, environ={}, sleep=sleeps, asleep=asleeps
        )
    base = {"model": "claude-test", "base_url": server.url, "api_key_env": "K"}
    return AnthropicProvider.from_settings(
        "p", base | settings, environ={"K": KEY}, sleep=sleeps, asleep=asleeps
    )


# -- OpenAI: one answer, unstreamed and as chunks -----------------------------------------------


def oa_usage() -> CompletionUsage:
    return CompletionUsage(
        prompt_tokens=10,
        completion_tokens=5,
        total_tokens=15,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=4),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=2),
    )


def oa_whole() -> str:
    message = ChatCompletionMessage(
        role="assistant",
        content="Grüße, ich suche.",
        tool_calls=[
            ChatCompletionMessageFunctionToolCall(
                id=i, type="function", function=Function(name="lookup", arguments=a)
            )
            for i, a in (("call_1", '{"q": "home"}'), ("call_2", '{"q": "about"}'))
        ],
    )
    message.reasoning_content = "Hm, ja."  # type: ignore[attr-defined]
    return ChatCompletion(
        id="chatcmpl-1",
        object="chat.completion",
        created=1,
        model="gpt-test",
        choices=[Choice(index=0, message=message, finish_reason="tool_calls")],
        usage=oa_usage(),
    ).model_dump_json()


def oa_chunk(
    delta: oc.ChoiceDelta | None = None, *, finish: Any = None, usage: Any = None
) -> bytes:
    choices = [] if delta is None else [oc.Choice(index=0, delta=delta, finish_reason=finish)]
    chunk = ChatCompletionChunk(
        id="chatcmpl-1",
        object="chat.completion.chunk",
        created=1,
        model="gpt-test",
        choices=choices,
        usage=usage,
    )
    return f"data: {chunk.model_dump_json()}\n\n".encode()


def oa_call(index: int, arguments: str, call_id: str | None = None, name: str | None = None) -> Any:
    return oc.ChoiceDelta(
        tool_calls=[
            oc.ChoiceDeltaToolCall(
                index=index,
                id=call_id,
                type="function" if call_id else None,
                function=oc.ChoiceDeltaToolCallFunction(name=name, arguments=arguments),
            )
        ]
    )


OA_DONE = b"data: [DONE]\n\n"


def oa_stream() -> list[bytes]:
    return [
        oa_chunk(oc.ChoiceDelta(role="assistant", content="")),
        oa_chunk(oc.ChoiceDelta(reasoning_content="Hm, ")),  # type: ignore[call-arg]
        oa_chunk(oc.ChoiceDelta(reasoning_content="ja.")),  # type: ignore[call-arg]
        oa_chunk(oc.ChoiceDelta(content="Grüße, ")),
        oa_chunk(oc.ChoiceDelta(content="ich suche.")),
        oa_chunk(oa_call(0, "", "call_1", "look")),
        oa_chunk(oa_call(0, '{"q":', name="up")),
        oa_chunk(oa_call(1, "", "call_2", "lookup")),
        oa_chunk(oa_call(0, ' "home"}')),
        oa_chunk(oa_call(1, '{"q": "about"}')),
        oa_chunk(oc.ChoiceDelta(), finish="tool_calls"),
        oa_chunk(usage=oa_usage()),
        OA_DONE,
    ]


OA_DELTAS = [
    ThinkingDelta(text="Hm, "),
    ThinkingDelta(text="ja."),
    TextDelta(text="Grüße, "),
    TextDelta(text="ich suche."),
]


# -- Anthropic: one answer, unstreamed and as events --------------------------------------------


def an_event(event: Any) -> bytes:
    return f"event: {event.type}\ndata: {event.model_dump_json()}\n\n".encode()


THINKING = at.ThinkingBlock(type="thinking", thinking="Ich brauche Daten.", signature="sig-1")
REDACTED = at.RedactedThinkingBlock(type="redacted_thinking", data="opaque-2")


def an_message(content: list[Any], stop: Any, output_tokens: int) -> at.Message:
    return at.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-test",
        content=content,
        stop_reason=stop,
        stop_sequence=None,
        usage=at.Usage(input_tokens=10, output_tokens=output_tokens, cache_read_input_tokens=3),
    )


def an_whole() -> str:
    content = [
        THINKING,
        REDACTED,
        at.TextBlock(type="text", text="Ich suche."),
        at.ToolUseBlock(type="tool_use", id="toolu_1", name="lookup", input={"q": "home"}),
        at.ToolUseBlock(type="tool_use", id="toolu_2", name="lookup", input={"q": "about"}),
    ]
    return an_message(content, "tool_use", 42).model_dump_json()


def an_start(index: int, block: Any) -> bytes:
    return an_event(
        at.RawContentBlockStartEvent(type="content_block_start", index=index, content_block=block)
    )


def an_delta(index: int, delta: Any) -> bytes:
    return an_event(
        at.RawContentBlockDeltaEvent(type="content_block_delta", index=index, delta=delta)
    )


def an_stop(index: int) -> bytes:
    return an_event(at.RawContentBlockStopEvent(type="content_block_stop", index=index))


def an_json(index: int, partial: str) -> bytes:
    return an_delta(index, at.InputJSONDelta(type="input_json_delta", partial_json=partial))


def an_begin() -> bytes:
    return an_event(at.RawMessageStartEvent(type="message_start", message=an_message([], None, 1)))


def an_end(stop: Any, output_tokens: int) -> list[bytes]:
    return [
        an_event(
            at.RawMessageDeltaEvent(
                type="message_delta",
                delta=MessageDelta(stop_reason=stop, stop_sequence=None),
                usage=at.MessageDeltaUsage(output_tokens=output_tokens),
            )
        ),
        an_event(at.RawMessageStopEvent(type="message_stop")),
    ]


def an_stream() -> list[bytes]:
    return [
        an_begin(),
        b'event: ping\ndata: {"type": "ping"}\n\n',
        an_start(0, at.ThinkingBlock(type="thinking", thinking="", signature="")),
        an_delta(0, at.ThinkingDelta(type="thinking_delta", thinking="Ich brauche ")),
        an_delta(0, at.ThinkingDelta(type="thinking_delta", thinking="Daten.")),
        an_delta(0, at.SignatureDelta(type="signature_delta", signature="sig-1")),
        an_stop(0),
        an_start(1, REDACTED),
        an_stop(1),
        an_start(2, at.TextBlock(type="text", text="")),
        an_delta(2, at.TextDelta(type="text_delta", text="Ich ")),
        an_delta(2, at.TextDelta(type="text_delta", text="suche.")),
        an_stop(2),
        an_start(3, at.ToolUseBlock(type="tool_use", id="toolu_1", name="lookup", input={})),
        an_json(3, '{"q": "ho'),
        an_json(3, 'me"}'),
        an_stop(3),
        an_start(4, at.ToolUseBlock(type="tool_use", id="toolu_2", name="lookup", input={})),
        an_json(4, ""),
        an_json(4, '{"q": "about"}'),
        an_stop(4),
        *an_end("tool_use", 42),
    ]


AN_DELTAS = [
    ThinkingDelta(text="Ich brauche "),
    ThinkingDelta(text="Daten."),
    TextDelta(text="Ich "),
    TextDelta(text="suche."),
]


def whole(kind: str) -> str:
    return oa_whole() if kind == "openai" else an_whole()


def streamed(kind: str) -> list[bytes]:
    return oa_stream() if kind == "openai" else an_stream()


def deltas_of(kind: str) -> list[Any]:
    return OA_DELTAS if kind == "openai" else AN_DELTAS


# Where a stream is cut mid-tool-call: after the first fragment of the first call's arguments.
def cut_mid_call(kind: str) -> list[bytes]:
    return streamed(kind)[:7] if kind == "openai" else streamed(kind)[:15]


# -- the streamed answer is the answer ----------------------------------------------------------


@KINDS
def test_a_streamed_answer_equals_the_same_answer_unstreamed(kind, server, sleeps):
    server.answer(whole(kind))
    server.stream(*streamed(kind))
    model = provider(kind, server, sleeps)
    deltas: list[Any] = []

    unstreamed = model.complete(HELLO, TOOLS)
    answer = model.stream(HELLO, TOOLS, on_delta=deltas.append)

    assert answer == unstreamed
    assert deltas == deltas_of(kind)
    assert [c.arguments for c in answer.tool_calls] == [{"q": "home"}, {"q": "about"}]
    assert answer.usage.prompt_tokens == (10 if kind == "openai" else 13)
    assert answer.usage.completion_tokens == (5 if kind == "openai" else 42)
    assert answer.response_id == ("chatcmpl-1" if kind == "openai" else "msg_1")
    assert answer.response_model == ("gpt-test" if kind == "openai" else "claude-test")
    assert answer.thinking == ("Hm, ja." if kind == "openai" else "Ich brauche Daten.")


def test_anthropic_thinking_blocks_are_kept_for_replay_with_their_signatures(server, sleeps):
    server.stream(*an_stream())

    answer = provider("anthropic", server, sleeps).stream(HELLO, TOOLS, on_delta=ignore)

    assert answer.replay is not None
    assert answer.replay.origin == "anthropic:p:claude-test"
    assert [dict(b) for b in answer.replay.blocks[:2]] == [
        THINKING.model_dump(),
        REDACTED.model_dump(),
    ]


@KINDS
def test_the_streamed_request_asks_for_a_stream_and_is_valid_for_the_sdk(
    kind, server, sleeps, openai_stream_oracle, anthropic_stream_oracle
):
    server.stream(*streamed(kind))

    provider(kind, server, sleeps).stream(HELLO, TOOLS, tool_choice="none", on_delta=ignore)

    body = server.bodies[0]
    (openai_stream_oracle if kind == "openai" else anthropic_stream_oracle)(body)
    assert body["stream"] is True
    if kind == "openai":
        assert body["stream_options"] == {"include_usage": True}
        assert body["tool_choice"] == "none"
    else:
        assert body["tool_choice"] == {"type": "none"}


def test_an_openai_answer_of_text_only_streams_its_text(server, sleeps):
    server.stream(
        oa_chunk(oc.ChoiceDelta(content="Hallo ")),
        oa_chunk(oc.ChoiceDelta(content="Welt"), finish="stop"),
        OA_DONE,
    )
    deltas: list[Any] = []

    answer = provider("openai", server, sleeps).stream(HELLO, [], on_delta=deltas.append)

    assert (answer.content, answer.tool_calls, answer.finish_reason) == ("Hallo Welt", (), "stop")
    assert deltas == [TextDelta(text="Hallo "), TextDelta(text="Welt")]
    assert answer.usage.total_tokens == 0


# -- broken streams ----------------------------------------------------------------------------


@KINDS
def test_a_stream_cut_mid_tool_call_is_retried_as_a_whole(kind, server, sleeps):
    server.stream(*cut_mid_call(kind), cut=True)
    server.stream(*streamed(kind))
    server.answer(whole(kind))
    model = provider(kind, server, sleeps)
    deltas: list[Any] = []

    answer = model.stream(HELLO, TOOLS, on_delta=deltas.append)

    assert answer == model.complete(HELLO, TOOLS)
    assert deltas == [*deltas_of(kind), StreamRestarted(), *deltas_of(kind)]
    assert sleeps == [0.5]


@KINDS
def test_a_stream_broken_after_its_final_event_is_answered_and_not_asked_again(
    kind, server, sleeps
):
    # The rest of the body is read only so that the connection can carry the next request.
    server.stream(*streamed(kind), cut=True)
    server.answer(whole(kind))
    model = provider(kind, server, sleeps)

    answer = model.stream(HELLO, TOOLS, on_delta=lambda _delta: None)

    assert answer == model.complete(HELLO, TOOLS)
    assert sleeps == []
    assert len(server.bodies) == 2


@KINDS
def test_a_stream_cut_on_every_attempt_fails_after_max_retries(kind, server, sleeps):
    for _ in range(3):
        server.stream(*cut_mid_call(kind), cut=True)
    deltas: list[Any] = []

    with pytest.raises(
        ProviderError,
        match=r'^provider "p": the connection broke mid-answer \(RemoteProtocolError\) '
        r"\(after 3 attempts\)$",
    ):
        provider(kind, server, sleeps, max_retries=2).stream(HELLO, TOOLS, on_delta=deltas.append)
    assert deltas.count(StreamRestarted()) == 2
    assert sleeps == [0.5, 1.0]


@KINDS
def test_a_stream_without_its_final_event_is_broken(kind, server, sleeps):
    # An OpenAI stream may end without [DONE] once its finish reason and usage came: cut it
    # before the finish reason.
    server.stream(*(streamed(kind)[:-3] if kind == "openai" else streamed(kind)[:-1]))

    with pytest.raises(
        ProviderError,
        match=r"the stream broke: the stream ended before its final event \(after 1 attempt\)",
    ):
        provider(kind, server, sleeps, max_retries=0).stream(HELLO, TOOLS, on_delta=ignore)


@KINDS
def test_a_malformed_event_breaks_the_stream_and_is_retried(kind, server, sleeps):
    server.stream(streamed(kind)[0], b"data: {not json\n\n")
    server.stream(*streamed(kind))
    deltas: list[Any] = []

    answer = provider(kind, server, sleeps).stream(HELLO, TOOLS, on_delta=deltas.append)

    assert answer.content
    assert deltas[0] == StreamRestarted()
    assert len(server.bodies) == 2


@pytest.mark.parametrize(
    ("kind", "event"),
    [
        ("openai", {"error": {"message": f"Overloaded {KEY}", "code": "overloaded"}}),
        (
            "anthropic",
            {"type": "error", "error": {"type": "overloaded_error", "message": f"Over {KEY}"}},
        ),
    ],
)
def test_an_error_event_fails_at_once_with_the_redacted_error(kind, event, server, sleeps):
    server.stream(streamed(kind)[0], f"event: error\ndata: {json.dumps(event)}\n\n".encode())

    with pytest.raises(ProviderError, match=r'^provider "p" answered with an error: ') as caught:
        provider(kind, server, sleeps).stream(HELLO, TOOLS, on_delta=ignore)
    message = str(caught.value)
    assert KEY not in message
    assert "overloaded" in message
    assert len(server.bodies) == 1


@KINDS
def test_an_error_status_before_the_stream_follows_the_retry_rules(kind, server, sleeps):
    server.answer({"error": {"message": "busy"}}, status=529)
    server.stream(*streamed(kind))
    server.answer({"error": {"message": "no"}}, status=400)
    model = provider(kind, server, sleeps)
    deltas: list[Any] = []

    assert model.stream(HELLO, TOOLS, on_delta=deltas.append).tool_calls
    assert deltas == deltas_of(kind)
    assert sleeps == [0.5]
    with pytest.raises(ProviderError, match="HTTP 400: "):
        model.stream(HELLO, TOOLS, on_delta=deltas.append)


@KINDS
@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_an_answer_beyond_the_size_limit_is_refused(kind, streaming, server, sleeps, monkeypatch):
    monkeypatch.setattr(_http, "ANSWER_MAX_BYTES", 200)
    model = provider(kind, server, sleeps)
    if streaming:
        server.stream(*streamed(kind))
    else:
        server.answer(whole(kind))
    call = model.stream if streaming else model.complete
    options = {"on_delta": ignore} if streaming else {}

    with pytest.raises(ProviderError, match=r'^provider "p" answered with more than 200 bytes$'):
        call(HELLO, TOOLS, **options)
    assert len(server.bodies) == 1


# -- async --------------------------------------------------------------------------------------


@KINDS
@pytest.mark.anyio
async def test_acomplete_answers_as_complete_does(kind, server, sleeps):
    server.answer({"error": {"message": "busy"}}, status=503)
    server.answer(whole(kind), whole(kind))
    asleeps = AsyncSleeps()
    # A provider keeps its connections until it is closed (a host closes those it builds).
    async with contextlib.aclosing(provider(kind, server, sleeps, asleeps)) as model:
        answer = await acomplete(model, HELLO, TOOLS)

        assert answer == model.complete(HELLO, TOOLS)
    assert (asleeps, sleeps) == ([0.5], [])


@KINDS
@pytest.mark.anyio
async def test_astream_answers_a_stream_broken_after_its_final_event(kind, server, sleeps):
    server.stream(*streamed(kind), cut=True)
    server.answer(whole(kind))
    asleeps = AsyncSleeps()

    async with contextlib.aclosing(provider(kind, server, sleeps, asleeps)) as model:
        answer = await astream(model, HELLO, TOOLS, on_delta=lambda _delta: None)

        assert answer == model.complete(HELLO, TOOLS)
    assert (asleeps, sleeps) == ([], [])
    assert len(server.bodies) == 2


@KINDS
@pytest.mark.anyio
async def test_astream_streams_and_retries_a_cut_stream(kind, server, sleeps):
    server.stream(*cut_mid_call(kind), cut=True)
    server.stream(*streamed(kind))
    server.answer(whole(kind))
    asleeps = AsyncSleeps()
    deltas: list[Any] = []

    async with contextlib.aclosing(provider(kind, server, sleeps, asleeps)) as model:
        answer = await astream(model, HELLO, TOOLS, on_delta=deltas.append)

        assert answer == model.complete(HELLO, TOOLS)
    assert deltas == [*deltas_of(kind), StreamRestarted(), *deltas_of(kind)]
    assert (asleeps, sleeps) == ([0.5], [])


@KINDS
def test_stream_dispatches_to_the_adapters_own_stream(kind, server, sleeps):
    server.stream(*streamed(kind))
    deltas: list[Any] = []

    stream(provider(kind, server, sleeps), HELLO, TOOLS, on_delta=deltas.append)

    assert deltas == deltas_of(kind)
    assert server.bodies[0]["stream"] is True


@KINDS
def test_a_stream_answered_with_one_json_body_is_read_as_a_whole_answer(kind, server, sleeps):
    server.answer(whole(kind), whole(kind))
    server.answer({"error": {"message": "quota", "code": "insufficient_quota"}})
    model = provider(kind, server, sleeps)
    deltas: list[Any] = []

    assert model.stream(HELLO, TOOLS, on_delta=deltas.append) == model.complete(HELLO, TOOLS)
    with pytest.raises(ProviderError, match=r"answered with an error: quota \(code insufficient"):
        model.stream(HELLO, TOOLS, on_delta=deltas.append)
    assert deltas == []


def test_an_anthropic_tool_input_that_is_no_json_makes_an_invalid_call(server, sleeps):
    events = an_stream()
    # The first call's input pieces (events 14 and 15) replaced by one that is no JSON.
    server.stream(*events[:14], an_json(3, '{"q": '), *events[16:])

    answer = provider("anthropic", server, sleeps).stream(HELLO, TOOLS, on_delta=ignore)

    first = answer.tool_calls[0]
    assert (first.arguments_valid, first.raw_arguments) == (False, '{"q": ')
    assert answer.tool_calls[1].arguments == {"q": "about"}


def test_an_openai_tool_call_fragment_without_an_index_breaks_the_stream(server, sleeps):
    fragment = b'data: {"id":"c","choices":[{"index":0,"delta":{"tool_calls":[{"id":"x"}]}}]}\n\n'
    server.stream(fragment, OA_DONE)

    with pytest.raises(ProviderError, match="the stream broke: a tool call fragment without an"):
        provider("openai", server, sleeps, max_retries=0).stream(HELLO, TOOLS, on_delta=ignore)


@pytest.mark.parametrize(
    "event",
    [b'data: {"type": ["message_start"]}\n\n', b"data: [1, 2]\n\n", b'data: "text"\n\n'],
    ids=["list-type", "array", "string"],
)
def test_an_anthropic_event_without_a_string_type_breaks_the_stream(event, server, sleeps):
    server.stream(an_stream()[0], event)

    with pytest.raises(ProviderError, match="the stream broke: an event without a type"):
        provider("anthropic", server, sleeps, max_retries=0).stream(HELLO, TOOLS, on_delta=ignore)


def test_anthropic_deltas_of_unknown_or_odd_types_are_skipped(server, sleeps):
    odd = b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 2, '
    events = an_stream()
    server.stream(
        *events[:11],
        odd + b'"delta": {"type": ["text_delta"], "text": "x"}}\n\n',
        odd + b'"delta": {"type": "future_delta", "text": "x"}}\n\n',
        *events[11:],
    )
    deltas: list[Any] = []

    answer = provider("anthropic", server, sleeps).stream(HELLO, TOOLS, on_delta=deltas.append)

    assert (answer.content, deltas) == ("Ich suche.", AN_DELTAS)


# -- what the SDKs assemble from the same bytes -------------------------------------------------


def sdk_message(events: list[bytes]) -> dict[str, Any]:
    """The message the anthropic SDK's stream accumulator builds from ``events``."""
    from anthropic.lib.streaming._messages import accumulate_event

    snapshot: Any = None
    buffers: dict[int, bytes] = {}
    for raw in events:
        data = raw.decode().split("data: ", 1)[1]
        event = json.loads(data)
        if event["type"] != "ping":
            snapshot = accumulate_event(event=event, current_snapshot=snapshot, json_bufs=buffers)
    dumped: dict[str, Any] = snapshot.model_dump(mode="json", exclude_none=True)
    return dumped


SEARCH = at.ServerToolUseBlock(
    type="server_tool_use", id="srv_1", name="web_search", input={"query": "Start"}
)


def an_paused_whole() -> str:
    content = [at.TextBlock(type="text", text="Ich suche."), SEARCH]
    return an_message(content, "pause_turn", 7).model_dump_json()


def an_paused_stream() -> list[bytes]:
    return [
        an_begin(),
        an_start(0, at.TextBlock(type="text", text="")),
        an_delta(0, at.TextDelta(type="text_delta", text="Ich suche.")),
        an_stop(0),
        an_start(1, SEARCH.model_copy(update={"input": {}})),
        an_json(1, '{"query": '),
        an_json(1, '"Start"}'),
        an_stop(1),
        *an_end("pause_turn", 7),
    ]


def test_a_streamed_server_tool_use_keeps_its_input_and_goes_back_with_it(
    server, sleeps, anthropic_stream_oracle
):
    server.answer(an_paused_whole())
    server.stream(*an_paused_stream())
    model = provider("anthropic", server, sleeps)

    unstreamed = model.complete(HELLO, TOOLS)
    answer = model.stream(HELLO, TOOLS, on_delta=ignore)

    assert answer == unstreamed
    assert answer.replay is not None
    blocks = [dict(b) for b in answer.replay.blocks]
    assert blocks[1]["input"] == {"query": "Start"}
    assert [{k: v for k, v in b.items() if v is not None} for b in blocks] == sdk_message(
        an_paused_stream()
    )["content"]
    # The paused turn goes back as it came, the search's input with it.
    turn = ChatMessage.assistant(answer.content, answer.tool_calls, replay=answer.replay)
    body = {**model.request_body([*HELLO, turn], TOOLS), **model.STREAM_FIELDS}
    anthropic_stream_oracle(body)
    assert body["messages"][-1]["content"][1] == {
        "type": "server_tool_use",
        "id": "srv_1",
        "name": "web_search",
        "input": {"query": "Start"},
    }


def test_an_openai_stream_that_ends_after_its_finish_reason_and_usage_is_whole(server, sleeps):
    from openai import OpenAI

    # No ``data: [DONE]``: the chunk with the finish reason and the usage chunk came.
    chunks = oa_stream()[:-1]
    server.stream(*chunks)
    server.answer(oa_whole())
    server.stream(*chunks)
    sdk = OpenAI(base_url=f"{server.url}/v1", api_key="k", max_retries=0)
    model = provider("openai", server, sleeps, max_retries=0)
    deltas: list[Any] = []

    # The SDK reads every chunk and ends without an error where the body ends.
    taken = list(sdk.chat.completions.create(model="gpt-test", messages=[], stream=True))
    unstreamed = model.complete(HELLO, TOOLS)
    answer = model.stream(HELLO, TOOLS, on_delta=deltas.append)

    assert [c.model_dump_json() for c in taken] == [
        c.decode().removeprefix("data: ").strip() for c in chunks
    ]
    assert answer == unstreamed
    assert deltas == OA_DELTAS
    assert len(server.bodies) == 3


@pytest.mark.parametrize(
    "end", [-3, -2], ids=["before-the-finish-reason", "before-the-usage-it-asked-for"]
)
def test_an_openai_stream_that_ends_early_without_done_is_broken(end, server, sleeps):
    server.stream(*oa_stream()[:end])
    server.stream(*oa_stream())
    deltas: list[Any] = []

    answer = provider("openai", server, sleeps).stream(HELLO, TOOLS, on_delta=deltas.append)

    assert answer.finish_reason == "tool_calls"
    assert deltas == [*OA_DELTAS, StreamRestarted(), *OA_DELTAS]
    assert len(server.bodies) == 2


def test_the_response_id_is_the_first_non_empty_chunk_id(server, sleeps):
    # Azure opens a stream with the prompt's filter results, in a chunk whose id is empty.
    azure = {
        "id": "",
        "object": "",
        "created": 0,
        "model": "",
        "choices": [],
        "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": {}}],
    }
    server.stream(f"data: {json.dumps(azure)}\n\n".encode(), *oa_stream())

    answer = provider("openai", server, sleeps).stream(HELLO, TOOLS, on_delta=ignore)

    assert answer.response_id == "chatcmpl-1"


def test_streamed_anthropic_text_blocks_join_as_the_whole_answer_joins_them(server, sleeps):
    def text_block(index: int, *pieces: str) -> list[bytes]:
        deltas = [an_delta(index, at.TextDelta(type="text_delta", text=p)) for p in pieces]
        return [an_start(index, at.TextBlock(type="text", text="")), *deltas, an_stop(index)]

    def thinking_block(index: int, thought: str) -> list[bytes]:
        empty = at.ThinkingBlock(type="thinking", thinking="", signature="")
        delta = at.ThinkingDelta(type="thinking_delta", thinking=thought)
        return [an_start(index, empty), an_delta(index, delta), an_stop(index)]

    events = [
        an_begin(),
        *thinking_block(0, "Erst dies."),
        *thinking_block(1, "Dann das."),
        *text_block(2, "Erst", "ens."),
        *text_block(3),
        *text_block(4, "Zweitens."),
        *an_end("end_turn", 9),
    ]
    blocks = sdk_message(events)["content"]
    server.answer(an_message(blocks, "end_turn", 9).model_dump_json())
    server.stream(*events)
    model = provider("anthropic", server, sleeps)
    deltas: list[Any] = []

    unstreamed = model.complete(HELLO, [])
    answer = model.stream(HELLO, [], on_delta=deltas.append)

    assert answer == unstreamed
    assert answer.content == "Erstens.\n\nZweitens."
    shown = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    thought = "".join(d.text for d in deltas if isinstance(d, ThinkingDelta))
    assert (shown, thought) == (answer.content, answer.thinking)

"""The stream assemblers fed hostile events: whatever the server sends, a call either answers
or fails with a ``ProviderError``, never with another exception.

The events are valid streams with a few fields (at any depth) replaced by arbitrary JSON or
dropped, so the fuzzing reaches the blocks, deltas and tool-call fragments.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core import ChatMessage, ProviderError
from nrllm_core.providers import AnthropicProvider, OpenAIProvider, ResponsesProvider
from nrllm_core.providers._anthropic import _Events
from nrllm_core.providers._http import StreamBroken, StreamFailed
from nrllm_core.providers._openai import _Chunks
from nrllm_core.providers._sse import ServerSentEvent

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)


def _block(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _delta(index: int, delta: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": delta}


ANTHROPIC_STREAM = [
    {"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 1}}},
    _block(0, {"type": "thinking", "thinking": "", "signature": ""}),
    _delta(0, {"type": "thinking_delta", "thinking": "hm"}),
    _delta(0, {"type": "signature_delta", "signature": "s"}),
    {"type": "content_block_stop", "index": 0},
    _block(1, {"type": "text", "text": ""}),
    _delta(1, {"type": "text_delta", "text": "hi"}),
    _delta(1, {"type": "citations_delta", "citation": {"cited_text": "x"}}),
    {"type": "content_block_stop", "index": 1},
    _block(2, {"type": "tool_use", "id": "t", "name": "n", "input": {}}),
    _delta(2, {"type": "input_json_delta", "partial_json": '{"q": 1}'}),
    {"type": "content_block_stop", "index": 2},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 2}},
    {"type": "message_stop"},
]


def _choice(delta: dict[str, Any], finish: Any = None) -> dict[str, Any]:
    return {"id": "c", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def _fragment(index: int, **fields: Any) -> dict[str, Any]:
    return {"index": index, **fields}


OPENAI_STREAM = [
    _choice({"role": "assistant", "reasoning_content": "hm"}),
    _choice({"content": "hi"}),
    _choice({"refusal": "no"}),
    _choice({"tool_calls": [_fragment(0, id="a", function={"name": "n", "arguments": '{"q": '})]}),
    _choice({"tool_calls": [_fragment(0, function={"arguments": "1}"}), _fragment(1, id="b")]}),
    _choice({"tool_calls": [_fragment(1, function={"name": "m", "arguments": "{}"})]}),
    _choice({}, "tool_calls"),
    {"id": "c", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}},
]


@st.composite
def mutated(draw: st.DrawFn, valid: list[dict[str, Any]]) -> list[Any]:
    events: list[Any] = copy.deepcopy(valid)
    for _ in range(draw(st.integers(1, 4))):
        position = draw(st.integers(0, len(events) - 1))
        parent: Any = events
        key: Any = position
        # Walk down a few levels, then replace or drop what is there.
        while isinstance(parent[key], dict | list) and parent[key] and draw(st.booleans()):
            parent = parent[key]
            key = draw(
                st.sampled_from(sorted(parent) if isinstance(parent, dict) else range(len(parent)))
            )
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[key]
        else:
            parent[key] = draw(_JSON)
    return events


OPENAI = OpenAIProvider.from_settings("p", {"model": "m"}, environ={})
ANTHROPIC = AnthropicProvider.from_settings("p", {"model": "m"}, environ={"ANTHROPIC_API_KEY": "k"})


def assemble(assembler: Any, parse: Any, events: list[Any]) -> None:
    try:
        for event in events:
            if assembler.feed(ServerSentEvent(event="message", data=json.dumps(event))):
                break
        parse(assembler.answer())
    except (StreamBroken, StreamFailed, ProviderError):
        pass


def test_the_valid_streams_answer():
    for assembler, parse, events, content, calls in (
        # A refusal is the answer's content.
        (_Chunks, OPENAI._parse, OPENAI_STREAM, "no", [("n", {"q": 1}), ("m", {})]),
        (_Events, ANTHROPIC._parse, ANTHROPIC_STREAM, "hi", [("n", {"q": 1})]),
    ):
        deltas: list[Any] = []
        answer = parse(_fed(assembler(deltas.append), events))
        assert [(c.name, c.arguments) for c in answer.tool_calls] == calls
        assert (answer.content, answer.thinking) == (content, "hm")
        assert [d.text for d in deltas] == ["hm", "hi"]


def _fed(assembler: Any, events: list[Any]) -> Any:
    for event in events:
        assembler.feed(ServerSentEvent(event="message", data=json.dumps(event)))
    return assembler.answer()


@given(events=mutated(OPENAI_STREAM))
def test_any_openai_chunks_answer_or_fail_as_a_provider_does(events):
    assemble(_Chunks(lambda delta: None), OPENAI._parse, events)


@given(events=mutated(ANTHROPIC_STREAM))
def test_any_anthropic_events_answer_or_fail_as_a_provider_does(events):
    assemble(_Events(lambda delta: None), ANTHROPIC._parse, events)


def test_a_block_or_stop_reason_of_no_string_type_is_no_crash():
    answer = ANTHROPIC._parse({"content": [{"type": ["text"]}], "stop_reason": ["end_turn"]})

    assert (answer.content, answer.finish_reason) == ("", None)
    assert answer.replay is not None


# 8 MB of text in 100-character pieces: joined once, a stream costs its length, not its square
# (appending to a string copied it: about 24 s here for the Anthropic assembler, 7 s for Gemini).
PIECE = "x" * 100
PIECES = 80_000
LINEAR_SECONDS = 3.0


def _timed_answer(assembler: Any, first: list[dict[str, Any]], piece: dict[str, Any]) -> Any:
    started = time.perf_counter()
    for event in first:
        assembler.feed(ServerSentEvent(event="message", data=json.dumps(event)))
    repeated = ServerSentEvent(event="message", data=json.dumps(piece))
    for _ in range(PIECES):
        assembler.feed(repeated)
    answer = assembler.answer()
    return answer, time.perf_counter() - started


def test_a_long_anthropic_stream_is_assembled_in_time_linear_in_its_length():
    answer, seconds = _timed_answer(
        _Events(lambda delta: None),
        [ANTHROPIC_STREAM[0], _block(0, {"type": "text", "text": ""})],
        _delta(0, {"type": "text_delta", "text": PIECE}),
    )
    assert answer["content"][0]["text"] == PIECE * PIECES
    assert seconds < LINEAR_SECONDS


def test_a_long_gemini_stream_is_assembled_in_time_linear_in_its_length():
    from nrllm_core.providers._gemini import _Chunks as GeminiChunks

    chunk = {"candidates": [{"content": {"role": "model", "parts": [{"text": PIECE}]}}]}
    answer, seconds = _timed_answer(GeminiChunks(lambda delta: None), [], chunk)
    assert answer["candidates"][0]["content"]["parts"] == [{"text": PIECE * PIECES}]
    assert seconds < LINEAR_SECONDS


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


RESPONSES = ResponsesProvider.from_settings("p", {"model": "m"}, environ={"OPENAI_API_KEY": "k"})


@pytest.mark.parametrize(
    ("provider", "answer"),
    [
        (RESPONSES, {"status": [], "output": []}),
        (RESPONSES, {"status": "completed", "output": [{"type": []}]}),
        # Deeper than an encoder writes (254), shallower than a reader reads (1024).
        (ANTHROPIC, {"content": [{"type": "other", "deep": _nested(300)}]}),
    ],
    ids=["responses-status-list", "responses-item-type-list", "anthropic-block-too-deep"],
)
def test_an_answer_no_adapter_can_read_fails_as_a_provider_does(provider, answer):
    with pytest.raises(ProviderError, match="sent an answer it cannot read"):
        provider._parsed(answer)


def test_a_replayed_block_of_no_string_type_is_sent_back_as_it_came():
    answer = ANTHROPIC._parse({"content": [{"type": ["x"]}, {"type": "text", "text": "hi"}]})
    messages = [ChatMessage.user("q"), ChatMessage.assistant("hi", (), replay=answer.replay)]
    body = ANTHROPIC.request_body([*messages, ChatMessage.user("again")], [])
    assert body["messages"][1]["content"][0] == {"type": ["x"]}

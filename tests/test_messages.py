"""Messages, tool calls, tool specs, usage: the values a run and a provider exchange."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nrllm_core import ToolResult
from nrllm_core._json import dumps, loads
from nrllm_core._messages import (
    ChatMessage,
    ProviderAnswer,
    ProviderError,
    Role,
    ToolCall,
    ToolSpec,
    Usage,
)

PLANTED = "PLANTED-CONTENT-7f3a"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param(
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            ("c1", "f", {"a": 1}),
            id="openai-json-string",
        ),
        pytest.param(
            {"id": "c1", "function": {"name": "f", "arguments": {"a": [1, 2]}}},
            ("c1", "f", {"a": [1, 2]}),
            id="openai-object",
        ),
        pytest.param(
            {"id": "c2", "name": "g", "arguments": {"q": "x"}}, ("c2", "g", {"q": "x"}), id="flat"
        ),
        pytest.param({"id": "c", "name": "g", "arguments": '{"q": "x"'}, ("c", "g", {}), id="bad"),
        pytest.param({"id": "c", "name": "g", "arguments": ""}, ("c", "g", {}), id="empty-str"),
        pytest.param({"id": "c", "name": "g", "arguments": "[1, 2]"}, ("c", "g", {}), id="list"),
        pytest.param({"id": "c", "name": "g", "arguments": "3"}, ("c", "g", {}), id="scalar"),
        pytest.param({"id": "c", "name": "g", "arguments": None}, ("c", "g", {}), id="null"),
        pytest.param({"id": "c", "name": "g", "arguments": [1]}, ("c", "g", {}), id="list-obj"),
        pytest.param({"id": "c", "name": "g"}, ("c", "g", {}), id="missing-arguments"),
        pytest.param(
            {"id": "c", "function": "oops", "name": "g", "arguments": "{}"},
            ("c", "g", {}),
            id="function-not-object",
        ),
        pytest.param({"name": "g", "arguments": "{}"}, None, id="no-id"),
        pytest.param({"id": "", "name": "g"}, None, id="empty-id"),
        pytest.param({"id": 7, "name": "g"}, None, id="id-not-str"),
        pytest.param({"id": "c", "function": {"arguments": "{}"}}, None, id="no-name"),
        pytest.param({"id": "c", "name": ""}, None, id="empty-name"),
        pytest.param({"id": "c", "name": ["g"]}, None, id="name-not-str"),
        pytest.param("call", None, id="not-an-object"),
        pytest.param(None, None, id="none"),
    ],
)
def test_tool_call_parse_is_lenient(raw, expected):
    if expected is None:
        # A call that cannot be answered fails the answer; it is never dropped.
        with pytest.raises(ProviderError, match=r'^provider "p" answered with a tool call '):
            ToolCall.parse(raw, provider="p")
    else:
        call = ToolCall.parse(raw, provider="p")
        assert (call.id, call.name, dict(call.arguments)) == expected


def test_a_bad_call_is_logged_and_named_without_its_content():
    errors = []
    with capture_logs() as logs:
        for raw in ({"name": "g", "arguments": {"secret": PLANTED}}, {"id": PLANTED}):
            with pytest.raises(ProviderError) as caught:
                ToolCall.parse(raw)
            errors.append(str(caught.value))
    assert errors == [
        "the provider answered with a tool call with an empty or missing id",
        "the provider answered with a tool call with an empty or missing name",
    ]
    assert [e["event"] for e in logs] == ["nrllm.provider.bad_call"] * 2
    assert PLANTED not in repr(logs)


def test_tool_call_arguments_are_read_only_and_hashing_ignores_them():
    call = ToolCall(id="c", name="f", arguments={"a": 1})
    with pytest.raises(TypeError):
        call.arguments["a"] = 2  # type: ignore[index]
    assert call == ToolCall(id="c", name="f", arguments={"a": 1})
    assert hash(call) == hash(ToolCall(id="c", name="f", arguments={"a": 2}))
    with pytest.raises(ValueError, match="id"):
        ToolCall(id="", name="f")


def test_tool_result_takes_the_bounded_content_string_only():
    message = ChatMessage.tool_result("call_1", "42 rows")
    assert (message.role, message.content, message.tool_call_id) == (Role.TOOL, "42 rows", "call_1")

    class Sneaky(str):
        pass

    for wrong in (ToolResult.text("42 rows"), b"42 rows", Sneaky("42 rows"), None, 42):
        with pytest.raises(TypeError, match="bounded content"):
            ChatMessage.tool_result("call_1", wrong)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="id"):
        ChatMessage.tool_result("", "x")


def test_messages_are_built_by_their_factories_only():
    with pytest.raises(TypeError, match=r"ChatMessage\.system"):
        ChatMessage(role=Role.TOOL, content="x", tool_call_id="c")
    for factory in (ChatMessage.system, ChatMessage.user):
        with pytest.raises(TypeError, match="str"):
            factory(ToolResult.text("x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="ToolCall"):
        ChatMessage.assistant("", [{"id": "c", "name": "f"}])  # type: ignore[list-item]


def test_message_dict_shapes():
    call = ToolCall(id="c1", name="f", arguments={"a": 1})
    assert ChatMessage.system("s").to_dict() == {"role": "system", "content": "s"}
    assert ChatMessage.assistant("thinking", [call]).to_dict() == {
        "role": "assistant",
        "content": "thinking",
        "tool_calls": [{"id": "c1", "name": "f", "arguments": {"a": 1}}],
    }
    assert ChatMessage.assistant("done").to_dict() == {"role": "assistant", "content": "done"}
    assert ChatMessage.tool_result("c1", "ok").to_dict() == {
        "role": "tool",
        "content": "ok",
        "tool_call_id": "c1",
    }


_text = st.text(max_size=20)
_json_leaf = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | _text
_arguments = st.dictionaries(
    _text, st.recursive(_json_leaf, lambda c: st.lists(c, max_size=3), max_leaves=5), max_size=3
)
_call = st.builds(ToolCall, id=st.text(min_size=1), name=st.text(min_size=1), arguments=_arguments)
_message = st.one_of(
    st.builds(ChatMessage.system, _text),
    st.builds(ChatMessage.user, _text),
    st.builds(ChatMessage.assistant, _text, st.lists(_call, max_size=3)),
    st.builds(ChatMessage.tool_result, st.text(min_size=1), _text),
)


@given(st.lists(_message, max_size=6))
def test_a_transcript_survives_json(transcript):
    stored = loads(dumps([m.to_dict() for m in transcript]))
    assert [ChatMessage.from_dict(m) for m in stored] == transcript


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"role": "user", "content": "x", "extra": 1}, id="unknown-key"),
        pytest.param({"role": "robot", "content": "x"}, id="unknown-role"),
        pytest.param({"role": "user", "content": None}, id="content-not-str"),
        pytest.param({"role": "user"}, id="no-content"),
        pytest.param({"role": "tool", "content": "x"}, id="tool-without-id"),
        pytest.param({"role": "user", "content": "x", "tool_call_id": "c"}, id="id-on-user"),
        pytest.param(
            {"role": "user", "content": "x", "tool_calls": [{"id": "c", "name": "f"}]},
            id="calls-on-user",
        ),
        pytest.param({"role": "assistant", "content": "", "tool_calls": {}}, id="calls-not-list"),
        pytest.param(
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "f"}]},
            id="call-without-arguments",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c", "name": "f", "arguments": "{}"}],
            },
            id="arguments-not-object",
        ),
        pytest.param("user: hi", id="not-a-dict"),
    ],
)
def test_from_dict_refuses_what_to_dict_never_writes(data):
    with pytest.raises(ValueError, match=r"stored|role|tool"):
        ChatMessage.from_dict(data)


def test_tool_spec_parameters_always_serialise_as_an_object():
    bare = ToolSpec(name="now", description="the time", parameters={})
    listed = ToolSpec(name="now", description="", parameters={"type": "object", "properties": []})
    assert dumps(bare.to_dict()["parameters"]) == b'{"type":"object","properties":{}}'
    assert dumps(dict(listed.parameters)) == b'{"type":"object","properties":{}}'
    full = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    assert ToolSpec(name="s", description="d", parameters=full).to_dict() == {
        "name": "s",
        "description": "d",
        "parameters": full,
    }
    with pytest.raises(ValueError, match="name"):
        ToolSpec(name="", description="", parameters={})


def test_usage_adds_up():
    total = Usage(prompt_tokens=3, completion_tokens=4) + Usage(prompt_tokens=10)
    assert total == Usage(prompt_tokens=13, completion_tokens=4)
    assert total.total_tokens == 17
    assert Usage().total_tokens == 0
    for wrong in (-1, True, 1.5):
        with pytest.raises(ValueError, match="non-negative"):
            Usage(prompt_tokens=wrong)  # type: ignore[arg-type]


def test_provider_answer_holds_its_calls_as_a_tuple():
    call = ToolCall(id="c", name="f")
    answer = ProviderAnswer(content="", tool_calls=[call], usage=Usage(), finish_reason=None)
    assert answer.tool_calls == (call,)
    assert answer.thinking is None


def test_provider_error_keeps_its_status():
    error = ProviderError("HTTP 503: busy", status_code=503)
    assert (str(error), error.status_code) == ("HTTP 503: busy", 503)


def test_a_token_count_past_any_bill_is_held_and_so_are_sums():
    from nrllm_core._messages import TOKENS_MAX

    held = Usage(prompt_tokens=2**70, completion_tokens=TOKENS_MAX + 1)
    assert (held.prompt_tokens, held.completion_tokens) == (TOKENS_MAX, TOKENS_MAX)
    assert (held + held).prompt_tokens == TOKENS_MAX
    with pytest.raises(ValueError, match="non-negative"):
        Usage(prompt_tokens=-1)
    with pytest.raises(ValueError, match="non-negative"):
        Usage(prompt_tokens=True)

"""What the adapters send and what their answers mean, checked against the official SDKs.

Every request body of a run is captured on a loopback server and validated with the SDK's
request type (strict, unknown keys forbidden) and the semantic checks; every answer is built
with the SDK's own response model and served as its ``model_dump_json()``.
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
from anthropic import types as at
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import (
    ChatCompletionMessageFunctionToolCall,
    Function,
)
from openai.types.completion_usage import CompletionTokensDetails, PromptTokensDetails

from nrllm_core import (
    ChatMessage,
    DataClass,
    Effect,
    Tool,
    ToolContext,
    ToolResult,
    ToolSpec,
)
from nrllm_core._host import Host
from nrllm_core._loop import CUT_OFF
from nrllm_core._messages import Replay
from nrllm_core.providers import AnthropicProvider, OpenAIProvider

ROOT = Path(__file__).resolve().parents[2]
KEY = "sk-ant-test-0123456789abcdefghij"
SECRET = "sk-live-REFUSALSECRET0123456789abcdef"
PROMPT = "Grüße aus 東京 🌸: find the home page"


# -- tools ---------------------------------------------------------------------------------------


class Lookup(Tool):
    name = "lookup"
    description = "Find a page by its title."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult.text(f"Seite „{arguments['q']}“ gefunden ✓")


class Broken(Tool):
    name = "broken"
    description = "Always fails."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        raise RuntimeError("disk on fire")


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


# -- SDK-built answers ---------------------------------------------------------------------------


def oa_call(call_id: str, name: str, arguments: str) -> ChatCompletionMessageFunctionToolCall:
    return ChatCompletionMessageFunctionToolCall(
        id=call_id, type="function", function=Function(name=name, arguments=arguments)
    )


def oa(
    content: str | None = None,
    *calls: ChatCompletionMessageFunctionToolCall,
    finish: Any = None,
    refusal: str | None = None,
    usage: CompletionUsage | None = None,
    reasoning: str | None = None,
) -> str:
    message = ChatCompletionMessage(
        role="assistant", content=content, refusal=refusal, tool_calls=list(calls) or None
    )
    if reasoning is not None:
        # An extra field, as DeepSeek and vLLM send it; the SDK model keeps extras.
        message.reasoning_content = reasoning  # type: ignore[attr-defined]
    return ChatCompletion(
        id="chatcmpl-1",
        object="chat.completion",
        created=1,
        model="gpt-test",
        choices=[
            Choice(
                index=0,
                message=message,
                finish_reason=finish or ("tool_calls" if calls else "stop"),
            )
        ],
        usage=usage or CompletionUsage(prompt_tokens=10, completion_tokens=2, total_tokens=12),
    ).model_dump_json()


def an(*blocks: Any, stop: Any = None, usage: at.Usage | None = None) -> str:
    uses = any(isinstance(b, at.ToolUseBlock) for b in blocks)
    return at.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="claude-test",
        content=list(blocks),
        stop_reason=stop or ("tool_use" if uses else "end_turn"),
        stop_sequence=None,
        usage=usage or at.Usage(input_tokens=10, output_tokens=2),
    ).model_dump_json()


def text(value: str) -> at.TextBlock:
    return at.TextBlock(type="text", text=value)


def use(call_id: str, name: str, arguments: dict[str, Any]) -> at.ToolUseBlock:
    return at.ToolUseBlock(type="tool_use", id=call_id, name=name, input=arguments)


def calling(kind: str, *calls: tuple[str, str, Any], content: str | None = None) -> str:
    """One SDK-built answer of ``kind`` making ``calls`` (id, name, arguments)."""
    if kind == "openai":
        return oa(
            content,
            *(oa_call(i, n, a if isinstance(a, str) else _dumps(a)) for i, n, a in calls),
        )
    blocks = [text(content)] if content else []
    return an(*blocks, *(use(i, n, a) for i, n, a in calls))


def final(kind: str, value: str) -> str:
    return oa(value) if kind == "openai" else an(text(value))


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


# -- the host under test ----------------------------------------------------------------------


@pytest.fixture
def make_host(tmp_path: Path, server: Any, tools_plugin: Any) -> Callable[..., Host]:
    def make(kind: str, *tools: Tool, privacy: str = "full", **settings: Any) -> Host:
        section: dict[str, Any] = {"kind": kind, "model": f"{kind}-test", "trust_zone": "local"}
        if kind == "openai":
            section["base_url"] = f"{server.url}/v1"
        else:
            section |= {"base_url": server.url, "api_key_env": "TEST_ANTHROPIC_KEY"}
        return Host.from_config(
            data={
                "providers": {"model": section | settings},
                "defaults": {"provider": "model"},
                "actor": {"id": "alice"},
                "privacy": {"level": privacy},
            },
            plugins=[tools_plugin(*tools)],
            load_entry_points=False,
            data_dir=tmp_path / "home",
            environ={"TEST_ANTHROPIC_KEY": KEY},
        )

    return make


KINDS = pytest.mark.parametrize("kind", ["openai", "anthropic"])


@pytest.fixture
def checked(
    server: Any,
    openai_oracle: Callable[[Any], None],
    anthropic_oracle: Callable[[Any], None],
    semantics: dict[str, Callable[[dict[str, Any]], None]],
) -> Callable[[str], list[dict[str, Any]]]:
    """Every captured body of ``kind``, each validated by the SDK type and the semantics."""

    def check(kind: str) -> list[dict[str, Any]]:
        oracle = openai_oracle if kind == "openai" else anthropic_oracle
        for body in server.bodies:
            oracle(body)
            semantics[kind](body)
        return list(server.bodies)

    return check


def tool_messages(kind: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results of a request, as ``{"id", "content", "is_error"}``."""
    if kind == "openai":
        return [
            {"id": m["tool_call_id"], "content": m["content"], "is_error": None}
            for m in body["messages"]
            if m["role"] == "tool"
        ]
    return [
        {"id": b["tool_use_id"], "content": b["content"], "is_error": b.get("is_error")}
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


# -- captured requests: the scenarios ------------------------------------------------------------


@KINDS
def test_the_first_request_declares_the_tools_and_the_system_prompt(
    kind, make_host, server, checked
):
    server.answer(final(kind, "Hallo 👋"))
    host = make_host(kind, Lookup(), WriteNote())

    outcome = host.run(PROMPT, system="Antworte kurz. ✔")

    assert (outcome.status, outcome.final_content) == ("completed", "Hallo 👋")
    (body,) = checked(kind)
    names = [t["function"]["name"] if kind == "openai" else t["name"] for t in body["tools"]]
    assert sorted(names) == ["lookup", "write_note"]
    assert "tool_choice" not in body
    if kind == "openai":
        assert body["messages"] == [
            {"role": "system", "content": "Antworte kurz. ✔"},
            {"role": "user", "content": PROMPT},
        ]
    else:
        assert body["system"] == "Antworte kurz. ✔"
        assert body["messages"] == [{"role": "user", "content": PROMPT}]
    # Non-ASCII travels as UTF-8, not as escapes the server must undo.
    assert "東京 🌸".encode() in server.raw[0]


@KINDS
def test_results_with_and_without_errors_are_answered_in_order_and_flagged(
    kind, make_host, server, checked
):
    lookup = Lookup()
    server.answer(
        calling(
            kind,
            ("c1", "lookup", {"q": "Start"}),
            ("c2", "broken", {}),
            ("c3", "nowhere", {}),
            ("c4", "lookup", {"q": 7}),
            content="Ich schaue nach.",
        ),
        final(kind, "Erledigt."),
    )

    outcome = host_run(make_host(kind, lookup, Broken()))

    assert outcome.final_content == "Erledigt."
    assert lookup.calls == [{"q": "Start"}]
    results = tool_messages(kind, checked(kind)[1])
    assert [r["id"] for r in results] == ["c1", "c2", "c3", "c4"]
    assert results[0]["content"] == "Seite „Start“ gefunden ✓"
    assert all(r["content"].startswith("Error") for r in results[1:])
    if kind == "anthropic":
        # Every error result says so; a success carries no flag at all.
        assert [r["is_error"] for r in results] == [None, True, True, True]


def host_run(host: Host, **options: Any) -> Any:
    return host.run(PROMPT, **options)


def test_malformed_openai_arguments_go_back_as_the_model_wrote_them(make_host, server, checked):
    server.answer(calling("openai", ("c1", "lookup", '{"q": "Start"')), final("openai", "Nope."))

    outcome = host_run(make_host("openai", Lookup()))

    assert outcome.final_content == "Nope."
    sent = checked("openai")[1]["messages"]
    assert sent[1]["tool_calls"][0]["function"]["arguments"] == '{"q": "Start"'
    assert sent[1]["content"] is None
    assert sent[2]["content"].startswith("Error")


@KINDS
@pytest.mark.parametrize("approve", [True, False], ids=["approval", "denial"])
def test_an_approved_or_denied_turn_is_answered_like_any_other(
    kind, approve, make_host, server, checked
):
    note = WriteNote()
    server.answer(
        calling(kind, ("w1", "write_note", {"text": "Grüße"}), ("r1", "lookup", {"q": "x"})),
        final(kind, "Fertig."),
    )
    host = make_host(kind, note, Lookup())
    suspended = host_run(host)
    assert suspended.status == "awaiting_approval"

    outcome = host.approve(
        suspended.run_id, approve=approve, approver="alice", turn_digest=suspended.turn_digest
    )

    assert outcome.final_content == "Fertig."
    results = tool_messages(kind, checked(kind)[1])
    assert [r["id"] for r in results] == ["w1", "r1"]
    if approve:
        assert note.calls == [{"text": "Grüße"}]
        assert results[0]["content"] == "noted"
    else:
        assert note.calls == []
        assert "denied by the operator" in results[0]["content"]
        assert results[1]["content"].startswith("Error")
    if kind == "anthropic":
        flags = [None, None] if approve else [True, True]
        assert [r["is_error"] for r in results] == flags


@KINDS
def test_the_round_cap_keeps_the_tools_and_asks_for_text_only(kind, make_host, server, checked):
    lookup = Lookup()
    server.answer(
        calling(kind, ("c1", "lookup", {"q": "a"})),
        # The server ignores the tool choice: the call it makes anyway is not executed.
        calling(kind, ("c2", "lookup", {"q": "b"}), content="So weit bin ich gekommen."),
    )

    outcome = host_run(make_host(kind, lookup), max_rounds=1)

    assert (outcome.status, outcome.termination_reason) == ("completed", "max_iterations")
    assert outcome.final_content == "So weit bin ich gekommen."
    assert lookup.calls == [{"q": "a"}]
    first, last = checked(kind)
    assert last["tools"] == first["tools"]
    assert last["tool_choice"] == ("none" if kind == "openai" else {"type": "none"})
    assert "tool_choice" not in first


THINKING = at.ThinkingBlock(type="thinking", thinking="Ich brauche Daten.", signature="sig-1")
REDACTED = at.RedactedThinkingBlock(type="redacted_thinking", data="opaque-2")


def test_thinking_blocks_go_back_unchanged_with_their_signatures(make_host, server, checked):
    thinking_param = {"type": "enabled", "budget_tokens": 1024}
    server.answer(
        an(THINKING, REDACTED, text("Suche."), use("t1", "lookup", {"q": "Start"})),
        an(text("Gefunden.")),
    )
    host = make_host("anthropic", Lookup(), params={"thinking": thinking_param})

    outcome = host_run(host)

    assert outcome.final_content == "Gefunden."
    first, second = checked("anthropic")
    assert first["thinking"] == thinking_param
    assistant = second["messages"][1]
    assert assistant["role"] == "assistant"
    assert [b["type"] for b in assistant["content"]] == [
        "thinking",
        "redacted_thinking",
        "text",
        "tool_use",
    ]
    assert assistant["content"] == [
        {"type": "thinking", "thinking": "Ich brauche Daten.", "signature": "sig-1"},
        {"type": "redacted_thinking", "data": "opaque-2"},
        {"type": "text", "text": "Suche."},
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": "Start"}},
    ]


@pytest.mark.parametrize(("level", "kept"), [("full", True), ("metadata", False)])
def test_thinking_is_recorded_like_model_text(make_host, server, level, kept):
    server.answer(an(THINKING, text("Fertig.")))
    host = make_host("anthropic", privacy=level)

    run_id = host_run(host).run_id

    detail = host.store.get_run(run_id)
    assert detail is not None
    (llm,) = [s.payload for s in detail.steps if s.kind == "llm"]
    if kept:
        assert llm["thinking"] == "Ich brauche Daten."
    else:
        assert "thinking" not in llm
        assert llm["thinking_length"] == len("Ich brauche Daten.")


def _settings(server: Any, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "base_url": server.url, "api_key_env": "K", **extra}


def test_thinking_blocks_are_never_sent_to_another_provider(
    server, openai_oracle, anthropic_oracle
):
    claude = AnthropicProvider.from_settings("claude", _settings(server), environ={"K": KEY})
    server.answer(an(THINKING, use("t1", "lookup", {"q": "x"})))
    answer = claude.complete([ChatMessage.user("hi")], [LOOKUP_SPEC])
    assert answer.replay is not None
    transcript = [
        ChatMessage.user("hi"),
        ChatMessage.assistant(answer.content, answer.tool_calls, replay=answer.replay),
        ChatMessage.tool_result("t1", "found"),
    ]
    other = AnthropicProvider.from_settings("other", _settings(server), environ={"K": KEY})
    gpt = OpenAIProvider.from_settings(
        "gpt", _settings(server, base_url=f"{server.url}/v1"), environ={"K": KEY}
    )

    for provider, oracle in (
        (claude, anthropic_oracle),
        (other, anthropic_oracle),
        (gpt, openai_oracle),
    ):
        body = provider.request_body(transcript, [LOOKUP_SPEC])
        oracle(body)
        shown = repr(body)
        assert ("sig-1" in shown) is (provider is claude)
        assert ("Ich brauche Daten." in shown) is (provider is claude)


def test_replayed_blocks_lose_the_answers_nulls_but_never_the_models_input(
    server, anthropic_oracle
):
    claude = AnthropicProvider.from_settings("claude", _settings(server), environ={"K": KEY})
    server.answer(an(THINKING, text("Suche."), use("t1", "lookup", {"q": None})))
    answer = claude.complete([ChatMessage.user("hi")], [LOOKUP_SPEC])
    assert answer.replay is not None
    transcript = [
        ChatMessage.user("hi"),
        ChatMessage.assistant(answer.content, answer.tool_calls, replay=answer.replay),
        ChatMessage.tool_result("t1", "found"),
    ]

    body = claude.request_body(transcript, [LOOKUP_SPEC])

    anthropic_oracle(body)
    assert body["messages"][1]["content"] == [
        {"type": "thinking", "thinking": "Ich brauche Daten.", "signature": "sig-1"},
        {"type": "text", "text": "Suche."},
        {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": None}},
    ]


LOOKUP_SPEC = ToolSpec(name="lookup", description="Find.", parameters=Lookup.parameters)


def test_a_stored_transcript_keeps_flags_replays_and_raw_arguments():
    call = ChatMessage.assistant(
        "",
        [],
        replay=Replay(origin="anthropic:claude:m", blocks=[THINKING.model_dump()]),
    )
    result = ChatMessage.tool_result("t1", "Error: no", is_error=True)
    for message in (call, result):
        assert ChatMessage.from_dict(message.to_dict()) == message
    with pytest.raises(ValueError, match="tool message"):
        ChatMessage.from_dict({"role": "user", "content": "x", "is_error": True})


# -- answers: what a run makes of them -----------------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        oa("Die Antwort ist", finish="length"),
        an(text("Die Antwort ist"), stop="max_tokens"),
    ],
    ids=["openai", "anthropic"],
)
def test_an_answer_cut_off_at_its_limit_completes_truncated(answer, make_host, server):
    server.answer(answer)
    kind = "openai" if "chat.completion" in answer else "anthropic"

    outcome = host_run(make_host(kind, Lookup()))

    assert (outcome.status, outcome.termination_reason) == ("completed", "truncated")
    assert outcome.truncated is True
    assert outcome.to_dict()["truncated"] is True
    assert outcome.final_content == "Die Antwort ist"


@KINDS
def test_calls_in_a_truncated_answer_are_answered_never_executed(kind, make_host, server):
    lookup = Lookup()
    if kind == "openai":
        server.answer(oa(None, oa_call("c1", "lookup", '{"q": "Start"}'), finish="length"))
    else:
        server.answer(an(use("c1", "lookup", {"q": "Start"}), stop="max_tokens"))
    host = make_host(kind, lookup)

    outcome = host_run(host)

    assert outcome.termination_reason == "truncated"
    assert lookup.calls == []
    detail = host.store.get_run(outcome.run_id)
    assert detail is not None
    (tool,) = [s.payload for s in detail.steps if s.kind == "tool"]
    assert (tool["tool_name"], tool["tool_result"], tool["tool_is_error"]) == (
        "lookup",
        CUT_OFF,
        True,
    )


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            oa(None, refusal=f"I can't help with that ({SECRET})."),
            "I can't help with that (sk-***).",
        ),
        (oa(None, finish="content_filter"), "The provider's content filter stopped the answer."),
        (an(text(f"Nein ({SECRET})."), stop="refusal"), "Nein (sk-***)."),
        (an(stop="refusal"), "The model refused to answer."),
    ],
    ids=["openai-refusal", "openai-filter", "anthropic-refusal", "anthropic-empty"],
)
def test_a_refusal_ends_the_run_with_its_redacted_text(answer, expected, make_host, server):
    server.answer(answer)
    kind = "openai" if "chat.completion" in answer else "anthropic"

    outcome = host_run(make_host(kind, Lookup()))

    assert (outcome.status, outcome.termination_reason) == ("completed", "refused")
    assert outcome.final_content == expected


def test_a_refusal_is_bounded(make_host, server):
    from nrllm_core.redact import LEAF_MAX_CHARS, TRUNCATION_MARKER

    server.answer(oa(None, refusal="nein " * 2000))

    outcome = host_run(make_host("openai"))

    assert outcome.final_content == ("nein " * 2000)[:LEAF_MAX_CHARS] + TRUNCATION_MARKER


@pytest.mark.parametrize(("rounds", "reason"), [(3, "completed"), (1, "max_iterations")])
def test_a_paused_turn_is_sent_back_and_continued_within_the_cap(
    rounds, reason, make_host, server, checked
):
    search = at.ServerToolUseBlock(
        type="server_tool_use", id="srv_1", name="web_search", input={"query": "Start"}
    )
    paused = an(text("Ich suche."), search, stop="pause_turn")
    server.answer(paused, an(text("Gefunden.")))

    outcome = host_run(make_host("anthropic", Lookup()), max_rounds=rounds)

    assert (outcome.termination_reason, outcome.final_content) == (reason, "Gefunden.")
    _, second = checked("anthropic")
    # The paused turn goes back as the last message, the model continues it; as it came, but
    # for the answer's nulls ("caller": null), which a request does not take.
    assert json.loads(paused)["content"][1]["caller"] is None
    assert second["messages"][-1] == {
        "role": "assistant",
        "content": [
            {"type": "text", "text": "Ich suche."},
            {
                "type": "server_tool_use",
                "id": "srv_1",
                "name": "web_search",
                "input": {"query": "Start"},
            },
        ],
    }
    assert ("tool_choice" in second) is (rounds == 1)


@pytest.mark.parametrize(
    "answer",
    [
        oa(None, oa_call("", "lookup", "{}")),
        oa(None, oa_call("c1", "lookup", "{}")).replace('"id":"c1",', ""),
        an(use("", "lookup", {})),
    ],
    ids=["openai-empty", "openai-missing", "anthropic-empty"],
)
def test_a_call_without_an_id_fails_the_run_naming_the_problem(answer, make_host, server):
    server.answer(answer)
    kind = "openai" if "chat.completion" in answer else "anthropic"
    lookup = Lookup()

    outcome = host_run(make_host(kind, lookup))

    assert (outcome.status, outcome.termination_reason) == ("failed", "provider_failed")
    assert "a tool call with an empty or missing id" in (outcome.error or "")
    assert lookup.calls == []


@KINDS
def test_an_error_object_in_a_200_answer_fails_with_its_message_and_code(kind, make_host, server):
    server.answer({"error": {"message": f"upstream broke, key {SECRET}", "code": "bad_gateway"}})

    outcome = host_run(make_host(kind))

    assert outcome.status == "failed"
    assert outcome.error == (
        'the model provider failed: provider "model" answered with an error: '
        "upstream broke, key sk-*** (code bad_gateway)"
    )


def test_anthropic_text_blocks_are_joined_with_a_blank_line(make_host, server):
    server.answer(an(text("Erstens."), text("Zweitens.")))

    assert host_run(make_host("anthropic")).final_content == "Erstens.\n\nZweitens."


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        (
            oa(
                "ok",
                usage=CompletionUsage(
                    prompt_tokens=100,
                    completion_tokens=40,
                    total_tokens=140,
                    prompt_tokens_details=PromptTokensDetails(cached_tokens=64),
                    completion_tokens_details=CompletionTokensDetails(reasoning_tokens=25),
                ),
            ),
            {
                "prompt_tokens": 100,
                "completion_tokens": 40,
                "cached_tokens": 64,
                "reasoning_tokens": 25,
            },
        ),
        (
            an(
                text("ok"),
                usage=at.Usage(
                    input_tokens=10,
                    output_tokens=5,
                    cache_read_input_tokens=100,
                    cache_creation_input_tokens=50,
                ),
            ),
            {
                "prompt_tokens": 160,
                "completion_tokens": 5,
                "cached_tokens": 100,
                "reasoning_tokens": 0,
            },
        ),
    ],
    ids=["openai", "anthropic"],
)
def test_usage_counts_what_the_provider_billed(answer, expected, make_host, server):
    server.answer(answer)
    kind = "openai" if "chat.completion" in answer else "anthropic"
    host = make_host(kind, privacy="metadata")

    outcome = host_run(host)

    assert outcome.to_dict()["usage"] == expected
    detail = host.store.get_run(outcome.run_id)
    assert detail is not None
    (llm,) = [s.payload for s in detail.steps if s.kind == "llm"]
    assert {k: llm[k] for k in expected} == expected
    # The model that answered, and the cache writes (Anthropic only) apart from the reads.
    assert llm["response_model"] == ("gpt-test" if kind == "openai" else "claude-test")
    assert llm.get("cache_creation_tokens") == (None if kind == "openai" else 50)


def test_token_counts_past_any_bill_are_held_and_the_answer_is_recorded(make_host, server):
    from nrllm_core._messages import TOKENS_MAX

    huge = 2**64 - 1
    server.answer(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": huge, "cache_read_input_tokens": huge, "output_tokens": 1},
        }
    )
    host = make_host("anthropic", privacy="metadata")

    outcome = host_run(host)

    assert outcome.status == "completed"
    assert outcome.to_dict()["usage"]["prompt_tokens"] == TOKENS_MAX
    detail = host.store.get_run(outcome.run_id)
    assert detail is not None
    # The answer's step is stored, not dropped for a count no encoder or column holds.
    assert [s.kind for s in detail.steps] == ["start", "gate", "request", "llm", "finish"]
    assert host.store.verify(outcome.run_id).broken == ()


def test_openai_reasoning_content_is_recorded_as_thinking_and_never_sent_back(
    make_host, server, checked
):
    server.answer(
        oa(None, oa_call("c1", "lookup", '{"q": "a"}'), reasoning="Hmm, Daten."),
        oa("Fertig."),
    )
    host = make_host("openai", Lookup())

    outcome = host_run(host)

    detail = host.store.get_run(outcome.run_id)
    assert detail is not None
    assert [s.payload.get("thinking") for s in detail.steps if s.kind == "llm"] == [
        "Hmm, Daten.",
        None,
    ]
    assert "Hmm, Daten." not in repr(checked("openai")[1])


# -- the SDKs are oracles only -------------------------------------------------------------------


def test_nrllm_never_imports_the_sdks():
    sources = [
        *(ROOT / "nrllm_core").rglob("*.py"),
        *(ROOT / "plugins").glob("*/nrllm_*/**/*.py"),
    ]
    imported = set()
    for path in sources:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                imported.add(node.module.split(".")[0])
    assert "httpx" in imported  # the scan sees the adapters' own imports
    assert {"openai", "anthropic"}.isdisjoint(imported)
    code = (
        "import sys, nrllm_core, nrllm_core.providers, nrllm_core.cli, nrllm_core.inspector\n"
        "from nrllm_core import make_plugin_manager\n"
        "make_plugin_manager(load_entry_points=True).provider_registry()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic')))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"

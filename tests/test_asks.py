"""What a running call asks of its run (``ToolContext.ask_model`` and ``ask_person``): each
ask a step of the calling run, a model asked only within its zone's ceiling and with no tools,
a person only through the host's handler, and nothing of either on the run's wire."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from nrllm_core import (
    AskRefused,
    AsyncHost,
    ChatMessage,
    DataClass,
    Host,
    PersonAnswer,
    PersonAnswered,
    Question,
    StepKind,
    Tool,
    ToolContext,
    ToolResult,
    TrustZone,
)
from nrllm_core.store import Store

SECRET_QUESTION = "What is the launch code?"


class Summarise(Tool):
    """Asks the provider its arguments name for a summary, as an MCP server's sampling does."""

    name = "summarise"
    description = "Summarises through another model."
    group = "content"
    data_class = DataClass.SOURCE_CODE
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"provider": {"type": "string"}},
        "required": ["provider"],
    }

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        try:
            answer = context.ask_model(
                arguments["provider"], [ChatMessage.user("summarise: rows")], max_tokens=50_000
            )
        except AskRefused as refused:
            return ToolResult.error(f"refused: {refused}")
        return ToolResult.text(f"summary: {answer.content}")


class Ask(Tool):
    name = "ask"
    description = "Asks the person a question."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        schema = {"type": "object", "properties": {"code": {"type": "string"}}}
        answer = context.ask_person(SECRET_QUESTION, schema)
        got = "" if answer.content is None else str(answer.content.get("code"))
        return ToolResult.text(f"{answer.action.value} {len(got)}")


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": "c1", "name": name, "arguments": arguments}]}


def host_of(nrllm: Any, handler: Any = None) -> Host:
    return Host(
        pm=nrllm.pm,
        config_loader=nrllm._config,
        store=Store.open(None, data_dir=nrllm.folder),
        data_dir=nrllm.folder,
        environ={},
        on_elicitation=handler,
    )


def steps(nrllm: Any, kind: StepKind) -> list[Any]:
    return [e.step for e in nrllm.sinks.trace if e.step.kind is kind]


def test_a_model_in_an_admitting_zone_answers_and_the_ask_is_a_step(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Summarise()))
    helper = nrllm.scripted([{"content": "three rows"}], zone=TrustZone.LOCAL)
    outcome = nrllm.run(
        "go",
        script=[call("summarise", provider=helper), {"content": "done"}],
        zone=TrustZone.LOCAL,
    )
    assert outcome.status == "completed"
    (step,) = steps(nrllm, StepKind.SAMPLING)
    assert step.fields["provider"] == helper
    assert step.fields["content"] == "three rows"
    assert step.fields["data_class"] == "sourceCode"
    # Asked for more than the limit: the provider is asked for the limit.
    assert step.fields["max_tokens"] == 32_768
    # The helper model was offered no tools.
    asked = [
        tools for messages, tools in nrllm.requests if messages[-1].content == "summarise: rows"
    ]
    assert asked == [()]
    (tool_step,) = steps(nrllm, StepKind.TOOL)
    assert tool_step.fields["tool_result"] == "summary: three rows"
    # The metadata audit keeps the ask's shape, not its text.
    (record,) = [r for r in nrllm.sinks.audit if r.kind is StepKind.SAMPLING]
    assert "content" not in record.payload
    assert "messages_sent" not in record.payload
    assert record.payload["content_length"] == len("three rows")


HOSTILE_MODEL = "gpt-" + "AKIA" + "IOSFODNN7EXAMPLE" + "x" * 100_000


def test_below_full_the_audit_keeps_no_free_text_the_asked_provider_wrote(
    tools_plugin, nrllm, monkeypatch
):
    from nrllm_core import _asks
    from nrllm_core._messages import ProviderAnswer, ProviderError, Usage

    answer = ProviderAnswer(
        content="three rows",
        tool_calls=(),
        usage=Usage(),
        finish_reason="stop",
        response_model=HOSTILE_MODEL,
    )
    answers = iter([answer, ProviderError("")])

    def complete(provider: Any, messages: Any, tools: Any) -> ProviderAnswer:
        given = next(answers)
        if isinstance(given, ProviderError):
            raise ProviderError(f"HTTP 400: the prompt was {messages[-1].content}")
        return given

    monkeypatch.setattr(_asks, "complete", complete)
    nrllm.load(tools_plugin(Summarise()))
    helper = nrllm.scripted([], zone=TrustZone.LOCAL)
    script = [call("summarise", provider=helper), call("summarise", provider=helper)]
    nrllm.run("go", script=[*script, {"content": "done"}], zone=TrustZone.LOCAL)
    answered, failed = [r.payload for r in nrllm.sinks.audit if r.kind is StepKind.SAMPLING]
    # The model's name is masked and cut as an answer's is; nothing is kept as "model".
    assert "model" not in answered
    assert "AKIA" not in answered["response_model"]
    assert len(answered["response_model"]) < 300
    # A provider's failure is recorded, and told to the tool, as fixed text.
    assert failed["refused"] == f'provider "{helper}" failed'
    tool_steps = [r.payload for r in nrllm.sinks.audit if r.kind is StepKind.TOOL]
    assert "summarise: rows" not in str(tool_steps)


def test_a_model_whose_zone_does_not_admit_the_tools_data_is_never_asked(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Summarise()))
    outside = nrllm.scripted([{"content": "never"}], zone=TrustZone.EXTERNAL_GLOBAL)
    nrllm.run(
        "go",
        script=[call("summarise", provider=outside), {"content": "done"}],
        zone=TrustZone.LOCAL,
    )
    (step,) = steps(nrllm, StepKind.SAMPLING)
    assert "ceiling does not admit sourceCode" in step.fields["refused"]
    assert "content" not in step.fields
    assert not any(m[-1].content.startswith("summarise") for m, _ in nrllm.requests)
    (tool_step,) = steps(nrllm, StepKind.TOOL)
    assert tool_step.fields["tool_result"].startswith("refused: provider")


def test_an_unknown_provider_is_refused(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Summarise()))
    nrllm.run(
        "go", script=[call("summarise", provider="nope"), {"content": "done"}], zone=TrustZone.LOCAL
    )
    (step,) = steps(nrllm, StepKind.SAMPLING)
    assert step.fields["refused"] == 'no provider named "nope" is configured'


def test_outside_a_run_a_model_cannot_be_asked_and_a_person_declines(tools_plugin, nrllm):
    context = ToolContext(run_id="r", call_id="c", actor=nrllm.host.config.actor)
    with pytest.raises(AskRefused, match="only from a call of a run"):
        context.ask_model("any", [ChatMessage.user("x")], max_tokens=1)
    assert context.ask_person("q?", {}).action is PersonAnswered.DECLINE


def test_without_a_handler_every_question_is_declined(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Ask()))
    nrllm.run("go", script=[call("ask"), {"content": "done"}])
    (step,) = steps(nrllm, StepKind.ELICITATION)
    assert (step.fields["asked"], step.fields["action"]) == (False, "decline")
    (tool_step,) = steps(nrllm, StepKind.TOOL)
    assert tool_step.fields["tool_result"] == "decline 0"


def test_the_hosts_handler_answers_and_the_question_never_reaches_the_model(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Ask()))
    asked: list[Question] = []

    def handler(question: Question) -> PersonAnswer:
        asked.append(question)
        return PersonAnswer.accepted({"code": "0000"})

    host = host_of(nrllm, handler)
    script = nrllm.scripted([call("ask"), {"content": "done"}])
    outcome = host.run("go", provider=script)
    assert outcome.status == "completed"
    (question,) = asked
    assert (question.tool, question.message, question.run_id) == (
        "ask",
        SECRET_QUESTION,
        outcome.run_id,
    )
    (step,) = steps(nrllm, StepKind.ELICITATION)
    assert step.fields["answer"] == {"code": "0000"}
    assert step.fields["action"] == "accept"
    wire = " ".join(str(m.to_dict()) for messages, _ in nrllm.requests for m in messages)
    assert SECRET_QUESTION not in wire
    assert "0000" not in wire
    (record,) = [r for r in nrllm.sinks.audit if r.kind is StepKind.ELICITATION]
    assert "question" not in record.payload
    assert "answer" not in record.payload


@pytest.mark.parametrize("returned", [RuntimeError("boom"), "yes"], ids=["raises", "not-answer"])
def test_a_failing_handler_cancels_the_question(tools_plugin, nrllm, returned):
    nrllm.load(tools_plugin(Ask()))

    def handler(question: Question) -> Any:
        if isinstance(returned, Exception):
            raise returned
        return returned

    host = host_of(nrllm, handler)
    host.run("go", provider=nrllm.scripted([call("ask"), {"content": "done"}]))
    (step,) = steps(nrllm, StepKind.ELICITATION)
    assert step.fields["action"] == "cancel"


@pytest.mark.anyio
async def test_an_async_hosts_calls_ask_through_the_same_handler(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Ask()))
    host = AsyncHost(host_of(nrllm, lambda q: PersonAnswer.accepted({"code": "12"})))
    outcome = await host.run("go", provider=nrllm.scripted([call("ask"), {"content": "ok"}]))
    assert outcome.status == "completed"
    (tool_step,) = steps(nrllm, StepKind.TOOL)
    assert tool_step.fields["tool_result"] == "accept 2"


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"max_tokens": None, "max_completion_tokens": None}, {"max_tokens": 100}),
        ({"max_tokens": 20, "max_completion_tokens": None}, {"max_tokens": 20}),
        ({"max_tokens": None, "max_completion_tokens": 500}, {"max_completion_tokens": 100}),
    ],
)
def test_the_provider_is_asked_for_the_smaller_of_its_own_and_the_asked_bound(section, expected):
    from nrllm_core._asks import _bounded

    assert _bounded(dict(section), 100).items() >= expected.items()

"""A run as spans: names, kinds, parents, attributes, events and metrics, at ``metadata``."""

from __future__ import annotations

import time

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from nrllm_core import (
    AuditRecord,
    DataClass,
    Effect,
    StepKind,
    Tool,
    ToolContext,
    ToolResult,
)


def call(name: str, call_id: str, **arguments):
    return {"id": call_id, "name": name, "arguments": arguments}


def tool_turn(*calls: dict) -> dict:
    return {
        "content": "working",
        "tool_calls": list(calls),
        "usage": {"prompt_tokens": 11, "completion_tokens": 3},
    }


def final(text: str = "all done") -> dict:
    return {"content": text, "usage": {"prompt_tokens": 20, "completion_tokens": 5}}


CHAT_CONTENT = {"gen_ai.input.messages", "gen_ai.output.messages"}
TOOL_CONTENT = {"gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}


def metadata_of(span) -> dict:
    """A span's attributes without the content ones, which only some levels add."""
    return {k: v for k, v in span.attributes.items() if k not in CHAT_CONTENT | TOOL_CONTENT}


@pytest.mark.parametrize("level", ["none", "metadata", "redacted", "full"])
def test_a_run_is_an_invoke_agent_span_with_a_chat_and_a_tool_child(make_host, otel, echo, level):
    host = make_host([tool_turn(call("echo", "call_1", text="hi")), final()], echo(), level=level)
    outcome = host.run("Say hi")
    content = level in ("redacted", "full")
    assert outcome.status == "completed"
    (run,) = otel.named("invoke_agent")
    chats = otel.named("chat")
    (tool,) = otel.named("execute_tool")
    assert run.name == "invoke_agent nrllm"
    assert run.kind is SpanKind.INTERNAL
    assert run.parent is None
    # The metadata attributes are the same at every level; content only adds its own keys.
    assert dict(run.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "nrllm",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "tiny-1",
        "gen_ai.conversation.id": outcome.run_id,
        "nrllm.provider": "model",
        "nrllm.trust_zone": "local",
        "nrllm.run.kind": "run",
        "nrllm.run.status": "completed",
        "nrllm.termination": "completed",
    }
    assert run.status.status_code is StatusCode.UNSET
    assert "error.type" not in run.attributes
    assert [c.name for c in chats] == ["chat tiny-1", "chat tiny-1"]
    for span in [*chats, tool]:
        assert span.parent is not None
        assert span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id
        assert run.start_time <= span.start_time <= span.end_time <= run.end_time
    first = chats[0]
    assert first.kind is SpanKind.CLIENT
    for chat in chats:
        assert set(chat.attributes) & CHAT_CONTENT == (CHAT_CONTENT if content else set())
    assert metadata_of(first) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "tiny-1",
        "server.address": "models.example",
        "server.port": 8111,
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ("tool_calls",),
        # The first request: the model had read nothing yet.
        "nrllm.label.data_class": "publicContent",
        "nrllm.label.integrity": "trusted",
    }
    assert tool.kind is SpanKind.INTERNAL
    assert tool.name == "execute_tool echo"
    assert set(tool.attributes) & TOOL_CONTENT == (TOOL_CONTENT if content else set())
    assert metadata_of(tool) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
        "gen_ai.tool.description": "The echo tool.",
        "gen_ai.tool.call.id": "call_1",
        "gen_ai.tool.type": "function",
        "nrllm.tool.data_class": "systemDiagnostics",
        "nrllm.tool.effect": "read_only",
        "nrllm.tool.artifact_types": ("table",),
        "nrllm.tool.result": "ok",
    }
    (gate,) = [e for e in run.events if e.name == "nrllm.gate.decision"]
    assert gate.attributes["nrllm.gate.offered"] == ("echo",)


def test_a_tool_error_and_a_refused_call_set_the_tool_span_status_and_count(make_host, otel, echo):
    host = make_host(
        [
            tool_turn(call("echo", "c0", text="x"), call("broken", "c1"), call("nope", "c2")),
            final(),
        ],
        echo(),
        echo("broken", fails=True),
    )
    host.run("Go")
    fine, broken, unknown = otel.named("execute_tool")
    assert fine.status.status_code is StatusCode.UNSET
    assert "error.type" not in fine.attributes
    assert broken.status.status_code is StatusCode.ERROR
    assert broken.attributes["nrllm.tool.result"] == "error"
    assert broken.attributes["error.type"] == "tool_error"
    assert unknown.status.status_code is StatusCode.ERROR
    assert unknown.attributes["nrllm.tool.result"] == "refused"
    assert unknown.attributes["error.type"] == "refused"
    counted = {
        (
            p.attributes["gen_ai.tool.name"],
            p.attributes["nrllm.tool.result"],
            p.attributes.get("nrllm.tool.data_class"),
        ): p.value
        for p in otel.points("nrllm.tool.calls")
    }
    # A name no tool has has no data class to count it under, nor a label of its own.
    assert counted == {
        ("echo", "ok", "systemDiagnostics"): 1,
        ("broken", "error", "systemDiagnostics"): 1,
        ("unknown", "refused", None): 1,
    }


@pytest.mark.parametrize(("level", "shown"), [("metadata", False), ("full", True)])
def test_a_name_the_model_made_up_is_in_no_metric_and_no_span_below_redacted(
    make_host, otel, echo, level, shown
):
    made_up = "the password is hunter2"
    host = make_host([tool_turn(call(made_up, "c0")), final()], echo(), level=level)
    host.run("Go")
    (span,) = otel.named("execute_tool")
    assert (made_up in span.name, span.attributes["gen_ai.tool.name"] == made_up) == (
        shown,
        shown,
    )
    assert [p.attributes["gen_ai.tool.name"] for p in otel.points("nrllm.tool.calls")] == [
        "unknown"
    ]


SENT = '[{"role":"user","parts":[{"type":"text","content":"Hello"}]}]'


@pytest.mark.parametrize("level", ["metadata", "redacted"])
def test_a_failed_model_call_is_an_error_chat_span_and_a_duration_with_its_error_type(
    make_host, otel, level
):
    host = make_host([], level=level)  # the script has no turn for the first request
    outcome = host.run("Hello")
    assert outcome.status == "failed"
    (run,) = otel.named("invoke_agent")
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes["nrllm.run.status"] == "failed"
    assert run.attributes["nrllm.termination"] == "provider_failed"
    assert run.attributes["error.type"] == "provider_failed"
    (chat,) = otel.named("chat")
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.parent.span_id == run.context.span_id
    assert chat.end_time <= run.end_time
    assert dict(chat.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "tiny-1",
        "server.address": "models.example",
        "server.port": 8111,
        "error.type": "provider_failed",
        # What was sent, at the levels with content; no answer came.
        **({"gen_ai.input.messages": SENT} if level == "redacted" else {}),
    }
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.count == 1
    assert duration.attributes["error.type"] == "provider_failed"
    assert otel.points("gen_ai.client.token.usage") == []


def test_the_histograms_carry_the_conventions_attributes(make_host, otel, echo):
    host = make_host([tool_turn(call("echo", "c1", text="x")), final()], echo())
    host.run("Go")
    usage = otel.points("gen_ai.client.token.usage")
    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in usage}
    assert by_type == {"input": 31, "output": 8}
    for point in usage:
        assert point.attributes["gen_ai.operation.name"] == "chat"
        assert point.attributes["gen_ai.provider.name"] == "scripted"
        assert point.attributes["gen_ai.request.model"] == "tiny-1"
        assert point.attributes["server.address"] == "models.example"
        assert point.attributes["server.port"] == 8111
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.count == 2
    assert duration.attributes["gen_ai.operation.name"] == "chat"
    assert "error.type" not in duration.attributes


def test_a_direct_invoke_is_a_run_of_kind_invoke(make_host, otel, echo):
    host = make_host([], echo())
    host.invoke("echo", {"text": "hi"})
    (run,) = otel.named("invoke_agent")
    assert run.name == "invoke_agent nrllm"
    assert run.attributes["gen_ai.agent.name"] == "nrllm"
    assert run.attributes["nrllm.run.kind"] == "invoke"
    (tool,) = otel.named("execute_tool")
    assert tool.parent.span_id == run.context.span_id


def test_a_skill_run_names_its_skill_and_the_gate_event_its_refusals(make_host, otel, echo):
    host = make_host(
        [final()],
        echo(),
        echo("note"),
        sections={"skills": {"lookup": {"allowed_tools": ["echo"]}}},
    )
    assert host.run("Go", skill="lookup").status == "completed"
    (run,) = otel.named("invoke_agent")
    assert run.attributes["nrllm.skill"] == "lookup"
    (gate,) = [e for e in run.events if e.name == "nrllm.gate.decision"]
    assert dict(gate.attributes) == {
        "nrllm.gate.offered": ("echo",),
        "nrllm.gate.refused": ("note:configurationGroup",),
        "nrllm.gate.observed": (),
    }


@pytest.mark.parametrize(
    ("enforcement", "offered", "refused", "observed"),
    [
        ("enforce", (), ("echo:trustZone",), ()),
        ("observe", ("echo",), (), ("echo:trustZone",)),
    ],
)
def test_the_gate_event_shows_what_observe_mode_let_through(
    make_host, otel, echo, enforcement, offered, refused, observed
):
    # systemDiagnostics is above externalGlobal's ceiling.
    host = make_host(
        [final()],
        echo(),
        zone="externalGlobal",
        sections={"tools": {"data_class_enforcement": enforcement}},
    )
    host.run("Go")
    (run,) = otel.named("invoke_agent")
    (gate,) = [e for e in run.events if e.name == "nrllm.gate.decision"]
    assert dict(gate.attributes) == {
        "nrllm.gate.offered": offered,
        "nrllm.gate.refused": refused,
        "nrllm.gate.observed": observed,
    }


def test_a_steps_span_lasts_its_duration_and_a_chat_span_carries_the_response_id(otel):
    # Fed to the sink directly: the scripted provider gives no response id, and a real run's
    # durations are whatever the machine took.
    def record(sequence, kind, duration_ms=0.0, **payload):
        otel.sink.nrllm_audit(
            AuditRecord(
                run_id="run-1",
                sequence=sequence,
                kind=kind,
                round=1,
                duration_ms=duration_ms,
                payload=payload,
            )
        )

    record(0, StepKind.START, provider="gpt", provider_kind="openai", model="gpt-x", run_kind="run")
    record(1, StepKind.REQUEST)
    record(2, StepKind.LLM, 250.0, response_id="chatcmpl-7", finish_reason="tool_calls")
    record(3, StepKind.TOOL, 40.0, tool_name="echo", tool_call_id="c1")
    record(4, StepKind.FINISH, status="completed", termination_reason="completed")
    (chat,) = otel.named("chat")
    assert chat.attributes["gen_ai.response.id"] == "chatcmpl-7"
    assert chat.end_time - chat.start_time == 250_000_000
    (tool,) = otel.named("execute_tool")
    assert tool.end_time - tool.start_time == 40_000_000
    (duration,) = otel.points("gen_ai.client.operation.duration")
    assert duration.count == 1
    assert duration.sum == 0.25


def test_an_approval_asked_inline_by_invoke_is_an_event_with_who_and_when(make_host, otel, echo):
    write = echo("write_note", effect=Effect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    host = make_host([], write)
    assert not host.invoke("write_note", {"text": "x"}, approve=lambda call, digest: "bob").is_error
    (run,) = otel.named("invoke_agent")
    (approval,) = [e for e in run.events if e.name == "nrllm.approval"]
    assert approval.attributes["nrllm.approval.decision"] == "approved"
    assert approval.attributes["nrllm.approval.approver"] == "bob"
    assert approval.attributes["nrllm.approval.decided_at"].endswith("+00:00")


def test_otel_enabled_false_emits_no_span_and_no_metric(make_host, otel, echo):
    host = make_host(
        [tool_turn(call("echo", "c1", text="x")), final()],
        echo(),
        sections={"otel": {"enabled": False}},
    )
    assert host.run("Go").status == "completed"
    assert otel.finished() == []
    assert otel.points("nrllm.tool.calls") == []


def test_a_suspension_ends_the_span_with_its_pending_calls_and_the_resume_links_to_it(
    make_host, otel, echo
):
    write = echo("write_note", effect=Effect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    host = make_host([tool_turn(call("write_note", "c9", text="x")), final()], write)
    suspended = host.run("Write")
    assert suspended.status == "awaiting_approval"
    (first,) = otel.named("invoke_agent")
    assert first.attributes["nrllm.run.status"] == "awaiting_approval"
    (event,) = [e for e in first.events if e.name == "nrllm.suspension"]
    assert dict(event.attributes) == {
        "nrllm.turn_digest": suspended.turn_digest,
        "nrllm.pending.call_ids": ("c9",),
        "nrllm.pending.tools": ("write_note",),
        "nrllm.pending.requires_approval": (True,),
    }
    assert host.store.suspension(suspended.run_id).trace_context["traceparent"].split("-")[1] == (
        f"{first.context.trace_id:032x}"
    )
    done = host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)
    assert done.status == "completed"
    _, resumed = otel.named("invoke_agent")
    assert resumed.context.trace_id == first.context.trace_id
    assert resumed.parent.span_id == first.context.span_id
    (link,) = resumed.links
    assert link.context.span_id == first.context.span_id
    (approval,) = [e for e in resumed.events if e.name == "nrllm.approval"]
    assert approval.attributes["nrllm.approval.decision"] == "approved"
    assert approval.attributes["nrllm.approval.approver"] == "bob"
    assert approval.attributes["nrllm.approval.decided_at"].endswith("+00:00")
    (tool,) = otel.named("execute_tool")
    assert tool.parent.span_id == resumed.context.span_id


def test_a_denial_is_an_event_and_its_refused_call_is_counted(make_host, otel, echo):
    write = echo("write_note", effect=Effect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    host = make_host([tool_turn(call("write_note", "c9", text="x")), final()], write)
    suspended = host.run("Write")
    host.approve(suspended.run_id, approve=False, approver="bob", turn_digest=suspended.turn_digest)
    (approval,) = [
        e for s in otel.named("invoke_agent") for e in s.events if e.name == "nrllm.approval"
    ]
    assert approval.attributes["nrllm.approval.decision"] == "denied"
    (tool,) = otel.named("execute_tool")
    assert tool.attributes["nrllm.tool.result"] == "refused"


def test_cached_and_reasoning_tokens_appear_where_the_provider_gave_them(make_host, otel):
    usage = {
        "prompt_tokens": 40,
        "completion_tokens": 9,
        "cached_tokens": 32,
        "reasoning_tokens": 6,
    }
    make_host([{"content": "ok", "usage": usage}]).run("Go")
    (chat,) = otel.named("chat")
    assert chat.attributes["gen_ai.usage.input_tokens"] == 40
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 32
    assert chat.attributes["gen_ai.usage.reasoning.output_tokens"] == 6


def test_the_entry_point_module_never_sets_a_global_provider(tmp_path):
    import json

    from opentelemetry import metrics, trace

    import nrllm_otel
    from nrllm_core import Host, make_plugin_manager

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "ok"}]}), encoding="utf-8")
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(nrllm_otel, name="otel")
    host = Host.from_config(
        data={
            "providers": {"model": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
        },
        pm=pm,
        data_dir=tmp_path / "home",
        environ={},
    )
    assert host.run("Hi").status == "completed"
    host.store.close()
    # The API's own proxies: nothing was configured, so the spans went to the no-op tracer.
    assert type(trace.get_tracer_provider()).__name__ == "ProxyTracerProvider"
    assert type(metrics.get_meter_provider()).__name__ == "_ProxyMeterProvider"


def test_an_enabled_that_is_not_a_boolean_is_refused_when_the_configuration_loads(make_host):
    from nrllm_core import ConfigError

    with pytest.raises(ConfigError, match=r"otel\.enabled"):
        make_host([final()], sections={"otel": {"enabled": "no"}}).run("Go")


@pytest.mark.parametrize("level", ["none", "metadata", "redacted"])
def test_below_full_a_call_id_the_model_chose_is_exported_masked_and_alike_in_each_span(
    make_host, otel, echo, level
):
    write = echo("write_note", effect=Effect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    host = make_host(
        [tool_turn(call("write_note", "id_AKIAIOSFODNN7EXAMPLE", text="x")), final()],
        write,
        level=level,
    )
    suspended = host.run("Write")
    host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)

    first, _ = otel.named("invoke_agent")
    (event,) = [e for e in first.events if e.name == "nrllm.suspension"]
    (tool,) = otel.named("execute_tool")
    assert event.attributes["nrllm.pending.call_ids"] == ("id_***",)
    assert tool.attributes["gen_ai.tool.call.id"] == "id_***"
    for span in otel.finished():
        exported = [*span.attributes.values()]
        exported += [value for e in span.events for value in e.attributes.values()]
        assert "AKIAIOSFODNN7EXAMPLE" not in repr(exported)


def test_the_agent_is_named_by_otel_agent_name(make_host, otel, echo):
    host = make_host([final()], echo(), sections={"otel": {"agent_name": "support-desk"}})
    host.run("Go")
    host.invoke("echo", {"text": "hi"})
    runs = otel.named("invoke_agent")
    assert [r.name for r in runs] == ["invoke_agent support-desk"] * 2
    assert [r.attributes["gen_ai.agent.name"] for r in runs] == ["support-desk"] * 2


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 129, 7])
def test_an_agent_name_that_is_no_short_printable_text_is_refused_when_the_configuration_loads(
    make_host, name
):
    from nrllm_core import ConfigError

    with pytest.raises(ConfigError, match=r"otel\.agent_name"):
        make_host([final()], sections={"otel": {"agent_name": name}}).run("Go")


def test_a_chat_span_without_a_model_is_named_chat(otel):
    # A provider with no model configured: the span is named after the operation alone, never
    # after the provider's kind.
    otel.sink.nrllm_audit(start_record(provider="gpt", provider_kind="openai"))
    otel.sink.nrllm_audit(step_record(1, StepKind.REQUEST))
    otel.sink.nrllm_audit(step_record(2, StepKind.LLM, finish_reason="stop"))
    otel.sink.nrllm_audit(step_record(3, StepKind.FINISH, status="completed"))
    (chat,) = otel.named("chat")
    assert chat.name == "chat"
    assert "gen_ai.request.model" not in chat.attributes
    assert chat.attributes["gen_ai.provider.name"] == "openai"


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("openai", "openai"),
        ("openai-responses", "openai"),
        ("anthropic", "anthropic"),
        ("gemini", "gcp.gemini"),
        ("bedrock", "aws.bedrock"),
    ],
)
def test_the_provider_name_is_the_conventions_name_of_the_kinds_api(otel, kind, name):
    from opentelemetry.semconv._incubating.attributes.gen_ai_attributes import (
        GenAiProviderNameValues,
    )

    otel.sink.nrllm_audit(start_record(provider="p", provider_kind=kind, model="m"))
    otel.sink.nrllm_audit(step_record(1, StepKind.REQUEST))
    otel.sink.nrllm_audit(step_record(2, StepKind.LLM, finish_reason="stop"))
    otel.sink.nrllm_audit(step_record(3, StepKind.FINISH, status="completed"))
    (chat,) = otel.named("chat m")
    assert chat.attributes["gen_ai.provider.name"] == name
    assert name in {v.value for v in GenAiProviderNameValues}


def test_a_chat_span_carries_what_the_model_had_read(otel):
    label = {
        "data_class": "editorContent",
        "integrity": "untrusted",
        "untrusted_from": ["read_page"],
    }
    otel.sink.nrllm_audit(start_record(provider="p", provider_kind="openai", model="m"))
    otel.sink.nrllm_audit(step_record(1, StepKind.REQUEST, label=label))
    otel.sink.nrllm_audit(step_record(2, StepKind.LLM, finish_reason="stop"))
    otel.sink.nrllm_audit(step_record(3, StepKind.FINISH, status="completed"))
    (chat,) = otel.named("chat m")
    assert chat.attributes["nrllm.label.data_class"] == "editorContent"
    assert chat.attributes["nrllm.label.integrity"] == "untrusted"
    assert chat.attributes["nrllm.label.untrusted_from"] == ("read_page",)


def start_record(**payload) -> AuditRecord:
    return step_record(0, StepKind.START, run_kind="run", **payload)


def step_record(sequence: int, kind: StepKind, duration_ms: float = 0.0, **payload) -> AuditRecord:
    return AuditRecord(
        run_id="run-1",
        sequence=sequence,
        kind=kind,
        round=1,
        duration_ms=duration_ms,
        payload=payload,
    )


@pytest.mark.parametrize(
    ("section", "names"),
    [
        ({"agent_name": "desk"}, ["invoke_agent desk"]),
        # Not checked by core as a plain section: a bad name falls back, a bad switch is off.
        ({"agent_name": "a\nb"}, ["invoke_agent nrllm"]),
        ({"enabled": "yes"}, []),
    ],
)
def test_a_plain_section_is_read_as_the_settings_class_would_be(otel, section, names):
    otel.sink.nrllm_settings(section)
    otel.sink.nrllm_audit(start_record())
    otel.sink.nrllm_audit(step_record(1, StepKind.FINISH, status="completed"))
    assert [s.name for s in otel.finished()] == names


class Slow(Tool):
    """Answers after longer than the run lets a call take."""

    name = "slow"
    description = "Takes its time."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict, context: ToolContext) -> ToolResult:
        time.sleep(1.0)
        return ToolResult.text("late")


def test_a_timed_out_call_is_an_error_span_with_error_type_timeout(make_host, otel):
    host = make_host(
        [tool_turn(call("slow", "c1")), final()],
        Slow(),
        sections={"run": {"tool_timeout_seconds": 0.1}},
    )
    assert host.run("Go").status == "completed"
    (tool,) = otel.named("execute_tool")
    assert tool.status.status_code is StatusCode.ERROR
    assert tool.attributes["error.type"] == "timeout"
    assert tool.attributes["nrllm.tool.result"] == "timeout"
    (point,) = otel.points("nrllm.tool.calls")
    assert point.attributes["nrllm.tool.result"] == "timeout"


def test_a_chat_span_carries_the_answering_model_and_the_cache_writes(otel):
    otel.sink.nrllm_audit(start_record(provider="claude", provider_kind="anthropic", model="c-4"))
    otel.sink.nrllm_audit(step_record(1, StepKind.REQUEST))
    otel.sink.nrllm_audit(
        step_record(
            2,
            StepKind.LLM,
            response_model="c-4-20250514",
            prompt_tokens=160,
            cached_tokens=100,
            cache_creation_tokens=50,
        )
    )
    otel.sink.nrllm_audit(step_record(3, StepKind.FINISH, status="completed"))
    (chat,) = otel.named("chat")
    assert chat.attributes["gen_ai.request.model"] == "c-4"
    assert chat.attributes["gen_ai.response.model"] == "c-4-20250514"
    assert chat.attributes["gen_ai.usage.cache_read.input_tokens"] == 100
    assert chat.attributes["gen_ai.usage.cache_creation.input_tokens"] == 50

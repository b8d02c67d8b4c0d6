"""A run as spans: names, kinds, parents, attributes, events and metrics, at ``metadata``."""

from __future__ import annotations

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from nrllm_core import Effect


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


def test_a_run_is_an_invoke_agent_span_with_a_chat_and_a_tool_child(make_host, otel, echo):
    host = make_host([tool_turn(call("echo", "call_1", text="hi")), final()], echo())
    outcome = host.run("Say hi")
    assert outcome.status == "completed"
    (run,) = otel.named("invoke_agent")
    chats = otel.named("chat")
    (tool,) = otel.named("execute_tool")
    assert run.name == "invoke_agent model"
    assert run.kind is SpanKind.INTERNAL
    assert run.parent is None
    assert dict(run.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
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
    assert [c.name for c in chats] == ["chat tiny-1", "chat tiny-1"]
    for span in [*chats, tool]:
        assert span.parent is not None
        assert span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id
        assert run.start_time <= span.start_time <= span.end_time <= run.end_time
    first = chats[0]
    assert first.kind is SpanKind.CLIENT
    assert dict(first.attributes) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.request.model": "tiny-1",
        "server.address": "models.example",
        "server.port": 8111,
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert tool.kind is SpanKind.INTERNAL
    assert tool.name == "execute_tool echo"
    assert dict(tool.attributes) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "echo",
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
        [tool_turn(call("broken", "c1"), call("nope", "c2")), final()],
        echo("broken", fails=True),
    )
    host.run("Go")
    broken, unknown = otel.named("execute_tool")
    assert broken.status.status_code is StatusCode.ERROR
    assert broken.attributes["nrllm.tool.result"] == "error"
    assert unknown.status.status_code is StatusCode.ERROR
    assert unknown.attributes["nrllm.tool.result"] == "refused"
    counted = {
        (p.attributes["gen_ai.tool.name"], p.attributes["nrllm.tool.result"]): p.value
        for p in otel.points("nrllm.tool.calls")
    }
    assert counted == {("broken", "error"): 1, ("nope", "refused"): 1}
    (with_class,) = [
        p for p in otel.points("nrllm.tool.calls") if "nrllm.tool.data_class" in p.attributes
    ]
    assert with_class.attributes["nrllm.tool.data_class"] == "systemDiagnostics"


def test_a_failed_run_has_an_error_status(make_host, otel, echo, tmp_path):
    host = make_host([])  # the script has no turn for the first request
    outcome = host.run("Hello")
    assert outcome.status == "failed"
    (run,) = otel.named("invoke_agent")
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes["nrllm.run.status"] == "failed"
    assert run.attributes["nrllm.termination"] == outcome.termination_reason


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


def test_a_direct_invoke_is_a_run_of_kind_invoke(make_host, otel, echo):
    host = make_host([], echo())
    host.invoke("echo", {"text": "hi"})
    (run,) = otel.named("invoke_agent")
    assert run.name == "invoke_agent direct"
    assert run.attributes["nrllm.run.kind"] == "invoke"
    (tool,) = otel.named("execute_tool")
    assert tool.parent.span_id == run.context.span_id


def test_otel_enabled_false_emits_no_span_and_no_metric(make_host, otel, echo):
    host = make_host(
        [tool_turn(call("echo", "c1", text="x")), final()], echo(), otel_section={"enabled": False}
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
        make_host([final()], otel_section={"enabled": "no"}).run("Go")

"""The trace context a suspension stores: the span's, when there is one; never a warning for a
normal suspension, whatever OpenTelemetry the host configured."""

from __future__ import annotations

from structlog.testing import capture_logs

import nrllm_otel
from nrllm_core import Effect


def call(name: str, call_id: str, **arguments):
    return {"id": call_id, "name": name, "arguments": arguments}


TURNS = [
    {"content": "working", "tool_calls": [call("write_note", "c9", text="x")]},
    {"content": "ok"},
]


def warnings_in(logs: list[dict]) -> list[dict]:
    return [e for e in logs if e["log_level"] in ("warning", "error", "critical")]


def test_a_suspension_on_the_hosts_no_op_tracer_stores_no_context_and_warns_nothing(
    make_host, echo
):
    # The entry point's sink on the global providers, which nobody configured: its span is a
    # no-op with no trace to resume, so it answers no context at all.
    write = echo("write_note", effect=Effect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    host = make_host(TURNS, write, sink=nrllm_otel)
    with capture_logs() as logs:
        suspended = host.run("Write")
        assert suspended.status == "awaiting_approval"
        assert host.store.suspension(suspended.run_id).trace_context is None
        done = host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)
    assert done.status == "completed"
    assert warnings_in(logs) == []


def test_a_suspension_on_a_configured_tracer_stores_its_span_and_warns_nothing(
    make_host, otel, echo
):
    write = echo("write_note", effect=Effect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    host = make_host(TURNS, write)
    with capture_logs() as logs:
        suspended = host.run("Write")
    (span,) = otel.named("invoke_agent")
    stored = host.store.suspension(suspended.run_id).trace_context
    ids = f"{span.context.trace_id:032x}-{span.context.span_id:016x}"
    assert stored == {"traceparent": f"00-{ids}-{span.context.trace_flags:02x}"}
    assert warnings_in(logs) == []

"""Content follows the audit's privacy level; artifacts only at ``full``, as span events."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def call(name: str, call_id: str, **arguments):
    return {"id": call_id, "name": name, "arguments": arguments}


TURNS = [
    {"content": "let me look", "tool_calls": [call("echo", "c1", text="ARG-TEXT")]},
    {"content": "FINAL-ANSWER"},
]
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
)


def everything(otel) -> str:
    """Every exported span (attributes, events, links) and every metric, as text."""
    spans = [s.to_json() for s in otel.finished()]
    data = otel.metrics.get_metrics_data()
    return "\n".join([*spans, data.to_json() if data else ""])


@pytest.mark.parametrize("level", ["none", "metadata"])
def test_below_redacted_no_text_arguments_results_or_artifacts(make_host, otel, echo, level):
    make_host(TURNS, echo(artifact="CELL-BYTES"), level=level).run("PROMPT-TEXT")
    exported = everything(otel)
    for text in (
        "PROMPT-TEXT",
        "ARG-TEXT",
        "echo: ARG-TEXT",
        "FINAL-ANSWER",
        "CELL-BYTES",
        "let me look",
    ):
        assert text not in exported
    for span in otel.finished():
        assert not set(CONTENT_KEYS) & set(span.attributes)
        assert all(e.name != "nrllm.tool.artifact" for e in span.events)


def test_redacted_carries_the_redacted_text_as_the_conventions_attributes(make_host, otel, echo):
    secret = "sk-live-ABCDEFGHIJKLMNOPQRSTUVWX"
    turns = [
        {"content": "let me look", "tool_calls": [call("echo", "c1", text=f"key {secret}")]},
        {"content": "FINAL-ANSWER"},
    ]
    make_host(turns, echo(artifact="CELL-BYTES"), level="redacted").run("PROMPT-TEXT")
    first, second = otel.named("chat")
    (tool,) = otel.named("execute_tool")
    sent = json.loads(first.attributes["gen_ai.input.messages"])
    assert sent == [{"role": "user", "parts": [{"type": "text", "content": "PROMPT-TEXT"}]}]
    answered = json.loads(first.attributes["gen_ai.output.messages"])
    assert answered[0]["role"] == "assistant"
    assert answered[0]["parts"][0] == {"type": "text", "content": "let me look"}
    assert answered[0]["parts"][1]["name"] == "echo"
    assert json.loads(second.attributes["gen_ai.output.messages"])[0]["parts"] == [
        {"type": "text", "content": "FINAL-ANSWER"}
    ]
    arguments = tool.attributes["gen_ai.tool.call.arguments"]
    assert "key " in arguments
    assert secret not in arguments
    assert tool.attributes["gen_ai.tool.call.result"].startswith("echo: key ")
    exported = everything(otel)
    assert secret not in exported
    assert "CELL-BYTES" not in exported
    assert all(e.name != "nrllm.tool.artifact" for e in tool.events)


def test_full_adds_the_artifacts_as_span_events(make_host, otel, echo):
    make_host(TURNS, echo(artifact="CELL-BYTES"), level="full").run("PROMPT-TEXT")
    (tool,) = otel.named("execute_tool")
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"text":"ARG-TEXT"}'
    assert tool.attributes["gen_ai.tool.call.result"] == "echo: ARG-TEXT"
    (event,) = tool.events
    assert event.name == "nrllm.tool.artifact"
    assert event.attributes["nrllm.artifact.type"] == "table"
    assert "CELL-BYTES" in event.attributes["nrllm.artifact"]


# Artifact text the model and the tool's content never contain: a marker plus random text.
artifact_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40
).map(lambda t: f"ZQX{t}")


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cell=artifact_text, level=st.sampled_from(["none", "metadata", "redacted"]))
def test_below_full_no_artifact_byte_reaches_any_export(make_host, otel, echo, cell, level):
    otel.spans.clear()
    make_host(TURNS, echo(artifact=cell), level=level).run("PROMPT-TEXT")
    assert otel.named("execute_tool")
    exported = everything(otel)
    encoded = json.dumps(cell)[1:-1]  # how a JSON export would spell it
    assert cell not in exported
    assert encoded not in exported
    assert "ZQX" not in exported

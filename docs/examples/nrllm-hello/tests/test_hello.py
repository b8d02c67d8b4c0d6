"""The example plugin, registered from its source folder without installing it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

import nrllm_core
from nrllm_core import DataClass, ToolContext, WirePayload
from nrllm_core.testing import SinkRecorder

PACKAGE = Path(__file__).resolve().parent.parent / "nrllm_hello" / "__init__.py"


def load_plugin() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nrllm_hello", PACKAGE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sinks() -> SinkRecorder:
    """Keeps what each sink received."""
    return SinkRecorder()


@pytest.fixture
def pm(sinks: SinkRecorder) -> nrllm_core.PluginManager:
    return nrllm_core.make_plugin_manager(plugins=[load_plugin(), sinks], load_entry_points=False)


def context() -> ToolContext:
    return ToolContext(run_id="run-1", call_id="call-1", actor=nrllm_core.Actor(id="author"))


def test_word_count_is_registered_with_its_classification(pm: nrllm_core.PluginManager) -> None:
    registered = pm.catalog().get("word_count")
    assert registered is not None
    assert registered.group == "content"
    assert registered.data_class is DataClass.EDITOR_CONTENT
    assert registered.data_class_source == "declared"
    assert registered.parameters == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "additionalProperties": False,
        "required": ["text"],
    }


def test_wire_gets_the_summary_and_no_artifact(
    pm: nrllm_core.PluginManager, sinks: SinkRecorder
) -> None:
    returned = nrllm_core.invoke(
        pm, "word_count", {"text": "the cat saw the other cat. The end!"}, context=context()
    )

    expected = WirePayload(
        call_id="call-1",
        tool_name="word_count",
        content="8 words, 5 distinct. Most frequent: the (3), cat (2), saw (1), other (1), end (1)",
        is_error=False,
    )
    assert returned == expected
    assert sinks.wire == [expected]


def test_trace_and_audit_get_the_table(pm: nrllm_core.PluginManager, sinks: SinkRecorder) -> None:
    nrllm_core.invoke(pm, "word_count", {"text": "b a b"}, context=context())

    table = {
        "type": "table",
        "label": "Most frequent words",
        "data": {"columns": ["word", "count"], "rows": [["b", "2"], ["a", "1"]]},
    }
    [event] = sinks.trace
    assert event.run_id == "run-1"
    assert event.step.fields["tool_arguments"] == {"text": "b a b"}
    assert event.step.fields["tool_result"] == "3 words, 2 distinct. Most frequent: b (2), a (1)"
    assert [a.to_dict() for a in event.step.tool_artifacts] == [table]
    [record] = sinks.audit
    assert record.sequence == event.sequence
    # The audit copy is privacy-filtered (metadata by default): counts, not the table.
    assert record.payload["tool_artifact_types"] == ["table"]


def test_a_text_without_words_is_an_error_without_artifacts(
    pm: nrllm_core.PluginManager, sinks: SinkRecorder
) -> None:
    wire = nrllm_core.invoke(pm, "word_count", {"text": " ... !"}, context=context())

    assert wire.is_error
    assert wire.content == "Error: the text has no words."
    assert sinks.trace[0].step.tool_artifacts == ()
    assert "tool_artifacts" not in sinks.audit[0].payload


def test_the_table_lists_only_the_most_frequent_words(
    pm: nrllm_core.PluginManager, sinks: SinkRecorder
) -> None:
    text = " ".join(f"w{i} " * (i + 1) for i in range(30))

    nrllm_core.invoke(pm, "word_count", {"text": text}, context=context())

    [artifact] = sinks.trace[0].step.tool_artifacts
    rows = artifact.data["rows"]
    assert [row[0] for row in rows] == [f"w{i}" for i in range(29, 19, -1)]


def test_arguments_outside_the_schema_never_reach_the_tool(
    pm: nrllm_core.PluginManager, sinks: SinkRecorder
) -> None:
    wire = nrllm_core.invoke(pm, "word_count", {"text": 42}, context=context())

    assert wire.is_error
    assert wire.content.startswith('Error: invalid arguments for tool "word_count"')
    assert sinks.trace[0].step.tool_artifacts == ()

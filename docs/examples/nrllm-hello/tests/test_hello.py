"""The example plugin, loaded from its source folder by the nrllm fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from nrllm_core import DataClass, RunStatus, TrustZone

PLUGIN = Path(__file__).resolve().parent.parent / "nrllm_hello"


def test_word_count_is_registered_with_its_classification(nrllm) -> None:
    nrllm.load(PLUGIN)

    registered = nrllm.pm.catalog().get("word_count")
    assert registered is not None
    assert registered.plugin == "hello"
    assert registered.data_class is DataClass.EDITOR_CONTENT
    assert registered.parameters == {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "additionalProperties": False,
        "required": ["text"],
    }


def test_the_wire_gets_the_summary_and_the_trace_the_table(nrllm) -> None:
    nrllm.load(PLUGIN)

    call = nrllm.invoke("word_count", text="b a b")

    assert call.content == "3 words, 2 distinct. Most frequent: b (2), a (1)"
    [table] = call.artifacts
    assert table.data == {"columns": ["word", "count"], "rows": [["b", "2"], ["a", "1"]]}
    # The audit copy is privacy-filtered (metadata by default): counts, not the table.
    assert call.audit.payload["tool_artifact_types"] == ["table"]
    assert "tool_artifacts" not in call.audit.payload


def test_the_table_stays_off_the_wire(nrllm) -> None:
    nrllm.load(PLUGIN)
    call = {"name": "word_count", "arguments": {"text": "the cat saw the other cat"}}

    nrllm.invoke("word_count", text="the cat saw the other cat")
    nrllm.run("Count the words.", script=[{"tool_calls": [call]}, {"content": "6 words."}])

    # Words the summary names are its own content; any other table cell would be a leak.
    nrllm.assert_no_artifact_on_wire()


def test_a_text_without_words_is_an_error_without_artifacts(nrllm) -> None:
    nrllm.load(PLUGIN)

    call = nrllm.invoke("word_count", text=" ... !")

    assert call.is_error
    assert call.content == "Error: the text has no words."
    assert call.artifacts == ()


def test_arguments_outside_the_schema_never_reach_the_tool(nrllm) -> None:
    nrllm.load(PLUGIN)

    call = nrllm.invoke("word_count", text=42)

    assert call.is_error
    assert call.content.startswith('Error: invalid arguments for tool "word_count"')


def test_save_note_waits_for_approval_and_then_writes(nrllm, tmp_path: Path) -> None:
    nrllm.load(PLUGIN, settings={"notes_dir": str(tmp_path)})
    script = [
        {"tool_calls": [{"name": "save_note", "arguments": {"title": "Tea", "text": "Oolong"}}]},
        {"content": "Saved."},
    ]

    waiting = nrllm.run("Note that I like oolong.", script=script, zone=TrustZone.LOCAL)

    assert waiting.status is RunStatus.AWAITING_APPROVAL
    [pending] = waiting.pending
    assert pending.preview == (f"Write {tmp_path / 'tea.txt'}", "1 words")
    assert not (tmp_path / "tea.txt").exists()
    done = nrllm.approve(waiting)
    assert done.final_content == "Saved."
    assert (tmp_path / "tea.txt").read_text(encoding="utf-8") == "Oolong\n"


def test_a_denied_note_is_not_written(nrllm, tmp_path: Path) -> None:
    nrllm.load(PLUGIN, settings={"notes_dir": str(tmp_path)})
    call = {"name": "save_note", "arguments": {"title": "Tea", "text": "Oolong"}}

    waiting = nrllm.run("Note it.", script=[{"tool_calls": [call]}, {"content": "No."}])
    nrllm.deny(waiting)

    assert list(tmp_path.iterdir()) == []


@pytest.mark.nrllm_settings({"max_note_words": 3})
def test_the_settings_section_limits_a_note(nrllm) -> None:
    nrllm.load(PLUGIN)

    call = nrllm.invoke("save_note", title="Long", text="one two three four")

    assert call.content == "Error: a note has at most 3 words."


def test_both_tools_are_offered_to_an_external_model(nrllm) -> None:
    nrllm.load(PLUGIN)

    report = nrllm.offered(TrustZone.EXTERNAL_GLOBAL)

    # editorContent is within an external model's ceiling; the write still needs approval.
    assert set(report.offered_names) == {"save_note", "word_count"}

"""A tool's question to the person at the terminal: shown inert, answered field by field only
when the person says so, declined when its schema asks for what a terminal cannot give."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from nrllm_core import PersonAnswered, Question
from nrllm_core.cli._questions import ask_on_terminal

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "sure": {"type": "boolean"},
        "colour": {"type": "string", "enum": ["red", "blue"]},
    },
}


def question(message: str = "Which?", schema: Any = SCHEMA) -> Question:
    return Question(run_id="r", call_id="c", tool="mcp__ask", message=message, schema=schema)


def asked(q: Question, typed: str) -> tuple[Any, str]:
    runner = CliRunner()
    with runner.isolation(input=typed) as (_, err, _output):
        answer = ask_on_terminal(q)
        return answer, err.getvalue().decode()


def test_each_field_is_asked_for_and_typed():
    answer, shown = asked(question(), "y\nAda\n3\n0.5\ny\nblue\n")
    assert answer.action is PersonAnswered.ACCEPT
    assert answer.content == {
        "name": "Ada",
        "count": 3,
        "ratio": 0.5,
        "sure": True,
        "colour": "blue",
    }
    assert shown.startswith("tool mcp__ask asks:\nWhich?\nAnswer it?")


def test_no_answer_unless_the_person_says_so():
    answer, _ = asked(question(), "\n")
    assert answer.action is PersonAnswered.DECLINE
    assert answer.content is None


def test_the_servers_text_is_shown_inert():
    _, shown = asked(question("\x1b[2Jpay\u202e now"), "n\n")
    assert "\x1b" not in shown
    assert "\u202e" not in shown
    assert "\\x1b[2Jpay\\u202e now" in shown


def test_a_schema_a_terminal_cannot_answer_is_declined_unasked():
    nested = {"type": "object", "properties": {"deep": {"type": "object"}}}
    answer, shown = asked(question(schema=nested), "y\n")
    assert answer.action is PersonAnswered.DECLINE
    assert "Answer it?" not in shown


def test_a_choice_shown_escaped_is_answered_as_the_choice_itself():
    schema = {
        "type": "object",
        "properties": {"mode": {"type": "string", "enum": ["a\x1bb", "plain"]}},
    }
    answer, shown = asked(question(schema=schema), "y\na\\x1bb\n")
    assert "\x1b" not in shown
    assert answer.content == {"mode": "a\x1bb"}

"""A tool's question to a person in a live inspector run: put to the run's own page, answered
through the guarded POST, cancelled past the time limit, declined when the page is gone."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from starlette.testclient import TestClient

from nrllm_core import DataClass, Tool, ToolContext, ToolResult, hookimpl
from nrllm_core._ask_values import PersonAnswer, PersonAnswered, Question
from nrllm_core.inspector import PageQuestions, create_app
from nrllm_core.inspector._questions import UnknownQuestion

from .conftest import make_host

TOKEN = "question-token"
ORIGIN = "http://127.0.0.1:8765"
HOSTILE = "<img src=x onerror=alert(1)> which?"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": HOSTILE},
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "sure": {"type": "boolean"},
        "colour": {"type": "string", "enum": ["red", "blue"]},
    },
    "required": ["name"],
}


class AskTool(Tool):
    name = "ask_tool"
    description = "Asks the person."
    group = "inspector"
    data_class = DataClass.PUBLIC_CONTENT

    def __init__(self) -> None:
        self.answers: list[PersonAnswer] = []

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        answer = context.ask_person(HOSTILE, SCHEMA)
        self.answers.append(answer)
        return ToolResult.text(f"answered {answer.action.value}")


class AskPlugin:
    def __init__(self, tool: AskTool) -> None:
        self.tool = tool

    @hookimpl
    def nrllm_register_tools(self, registry: Any) -> None:
        registry.register(self.tool)


def question(run_id: str = "r1", schema: dict[str, Any] | None = None) -> Question:
    return Question(run_id=run_id, call_id="c1", tool="t", message=HOSTILE, schema=schema or SCHEMA)


class Page:
    """What one live page was sent."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.asked = threading.Event()

    def __call__(self, data: dict[str, Any]) -> None:
        self.sent.append(json.loads(json.dumps(data)))
        if data["event"] == "question":
            self.asked.set()

    @property
    def question_id(self) -> str:
        assert self.asked.wait(timeout=10)
        return str(self.sent[0]["question_id"])


def asking(questions: PageQuestions, q: Question) -> tuple[threading.Thread, list[PersonAnswer]]:
    got: list[PersonAnswer] = []
    thread = threading.Thread(target=lambda: got.append(questions(q)))
    thread.start()
    return thread, got


def test_the_page_answers_and_the_call_gets_the_answer():
    questions = PageQuestions(timeout=lambda: 10)
    page = Page()
    questions.watch("r1", page)
    thread, got = asking(questions, question())
    content = {"name": "x", "count": 2, "ratio": 0.5, "sure": True, "colour": "red"}
    questions.answer(page.question_id, PersonAnswer.accepted(content))
    thread.join(timeout=10)
    assert got == [PersonAnswer.accepted(content)]
    asked, closed = page.sent
    assert asked["message"] == HOSTILE
    assert asked["tool"] == "t"
    assert [f["name"] for f in asked["fields"]] == ["name", "count", "ratio", "sure", "colour"]
    assert asked["fields"][0] == {
        "name": "name",
        "type": "string",
        "title": HOSTILE,
        "description": None,
        "enum": None,
        "required": True,
    }
    assert asked["fields"][4]["enum"] == ["red", "blue"]
    assert closed == {
        "event": "question_closed",
        "question_id": asked["question_id"],
        "action": "accept",
    }
    # Answered once: a second answer finds no question.
    with pytest.raises(UnknownQuestion):
        questions.answer(asked["question_id"], PersonAnswer.declined())


@pytest.mark.parametrize("answer", [PersonAnswer.declined(), PersonAnswer.cancelled()])
def test_decline_and_cancel_reach_the_call(answer):
    questions = PageQuestions(timeout=lambda: 10)
    page = Page()
    questions.watch("r1", page)
    thread, got = asking(questions, question())
    questions.answer(page.question_id, answer)
    thread.join(timeout=10)
    assert got == [answer]


def test_no_answer_in_time_is_cancel():
    questions = PageQuestions(timeout=lambda: 0.05)
    page = Page()
    questions.watch("r1", page)
    assert questions(question()) == PersonAnswer.cancelled()
    assert page.sent[-1]["action"] == "cancel"


def test_a_page_that_goes_away_declines():
    questions = PageQuestions(timeout=lambda: 10)
    page = Page()
    questions.watch("r1", page)
    thread, got = asking(questions, question())
    page.question_id  # noqa: B018 - waits until asked
    questions.unwatch("r1")
    thread.join(timeout=10)
    assert got == [PersonAnswer.declined()]


@pytest.mark.parametrize(
    "content",
    [
        {"name": "x", "other": "x"},
        {"name": "x", "count": "2"},
        {"name": "x", "count": True},
        {"name": "x", "sure": 1},
        {"name": "x", "colour": "green"},
        {"count": 2},
        {},
    ],
    ids=[
        "unasked",
        "string-for-integer",
        "bool-for-integer",
        "int-for-boolean",
        "not-a-choice",
        "required-left-out",
        "empty",
    ],
)
def test_an_answer_that_does_not_fit_is_refused_and_the_question_stays(content):
    questions = PageQuestions(timeout=lambda: 10)
    page = Page()
    questions.watch("r1", page)
    thread, got = asking(questions, question())
    with pytest.raises(ValueError, match="nswer"):
        questions.answer(page.question_id, PersonAnswer.accepted(content))
    questions.answer(page.question_id, PersonAnswer.declined())
    thread.join(timeout=10)
    assert got == [PersonAnswer.declined()]


def test_an_unknown_question_is_refused():
    with pytest.raises(UnknownQuestion):
        PageQuestions().answer("nope", PersonAnswer.declined())


def test_a_question_no_page_watches_or_no_form_can_hold_is_declined(monkeypatch):
    monkeypatch.setattr("nrllm_core.inspector._questions._WATCH_GRACE_SECONDS", 0.01)
    questions = PageQuestions(timeout=lambda: 10)
    assert questions(question("unwatched")) == PersonAnswer.declined()
    page = Page()
    questions.watch("r1", page)
    nested = {"type": "object", "properties": {"a": {"type": "object"}}}
    assert questions(question(schema=nested)) == PersonAnswer.declined()
    assert page.sent == []


# -- through the app --------------------------------------------------------------------------


@pytest.fixture
def served(tmp_path):
    tool = AskTool()
    questions = PageQuestions()
    host = make_host(tmp_path, plugins=[AskPlugin(tool)], on_elicitation=questions)
    with TestClient(create_app(host, token=TOKEN, questions=questions), base_url=ORIGIN) as client:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        yield client, questions, tool
    host.store.close()


def open_question(questions: PageQuestions) -> str:
    deadline = time.monotonic() + 10
    while not questions._open:
        assert time.monotonic() < deadline, "no question was asked"
        time.sleep(0.01)
    return next(iter(questions._open))


def run_asking(client: TestClient) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        response = client.post(
            "/api/run", json={"prompt": "Ask", "provider": "asking"}, headers={"Origin": ORIGIN}
        )
        out.extend(json.loads(line) for line in response.text.splitlines())

    thread = threading.Thread(target=run)
    thread.start()
    return thread, out


def test_the_runs_page_answers_through_the_guarded_endpoint(served):
    client, questions, tool = served
    thread, stream = run_asking(client)
    question_id = open_question(questions)
    path = f"/api/questions/{question_id}"
    body = {"action": "accept", "content": {"name": "Ada"}}
    # The same guard as every state-changing request: another origin, no cookie.
    assert (
        client.post(path, json=body, headers={"Origin": "http://evil.example"}).status_code == 403
    )
    assert (
        client.post("/api/questions/not-an-id", json=body, headers={"Origin": ORIGIN}).status_code
        == 404
    )
    for content in ({"name": 3}, {}):
        bad = {"action": "accept", "content": content}
        assert client.post(path, json=bad, headers={"Origin": ORIGIN}).status_code == 400
    assert (
        client.post(path, json={"action": "maybe"}, headers={"Origin": ORIGIN}).status_code == 400
    )
    answered = client.post(path, json=body, headers={"Origin": ORIGIN})
    assert (answered.status_code, answered.json()) == (200, {"action": "accept"})
    thread.join(timeout=30)
    assert tool.answers == [PersonAnswer.accepted({"name": "Ada"})]
    asked = next(e for e in stream if e["event"] == "question")
    assert asked["question_id"] == question_id
    assert asked["message"] == HOSTILE
    kinds = [e["step"]["kind"] if e["event"] == "step" else e["event"] for e in stream]
    assert kinds.index("question") < kinds.index("question_closed") < kinds.index("tool")
    assert "elicitation" in kinds
    assert stream[-1]["event"] == "done"
    # Over: the question can no longer be answered.
    again = client.post(path, json=body, headers={"Origin": ORIGIN})
    assert again.status_code == 404


def test_the_answer_endpoint_without_page_questions_is_404(tmp_path):
    host = make_host(tmp_path)
    with TestClient(create_app(host, token=TOKEN), base_url=ORIGIN) as client:
        client.get(f"/?token={TOKEN}")
        response = client.post(
            "/api/questions/x", json={"action": "decline"}, headers={"Origin": ORIGIN}
        )
        assert response.status_code == 404
    host.store.close()
    assert PersonAnswered.DECLINE.value == "decline"

"""What a server asks during a call, each capability off until configured: a model's
completion (sampling) through a provider whose zone admits the server's data class, and the
person's answer (elicitation) through the host's handler; each a step of the calling run, for
servers of the 2026-07-28 revision ("input required") and of the handshake era alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from nrllm_core import Host, PersonAnswer, Question

from .conftest import READ_ONLY, stdio_server

# The newest revision over stdio, a handshake-era one over stdio, the newest over HTTP.
REVISIONS = [None, "2025-11-25", "http"]
SECRET = "the launch code is 0000"


def script(folder: Path, name: str, turns: list[dict[str, Any]]) -> str:
    path = folder / f"{name}.json"
    path.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return str(path)


def calls(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": "c1", "name": tool, "arguments": arguments}]}


@pytest.fixture
def setup(configure, state: Path, tmp_path: Path, request: pytest.FixtureRequest):
    def write(revision: str | None, *, helper_zone: str = "local", **server: Any) -> None:
        if revision == "http":
            # Streamable HTTP, of the newest revision (stateless: "input required").
            transport = {"url": request.getfixturevalue("http_server")}
        else:
            transport = stdio_server(state)
        if revision not in (None, "http"):
            (state / "revision").write_text(revision, encoding="utf-8")
        helper = script(tmp_path, "helper", [{"content": f"summary {n}"} for n in range(5)])
        extra = (
            '[privacy]\nlevel = "full"\n'
            '[providers.main]\nkind = "scripted"\ntrust_zone = "local"\n'
            f"script = {json.dumps(str(tmp_path / 'main.json'))}\n"
            f'[providers.helper]\nkind = "scripted"\ntrust_zone = "{helper_zone}"\n'
            f"script = {json.dumps(helper)}\n"
        )
        settings = {"read_only_tools": READ_ONLY, "data_class": "sourceCode", **server}
        configure({"demo": {**transport, **settings}}, extra)

    return write


class Ran:
    def __init__(self, host: Host, outcome: Any, logs: list[dict[str, Any]]) -> None:
        self.outcome = outcome
        self.steps = host.store.get_run(outcome.run_id).steps
        self.logs = logs

    def of(self, kind: str) -> list[Any]:
        return [s.payload for s in self.steps if s.kind == kind]

    @property
    def said(self) -> str:
        (tool,) = self.of("tool")
        return str(tool["tool_result"])


def run(home: Path, tmp_path: Path, tool: str, handler: Any = None, **arguments: Any) -> Ran:
    script(tmp_path, "main", [calls(tool, **arguments), {"content": "done"}])
    host = Host.from_config(data_dir=home, on_elicitation=handler)
    try:
        with capture_logs() as logs:
            outcome = host.run("go", provider="main")
        assert outcome.status == "completed"
        return Ran(host, outcome, logs)
    finally:
        host.store.close()


def refused(ran: Ran, revision: str | None, reason: str) -> None:
    """From 2026-07-28 on, a refused request of the server fails its call (the SDK's driver
    raises); before, the server hears the error and answers with it."""
    if revision in (None, "http"):
        assert ran.said == 'Error: MCP server "demo" refused the call of "demo__sample".'
    else:
        assert ran.said == f"refused: {reason}"


@pytest.mark.parametrize("revision", REVISIONS)
def test_sampling_is_refused_unless_configured(setup, home, tmp_path, revision):
    setup(revision)
    ran = run(home, tmp_path, "demo__sample", text="rows")
    assert ran.of("sampling") == []
    refused(ran, revision, "Sampling not supported")


@pytest.mark.parametrize("revision", REVISIONS)
def test_sampling_asks_the_configured_provider_within_its_zone(setup, home, tmp_path, revision):
    setup(revision, sampling="helper", sampling_max_tokens=64)
    ran = run(home, tmp_path, "demo__sample", text="summarise: " + SECRET)
    (sampling,) = ran.of("sampling")
    assert sampling["provider"] == "helper"
    assert sampling["tool_name"] == "demo__sample"
    # The server asked for 5,000 tokens; its setting allows 64.
    assert sampling["max_tokens"] == 64
    assert sampling["data_class"] == "sourceCode"
    assert sampling["messages_sent"][-1]["content"] == "summarise: " + SECRET
    assert sampling["content"] == "summary 0"
    assert ran.said.endswith("said summary 0")


@pytest.mark.parametrize("revision", REVISIONS)
def test_sampling_is_refused_above_the_providers_zone_ceiling(setup, home, tmp_path, revision):
    setup(revision, sampling="helper", helper_zone="externalGlobal")
    ran = run(home, tmp_path, "demo__sample", text=SECRET)
    (sampling,) = ran.of("sampling")
    reason = (
        'provider "helper" is in zone externalGlobal, whose ceiling does not admit sourceCode data'
    )
    assert sampling["refused"] == reason
    assert "content" not in sampling
    refused(ran, revision, reason)


def test_sampling_requests_per_call_are_bounded(setup, home, tmp_path):
    setup("2025-11-25", sampling="helper", sampling_max_requests=2)
    ran = run(home, tmp_path, "demo__sample", times=3)
    # Every request is a step of the run, the one refused too.
    answered, second, third = ran.of("sampling")
    assert ("refused" in answered, "refused" in second) == (False, False)
    assert third["refused"] == "at most 2 sampling requests per call"
    assert ran.said.split("; ")[2] == "refused: at most 2 sampling requests per call"
    assert [e["reason"] for e in ran.logs if e["event"] == "nrllm.mcp.sampling_refused"] == [
        "at most 2 sampling requests per call"
    ]


def test_a_server_is_never_given_tools_through_sampling(setup, home, tmp_path):
    setup("2025-11-25", sampling="helper")
    ran = run(home, tmp_path, "demo__sample", tools=True)
    (step,) = ran.of("sampling")
    assert step["refused"] == "a server is never given tools through sampling"
    assert "content" not in step
    assert ran.said == "refused: a server is never given tools through sampling"


@pytest.mark.parametrize("revision", REVISIONS)
def test_elicitation_is_refused_unless_configured(setup, home, tmp_path, revision):
    setup(revision)
    asked: list[Question] = []
    ran = run(home, tmp_path, "demo__ask", lambda q: asked.append(q) or PersonAnswer.declined())
    assert asked == []
    assert ran.of("elicitation") == []
    if revision in (None, "http"):
        assert ran.said == 'Error: MCP server "demo" refused the call of "demo__ask".'
    else:
        assert ran.said == "refused: Elicitation not supported"


@pytest.mark.parametrize("revision", REVISIONS)
def test_elicitation_asks_the_hosts_handler_and_the_model_never_sees_it(
    setup, home, tmp_path, revision
):
    setup(revision, elicitation=True)
    asked: list[Question] = []

    def handler(question: Question) -> PersonAnswer:
        asked.append(question)
        return PersonAnswer.accepted({"code": "0000"})

    # The server's own question: the model never passed it.
    ran = run(home, tmp_path, "demo__ask", handler)
    (question,) = asked
    assert (question.tool, question.message) == ("demo__ask", "Your code?")
    assert question.schema["properties"] == {"code": {"type": "string"}}
    (step,) = ran.of("elicitation")
    assert (step["action"], step["answer"]) == ("accept", {"code": "0000"})
    assert step["question"]["message"] == "Your code?"
    assert ran.said == 'accept {"code": "0000"}'
    # What went to the run's model: the prompt and the tool's answer, never the question.
    (second,) = [s for s in ran.of("request") if len(s["messages_sent"]) > 1]
    assert "Your code?" not in json.dumps(second["messages_sent"])


def test_without_a_handler_a_question_is_declined(setup, home, tmp_path):
    setup("2025-11-25", elicitation=True)
    ran = run(home, tmp_path, "demo__ask")
    (step,) = ran.of("elicitation")
    assert (step["asked"], step["action"]) == (False, "decline")
    assert ran.said == "decline null"


def test_a_url_to_open_is_declined_unasked(setup, home, tmp_path):
    setup("2025-11-25", elicitation=True)
    asked: list[Question] = []
    ran = run(home, tmp_path, "demo__ask", lambda q: asked.append(q), url=True)
    assert asked == []
    assert ran.said == "decline null"

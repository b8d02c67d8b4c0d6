"""The SDK's own clients against ``nrllm mcp serve``: the gate's tools, content only,
approvals through elicitation, and the HTTP transport's token and origin checks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from nrllm_core.store import Store

from .conftest import free_port, serve_command, wait_for_port
from .served_plugin import ARTIFACT_MARK

TIMEOUT = 60


def run(coroutine_function, *args):
    async def bounded():
        with anyio.fail_after(TIMEOUT):
            return await coroutine_function(*args)

    return anyio.run(bounded)


async def over_stdio(env, body, elicitation=None, options=()):
    command, *arguments = serve_command(*options)
    params = StdioServerParameters(command=command, args=arguments, env=env)
    with open(Path(env["NRLLM_HOME"]) / "serve.log", "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation) as session,
        ):
            await session.initialize()
            return await body(session)


def answering(action):
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        return types.ElicitResult(action=action, content={} if action == "accept" else None)

    return elicit, asked


def runs_of(env) -> list[Any]:
    store = Store.open(None, data_dir=Path(env["NRLLM_HOME"]))
    try:
        return [(info, store.get_run(info.run_id)) for info in store.list_runs()]
    finally:
        store.close()


def notes(env) -> list[str]:
    path = Path(env["NRLLM_HOME"]) / "notes.txt"
    return path.read_text().splitlines() if path.exists() else []


def test_exactly_the_tools_the_gate_offers_the_zone_are_listed(served):
    async def body(session):
        return await session.list_tools()

    listed = run(over_stdio, served, body)
    names = sorted(t.name for t in listed.tools)
    assert names == ["weather", "write_note"]
    note = next(t for t in listed.tools if t.name == "write_note")
    assert note.annotations.destructive_hint is True
    local = run(over_stdio, served, body, None, ("--zone", "local"))
    assert "read_secret" in {t.name for t in local.tools}


def test_a_call_sends_only_content_and_is_a_run_of_kind_mcp(served):
    async def body(session):
        return await session.call_tool("weather", {"city": "Oslo"})

    result = run(over_stdio, served, body)
    assert [(b.type, b.text) for b in result.content] == [("text", "Sunny in Oslo.")]
    assert result.is_error is False
    assert result.structured_content is None
    assert ARTIFACT_MARK not in result.model_dump_json()
    ((info, detail),) = runs_of(served)
    assert (info.kind.value, info.zone, info.actor) == ("mcp", "externalGlobal", "alice")
    assert [s.kind for s in detail.steps] == ["start", "gate", "tool", "finish"]


def test_a_refused_tool_is_an_error_and_runs_nothing(served):
    async def body(session):
        return await session.call_tool("read_secret", {})

    result = run(over_stdio, served, body)
    assert result.is_error is True
    assert result.content[0].text == 'Error: tool "read_secret" not permitted'


def test_an_approval_accepted_through_elicitation_runs_the_write(served):
    elicit, asked = answering("accept")

    async def body(session):
        return await session.call_tool("write_note", {"text": "buy milk"})

    result = run(over_stdio, served, body, elicit)
    assert (result.content[0].text, result.is_error) == ("noted", False)
    assert notes(served) == ["buy milk"]
    (message,) = asked
    assert 'tool "write_note"' in message
    assert "turn digest: " in message
    ((_, detail),) = runs_of(served)
    approval = next(s for s in detail.steps if s.kind == "approval")
    assert approval.payload["decision"] == "approved"
    assert message.endswith(approval.payload["turn_digest"])


def test_an_approval_declined_through_elicitation_runs_nothing(served):
    elicit, asked = answering("decline")

    async def body(session):
        return await session.call_tool("write_note", {"text": "buy milk"})

    result = run(over_stdio, served, body, elicit)
    assert result.is_error is True
    assert result.content[0].text == 'Error: tool "write_note" was denied by the operator.'
    assert notes(served) == []
    assert len(asked) == 1
    ((_, detail),) = runs_of(served)
    assert next(s for s in detail.steps if s.kind == "approval").payload["decision"] == "denied"


def test_a_client_without_elicitation_cannot_approve(served):
    keep_content(served)

    async def body(session):
        return await session.call_tool("write_note", {"text": "buy milk"})

    result = run(over_stdio, served, body)
    assert result.is_error is True
    assert result.content[0].text == (
        'Error: tool "write_note" needs an approval this client cannot give'
    )
    assert notes(served) == []
    assert_refused_run(served, "write_note")


def keep_content(env):
    """The served host's audit keeps (redacted) content, so a test can read an answer there."""
    config = Path(env["NRLLM_CONFIG"])
    config.write_text(config.read_text() + '[privacy]\nlevel = "redacted"\n')


def assert_refused_run(env, tool):
    """The refused call is a run of kind mcp: its approval refused (no one could decide), its
    tool refused."""
    ((info, detail),) = runs_of(env)
    assert info.kind.value == "mcp"
    assert [s.kind for s in detail.steps] == ["start", "gate", "approval", "tool", "finish"]
    approval, step = detail.steps[2], detail.steps[3]
    assert approval.payload["decision"] == "refused"
    assert approval.payload.get("approver") is None
    assert (step.payload["tool_name"], step.payload["tool_outcome"]) == (tool, "refused")
    # The audit keeps the very answer the client got.
    assert step.payload["tool_result"] == (
        f'Error: tool "{tool}" needs an approval this client cannot give'
    )


@pytest.fixture
def http_serve(served):
    port = free_port()
    process = subprocess.Popen(
        serve_command("--transport", "http", "--port", str(port)),
        env=served,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip()
        token = process.stdout.readline().strip().removeprefix("bearer token: ")
        wait_for_port(port, process)
        yield endpoint.removeprefix("nrllm MCP endpoint: "), token
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "0"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_http_needs_the_bearer_token(http_serve):
    url, token = http_serve
    assert url.startswith("http://127.0.0.1:")
    for offered in ({}, {"authorization": "Bearer wrong"}, {"authorization": token}):
        answer = httpx2.post(url, json=INITIALIZE, headers={**ACCEPT, **offered}, timeout=10)
        assert answer.status_code == 401
        # A plain challenge: no metadata, so a client does not start OAuth.
        assert answer.headers["www-authenticate"] == "Bearer"
    good = httpx2.post(
        url, json=INITIALIZE, headers={**ACCEPT, "authorization": f"Bearer {token}"}, timeout=10
    )
    assert good.status_code == 200


def test_http_accepts_localhost_as_host_and_origin(http_serve):
    url, token = http_serve
    local = url.replace("127.0.0.1", "localhost")
    answer = httpx2.post(
        local,
        json=INITIALIZE,
        headers={**ACCEPT, "authorization": f"Bearer {token}", "origin": local[: -len("/mcp")]},
        timeout=10,
    )
    assert answer.status_code == 200


def test_http_refuses_a_foreign_origin(http_serve):
    url, token = http_serve
    answer = httpx2.post(
        url,
        json=INITIALIZE,
        headers={**ACCEPT, "authorization": f"Bearer {token}", "origin": "http://evil.example"},
        timeout=10,
    )
    assert answer.status_code == 403


def weather_in_rome(url: str, token: str) -> Any:
    """One SDK client's ``weather`` call at ``url`` with the bearer ``token``, bounded in time."""

    async def body() -> Any:
        client = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
        async with (
            client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool("weather", {"city": "Rome"})

    return run(body)


def test_the_sdks_streamable_http_client_calls_a_tool(http_serve):
    url, token = http_serve

    result = weather_in_rome(url, token)
    assert [b.text for b in result.content] == ["Sunny in Rome."]


def test_a_non_loopback_host_needs_token_env(served):
    done = subprocess.run(
        serve_command("--transport", "http", "--host", "192.0.2.7"),
        env=served,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert "needs --token-env" in done.stderr


@pytest.mark.parametrize("bind", ["0.0.0.0", "::"])
def test_an_address_no_client_names_is_refused_at_start(served, bind):
    done = subprocess.run(
        serve_command("--transport", "http", "--host", bind, "--token-env", "MCP_TOKEN"),
        env={**served, "MCP_TOKEN": "t" * 32},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert f"--host {bind} listens everywhere but no client names it" in done.stderr


def test_zone_and_provider_are_exclusive(served):
    done = subprocess.run(
        serve_command("--zone", "local", "--provider", "x"),
        env=served,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert sys.executable  # the child ran with this interpreter


def test_a_four_eyes_provider_cannot_be_approved_through_the_client(served):
    config = Path(served["NRLLM_CONFIG"])
    (config.parent / "none.toml").write_text('[[turns]]\ncontent = "unused"\n')
    config.write_text(
        config.read_text()
        + '[providers.desk]\nkind = "scripted"\nscript = "none.toml"\ntrust_zone = "local"\n'
        + "four_eyes = true\n"
    )
    keep_content(served)
    elicit, asked = answering("accept")

    async def body(session):
        return await session.call_tool("write_note", {"text": "buy milk"})

    result = run(over_stdio, served, body, elicit, ("--provider", "desk"))
    assert result.content[0].text == (
        'Error: tool "write_note" needs an approval this client cannot give'
    )
    assert asked == []
    assert notes(served) == []
    assert_refused_run(served, "write_note")


def test_a_request_that_fails_in_the_gateway_sends_no_exception_text(served):
    from mcp.shared.exceptions import MCPError

    config = Path(served["NRLLM_CONFIG"])

    async def body(session):
        # The configuration is read again on each request: broken now, every request fails.
        config.write_text(config.read_text() + '[run]\ntool_timeout_seconds = "SECRET-XYZ"\n')
        called = await session.call_tool("weather", {"city": "Oslo"})
        try:
            await session.list_tools()
        except MCPError as exc:
            return called, exc.error
        raise AssertionError("tools/list answered")

    called, listed = run(over_stdio, served, body)
    assert called.is_error is True
    assert [b.text for b in called.content] == [
        "Error: the call failed; nothing more can be said here."
    ]
    assert (listed.code, listed.message) == (types.INTERNAL_ERROR, "Internal error")
    for sent in (called.model_dump_json(), listed.model_dump_json()):
        assert "served.toml" not in sent
        assert "tool_timeout_seconds" not in sent
    log = (Path(served["NRLLM_HOME"]) / "serve.log").read_text()
    assert "nrllm.mcp.request_failed" in log
    assert "SECRET-XYZ" not in log


def open_handshake_session(url: str, token: str, capabilities: dict[str, Any]) -> httpx2.Client:
    """A client of a handshake session opened with ``capabilities``, ready for calls."""
    client = httpx2.Client(headers={**ACCEPT, "authorization": f"Bearer {token}"}, timeout=30)
    opening = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": capabilities}}
    opened = client.post(url, json=opening)
    assert opened.status_code == 200
    client.headers["mcp-session-id"] = opened.headers["mcp-session-id"]
    client.headers["mcp-protocol-version"] = "2025-06-18"
    ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert client.post(url, json=ready).status_code == 202
    return client


def handshake_call(url: str, token: str, capabilities: dict[str, Any]) -> httpx2.Response:
    """A handshake session opened with ``capabilities``, then one ``weather`` call: its
    answer as sent."""
    client = open_handshake_session(url, token, capabilities)
    try:
        call = {"name": "weather", "arguments": {"city": "Rome"}}
        return client.post(
            url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
        )
    finally:
        client.close()


def test_a_handshake_client_that_cannot_be_asked_gets_its_answers_as_json(http_serve):
    url, token = http_serve
    for capabilities in ({}, {"elicitation": None}, {"sampling": {}, "roots": {}}):
        answer = handshake_call(url, token, capabilities)
        assert answer.headers["content-type"] == "application/json"
        assert answer.json()["result"]["content"] == [{"type": "text", "text": "Sunny in Rome."}]


def test_a_handshake_client_that_can_be_asked_keeps_its_stream(http_serve):
    url, token = http_serve
    answer = handshake_call(url, token, {"elicitation": {}})
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert '"text":"Sunny in Rome."' in answer.text


def sse_message(lines: Any) -> dict[str, Any]:
    """The next JSON-RPC message of an SSE answer's lines."""
    data = next(line for line in lines if line.startswith("data: "))
    message: dict[str, Any] = json.loads(data.removeprefix("data: "))
    return message


def test_questions_nobody_answers_never_hold_every_thread(http_serve, served):
    from nrllm_mcp._serve import QUESTIONS_AT_ONCE, too_many_questions

    url, token = http_serve
    keep_content(served)
    asker = open_handshake_session(url, token, {"elicitation": {}})
    streams: list[Any] = []

    def write(n: int) -> Any:
        """A write's call, sent: its answer's lines (a question first, if one is asked)."""
        call = {"name": "write_note", "arguments": {"text": f"note {n}"}}
        body = {"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call", "params": call}
        streams.append(asker.send(asker.build_request("POST", url, json=body), stream=True))
        return streams[-1].iter_lines()

    def decline(question_id: Any) -> None:
        answer = {"jsonrpc": "2.0", "id": question_id, "result": {"action": "decline"}}
        assert asker.post(url, json=answer).status_code == 202

    calls = [write(n) for n in range(QUESTIONS_AT_ONCE)]
    asked = []
    try:
        # Each call's question is asked and not answered: each holds its thread.
        for lines in calls:
            question = sse_message(lines)
            assert question["method"] == "elicitation/create"
            asked.append(question["id"])
        # One question more is refused at once, asked of nobody.
        refused = sse_message(write(QUESTIONS_AT_ONCE))["result"]
        assert refused["isError"] is True
        assert refused["content"] == [{"type": "text", "text": too_many_questions("write_note")}]
        # Everyone else is still served.
        other = open_handshake_session(url, token, {})
        try:
            call = {"name": "weather", "arguments": {"city": "Rome"}}
            answer = other.post(
                url, json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
            )
        finally:
            other.close()
        assert answer.json()["result"]["content"] == [{"type": "text", "text": "Sunny in Rome."}]
        # A question answered gives its place to the next.
        decline(asked.pop(0))
        assert sse_message(calls[0])["result"]["isError"] is True
        question = sse_message(write(QUESTIONS_AT_ONCE + 1))
        assert question["method"] == "elicitation/create"
        asked.append(question["id"])
    finally:
        # Answered, the calls end, and the server stops without waiting for them.
        for question_id in asked:
            decline(question_id)
        for stream in streams:
            stream.close()
        asker.close()
    assert notes(served) == []


def test_a_question_unanswered_in_its_time_is_unanswered():
    from types import SimpleNamespace

    from nrllm_mcp._serve import _ask

    asked = []

    class Session:
        async def elicit_form(self, message: str, *args: Any, **kwargs: Any) -> Any:
            asked.append(message)
            await anyio.sleep_forever()

    context = SimpleNamespace(session=Session(), request_id=1)
    pending = SimpleNamespace(name="write_note", arguments={"text": "x"}, preview=[])
    assert run(_ask, context, pending, "d" * 64, 0.05) is None
    assert len(asked) == 1

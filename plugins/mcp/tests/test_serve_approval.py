"""Approvals through ``nrllm mcp serve`` on every revision the SDK's client speaks: an
``elicitation/create`` request during the call up to 2025-11-25, "input required" and a
second round (Multi Round-Trip Requests) on 2026-07-28; each answer a distinct outcome in the
audit, and the request state of the second round authenticated, bound and used once."""

from __future__ import annotations

import time
from pathlib import Path

import httpx2
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client._input_required import run_input_required_driver
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from nrllm_mcp._serve import STATE_REFUSED
from nrllm_mcp._serve_approval import APPROVAL_REQUEST, Waiting, arguments_digest

from .conftest import serve_command
from .test_serve import http_serve, keep_content, notes, run, runs_of  # noqa: F401

REVISIONS = ["2026-07-28", "handshake"]
APPROVER = "alice (through the MCP client)"


async def negotiate(session, revision):
    if revision == "handshake":
        await session.initialize()
    else:
        await session.discover()
        assert session.protocol_version == revision


async def over_stdio(env, revision, body, elicitation=None):
    command, *arguments = serve_command()
    params = StdioServerParameters(command=command, args=arguments, env=env)
    with open(Path(env["NRLLM_HOME"]) / "serve.log", "a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation) as session,
        ):
            await negotiate(session, revision)
            return await body(session)


async def call(session, name, arguments):
    """A call as nrllm's own client makes it: "input required" answered through the
    session's callbacks and the call made again, by the SDK's driver."""

    async def again(responses, state):
        return await session.call_tool(
            name,
            arguments,
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
        )

    async def dispatch(key, request):
        context = ClientRequestContext(session=session, request_id=key, meta=None)
        return await session.dispatch_input_request(context, request)

    first = await again(None, None)
    if not isinstance(first, types.InputRequiredResult):
        return first
    return await run_input_required_driver(first, dispatch=dispatch, retry=again)


def answering(action):
    asked = []

    async def elicit(context, params):
        asked.append(params.message)
        if action == "fail":
            raise RuntimeError("the client's form broke")
        return types.ElicitResult(action=action, content={} if action == "accept" else None)

    return elicit, asked


def write_note(session):
    return call(session, "write_note", {"text": "buy milk"})


def approval_of(env):
    ((info, detail),) = runs_of(env)
    assert info.kind.value == "mcp"
    return next(s for s in detail.steps if s.kind == "approval").payload


@pytest.mark.parametrize("revision", REVISIONS)
def test_an_accepted_approval_runs_the_write(served, revision):
    elicit, asked = answering("accept")
    result = run(over_stdio, served, revision, write_note, elicit)
    assert (result.content[0].text, result.is_error) == ("noted", False)
    assert notes(served) == ["buy milk"]
    (message,) = asked
    assert message.startswith('nrllm asks for approval: tool "write_note"')
    assert "buy milk" in message
    approval = approval_of(served)
    assert (approval["decision"], approval["approver"]) == ("approved", APPROVER)
    assert message.endswith(f"turn digest: {approval['turn_digest']}")


OUTCOMES = {
    "decline": ("denied", APPROVER, None, 'Error: tool "write_note" was denied by the operator.'),
    "cancel": (
        "cancelled",
        APPROVER,
        "cancelled",
        'Error: tool "write_note" was not run: the approval was cancelled.',
    ),
}


@pytest.mark.parametrize("revision", REVISIONS)
@pytest.mark.parametrize("action", sorted(OUTCOMES))
def test_a_declined_or_cancelled_approval_is_its_own_outcome(served, revision, action):
    keep_content(served)
    decision, approver, reason, answer = OUTCOMES[action]
    elicit, asked = answering(action)
    result = run(over_stdio, served, revision, write_note, elicit)
    assert (result.content[0].text, result.is_error) == (answer, True)
    assert notes(served) == []
    assert len(asked) == 1
    approval = approval_of(served)
    assert (approval["decision"], approval.get("approver")) == (decision, approver)
    assert approval.get("reason") == reason
    ((_, detail),) = runs_of(served)
    tool = next(s for s in detail.steps if s.kind == "tool")
    assert tool.payload["tool_outcome"] == "refused"


def test_a_failed_elicitation_is_unanswered(served):
    """Handshake era: the client's callback fails, the request fails, nobody answered."""
    elicit, asked = answering("fail")
    result = run(over_stdio, served, "handshake", write_note, elicit)
    assert result.is_error is True
    assert result.content[0].text == (
        'Error: tool "write_note" was not run: the approval went unanswered.'
    )
    assert notes(served) == []
    assert len(asked) == 1
    approval = approval_of(served)
    assert (approval["decision"], approval.get("approver")) == ("unanswered", None)
    assert approval["reason"] == "unanswered"


def test_a_second_round_without_an_answer_is_unanswered(served):
    """2026-07-28: the client comes back with the state but no answer (its form failed)."""
    elicit, _ = answering("accept")

    async def body(session):
        first = await session.call_tool(
            "write_note", {"text": "buy milk"}, allow_input_required=True
        )
        assert isinstance(first, types.InputRequiredResult)
        (key,) = first.input_requests
        assert key == APPROVAL_REQUEST
        return await session.call_tool(
            "write_note",
            {"text": "buy milk"},
            request_state=first.request_state,
            allow_input_required=True,
        )

    result = run(over_stdio, served, "2026-07-28", body, elicit)
    assert result.content[0].text == (
        'Error: tool "write_note" was not run: the approval went unanswered.'
    )
    assert notes(served) == []
    assert approval_of(served)["decision"] == "unanswered"


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_client_without_elicitation_is_refused_unasked(served, revision):
    result = run(over_stdio, served, revision, write_note)
    assert result.is_error is True
    assert result.content[0].text == (
        'Error: tool "write_note" needs an approval this client cannot give'
    )
    assert notes(served) == []
    approval = approval_of(served)
    assert (approval["decision"], approval.get("approver")) == ("refused", None)
    assert approval["reason"] == "no_approver"


@pytest.mark.parametrize("revision", REVISIONS)
def test_a_tool_without_approval_needs_no_second_round(served, revision):
    elicit, asked = answering("accept")

    async def body(session):
        return await session.call_tool("weather", {"city": "Oslo"}, allow_input_required=True)

    result = run(over_stdio, served, revision, body, elicit)
    assert isinstance(result, types.CallToolResult)
    assert result.content[0].text == "Sunny in Oslo."
    assert asked == []


def test_a_request_state_works_once_for_its_own_call_only(served):
    elicit, _ = answering("accept")
    accepted = {APPROVAL_REQUEST: types.ElicitResult(action="accept", content={})}

    async def again(session, arguments, state):
        return await session.call_tool(
            "write_note",
            arguments,
            input_responses=accepted,
            request_state=state,
            allow_input_required=True,
        )

    async def body(session):
        milk = {"text": "buy milk"}
        first = await session.call_tool("write_note", milk, allow_input_required=True)
        state = first.request_state
        version, payload, mac = state.split(".")
        forged = f"{version}.{payload}.{'A' * len(mac)}"
        answers = [
            await again(session, milk, forged),
            await again(session, milk, None),
            await again(session, milk, state + "x"),
            await again(session, milk, state),
            await again(session, milk, state),
        ]
        # Another call's arguments under a valid state: refused, and that state is spent.
        second = await session.call_tool("write_note", milk, allow_input_required=True)
        answers.append(await again(session, {"text": "sell milk"}, second.request_state))
        answers.append(await again(session, milk, second.request_state))
        return answers

    answers = run(over_stdio, served, "2026-07-28", body, elicit)
    texts = [a.content[0].text for a in answers]
    assert texts == [STATE_REFUSED] * 3 + ["noted"] + [STATE_REFUSED] * 3
    assert notes(served) == ["buy milk"]
    decisions = sorted(
        next(s for s in detail.steps if s.kind == "approval").payload["decision"]
        for _, detail in runs_of(served)
    )
    # The refused second call waited: taken by the mismatch, it settled unanswered.
    assert decisions == ["approved", "unanswered"]


@pytest.mark.parametrize("revision", REVISIONS)
def test_the_sdks_streamable_http_client_is_asked(http_serve, served, revision):  # noqa: F811
    url, token = http_serve
    elicit, asked = answering("accept")

    async def body():
        client = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
        async with (
            client,
            streamable_http_client(url, http_client=client) as (read, write),
            ClientSession(read, write, elicitation_callback=elicit) as session,
        ):
            await negotiate(session, revision)
            return await write_note(session)

    result = run(body)
    assert (result.content[0].text, result.is_error) == ("noted", False)
    assert len(asked) == 1
    assert notes(served) == ["buy milk"]
    assert approval_of(served)["decision"] == "approved"


def test_a_parked_call_expires_unanswered():
    import concurrent.futures

    waiting = Waiting()
    call = arguments_digest("write_note", {"text": "x"}, "ana (through the MCP client)")
    held = waiting.park(
        run_id="r", digest="d", call=call, seconds=0.2, result=concurrent.futures.Future()
    )
    assert held is not None
    parked, state = held
    started = time.monotonic()
    assert waiting.wait(parked) is None
    assert time.monotonic() - started >= 0.15
    # Its state names nothing any more.
    assert waiting.claim(state, call) == (None, "unknown")
    assert waiting.claim("v1.e30." + state.rsplit(".", 1)[1], call) == (None, "unauthentic")
    for hostile in ("", "v1", "v2.a.b", "v1..", "v1.é.é", "x" * 5000):
        assert waiting.claim(hostile, call) == (None, "unauthentic")


def test_a_state_answers_only_for_the_person_whose_call_waits():
    import concurrent.futures

    waiting = Waiting()
    ana = arguments_digest("write_note", {"text": "x"}, "ana (through the MCP client)")
    bob = arguments_digest("write_note", {"text": "x"}, "bob (through the MCP client)")
    held = waiting.park(
        run_id="r", digest="d", call=ana, seconds=5, result=concurrent.futures.Future()
    )
    assert held is not None
    _, state = held
    parked, why = waiting.claim(state, bob)
    assert parked is None
    assert why == "mismatch"

"""Approvals through ``nrllm mcp serve`` on every revision the SDK's client speaks: an
``elicitation/create`` request during the call up to 2025-11-25, "input required" and a
second round (Multi Round-Trip Requests) on 2026-07-28; each answer a distinct outcome in the
audit, and the request state of the second round bound to its waiting call and used once,
on whichever instance sharing the store it reaches."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import httpx2
import mcp.types as types
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client._input_required import run_input_required_driver
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from nrllm_core.testing import postgres_schema
from nrllm_mcp._serve import STATE_REFUSED
from nrllm_mcp._serve_approval import APPROVAL_REQUEST, waiting_turn

from . import served_plugin
from .conftest import free_port, serve_command, wait_for_port
from .test_serve import http_serve, keep_content, notes, run, runs_of  # noqa: F401

REVISIONS = ["2026-07-28", "handshake"]
# The keys a team's instances share: the state key opens each other's waiting calls, the
# audit key verifies each other's steps.
STATE_KEY = base64.urlsafe_b64encode(bytes(range(2, 34))).decode()
AUDIT_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()
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
    ((info, detail),) = runs_of(served)
    tools = [s.payload["tool_outcome"] for s in detail.steps if s.kind == "tool"]
    if action == "cancel" and revision == "2026-07-28":
        # The waiting run is ended, as any suspended run a person cancels.
        assert (info.status.value, tools) == ("cancelled", [])
    else:
        assert (info.status.value, tools) == ("completed", ["refused"])


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
        version, run_id, digest = state.split(".")
        guessed = f"{version}.{run_id}.{'0' * len(digest)}"
        answers = [
            await again(session, milk, guessed),
            await again(session, milk, None),
            await again(session, milk, state + "x"),
            await again(session, milk, state),
            await again(session, milk, state),
        ]
        # Another call's arguments under a valid state: refused; the call still waits for
        # its own second round.
        second = await session.call_tool("write_note", milk, allow_input_required=True)
        answers.append(await again(session, {"text": "sell milk"}, second.request_state))
        answers.append(await again(session, milk, second.request_state))
        return answers

    answers = run(over_stdio, served, "2026-07-28", body, elicit)
    texts = [a.content[0].text for a in answers]
    assert texts == [STATE_REFUSED] * 3 + ["noted"] + [STATE_REFUSED] * 2 + ["noted"]
    assert notes(served) == ["buy milk", "buy milk"]
    decisions = sorted(
        next(s for s in detail.steps if s.kind == "approval").payload["decision"]
        for _, detail in runs_of(served)
    )
    assert decisions == ["approved", "approved"]


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


def test_a_request_state_names_a_run_and_a_digest_and_nothing_else():
    run_id, digest = "a" * 32, "b" * 64
    assert waiting_turn(f"v2.{run_id}.{digest}") == (run_id, digest)
    for hostile in (
        None,
        3,
        "",
        "v2",
        f"v1.{run_id}.{digest}",
        f"v2.{run_id}.{digest}.",
        f"v2.{run_id.upper()}.{digest}",
        f"v2.{run_id}.{digest[:-1]}",
        f"v2.{run_id}.{digest}\n",
        f"v2.{run_id}.{digest[:-1]}é",
        "x" * 5000,
    ):
        assert waiting_turn(hostile) is None


def test_a_state_answers_only_for_the_person_whose_call_waits(tmp_path, monkeypatch):
    """In process: alice's waiting call, and bob with its request state."""
    from nrllm_core import Actor, Host, TrustZone
    from nrllm_mcp._serve import Served, _resumed

    monkeypatch.setenv("NRLLM_HOME", str(tmp_path))
    host = Host.from_config(
        data={"actor": {"id": "alice"}},
        plugins=[served_plugin],
        load_entry_points=False,
        data_dir=tmp_path,
        environ={},
    )
    try:
        served = Served(zone=TrustZone.LOCAL)
        milk = {"text": "buy milk"}
        outcome = host.submit("write_note", milk, zone=served.zone, kind="mcp")
        assert outcome.turn_digest is not None
        state = f"v2.{outcome.run_id}.{outcome.turn_digest}"
        accepted = {APPROVAL_REQUEST: types.ElicitResult(action="accept", content={})}
        params = types.CallToolRequestParams(
            name="write_note", arguments=milk, input_responses=accepted, request_state=state
        )
        bob = Actor(id="bob")
        answer = _resumed(host, params, "write_note", milk, bob, "bob (through the MCP client)")
        assert answer.content[0].text == STATE_REFUSED
        # Still alice's to answer.
        assert host.pending(outcome.run_id) is not None
        alice = host.config.actor()
        answer = _resumed(host, params, "write_note", milk, alice, APPROVER)
        assert (answer.content[0].text, answer.is_error) == ("noted", False)
    finally:
        host.store.close()


def test_a_call_put_under_four_eyes_while_it_waits_is_not_approved_by_its_caller(
    tmp_path, monkeypatch
):
    """In process: alice's call waits under a skill that four-eyes then covers. Her second
    round's accept is refused and the call keeps waiting; bob approves it elsewhere."""
    from nrllm_core import Host, TrustZone
    from nrllm_mcp._serve import Served, _first_round, _resumed

    monkeypatch.setenv("NRLLM_HOME", str(tmp_path))
    config = tmp_path / "nrllm.toml"
    skill = '[actor]\nid = "alice"\n[skills.notes]\nallowed_tools = ["write_note"]\n'
    config.write_text(skill, encoding="utf-8")
    host = Host.from_config(
        config, plugins=[served_plugin], load_entry_points=False, data_dir=tmp_path, environ={}
    )
    try:
        milk = {"text": "buy milk"}
        served = Served(zone=TrustZone.EXTERNAL_GLOBAL, skill="notes")
        first = _first_round(host, served, "write_note", milk, None)
        assert isinstance(first, types.InputRequiredResult)
        config.write_text(skill + "four_eyes = true\n", encoding="utf-8")
        accepted = {APPROVAL_REQUEST: types.ElicitResult(action="accept", content={})}
        params = types.CallToolRequestParams(
            name="write_note",
            arguments=milk,
            input_responses=accepted,
            request_state=first.request_state,
        )
        alice = host.config.actor()
        answer = _resumed(host, params, "write_note", milk, alice, APPROVER)
        assert (answer.content[0].text, answer.is_error) == (
            'Error: tool "write_note" needs an approval this client cannot give',
            True,
        )
        assert not (tmp_path / "notes.txt").exists()
        run_id, digest = waiting_turn(first.request_state)
        assert host.pending(run_id) is not None
        done = host.approve(run_id, approver="bob", turn_digest=digest)
        assert done.call is not None
        assert done.call.content == "noted"
        assert (tmp_path / "notes.txt").read_text(encoding="utf-8") == "buy milk\n"
    finally:
        host.store.close()


def serve_http(env, port):
    process = subprocess.Popen(
        serve_command("--transport", "http", "--port", str(port), "--token-env", "MCP_TOKEN"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    endpoint = process.stdout.readline().strip()
    wait_for_port(port, process)
    return process, endpoint.removeprefix("nrllm MCP endpoint: ")


def test_any_instance_answers_the_second_round_of_another(served, tmp_path):
    """Two ``nrllm mcp serve`` processes on one PostgreSQL store, sharing the state key: each
    call's first round on one, its second on the other, in turn."""
    token = "t" * 32
    answers = {
        "accept": types.ElicitResult(action="accept", content={}),
        "decline": types.ElicitResult(action="decline"),
    }
    with postgres_schema("nrllm_mcp_instances") as url:
        config = Path(served["NRLLM_CONFIG"])
        config.write_text(
            config.read_text(encoding="utf-8") + f'\n[store]\nurl = "{url}"\n',
            encoding="utf-8",
        )
        env = {
            **served,
            "MCP_TOKEN": token,
            "NRLLM_STATE_KEY": STATE_KEY,
            "NRLLM_AUDIT_KEY": AUDIT_KEY,
        }
        instances = []
        try:
            for home in ("one", "two"):
                (tmp_path / home).mkdir()
                instances.append(
                    serve_http({**env, "NRLLM_HOME": str(tmp_path / home)}, free_port())
                )
            urls = [endpoint for _, endpoint in instances]

            async def session_on(url, stack):
                client = httpx2.AsyncClient(
                    headers={"authorization": f"Bearer {token}"}, timeout=30
                )
                await stack.enter_async_context(client)
                read, write = await stack.enter_async_context(
                    streamable_http_client(url, http_client=client)
                )
                # It declares elicitation; the test answers the questions itself.
                elicit, _ = answering("accept")
                session = await stack.enter_async_context(
                    ClientSession(read, write, elicitation_callback=elicit)
                )
                await session.discover()
                return session

            async def body():
                import contextlib

                results = []
                async with contextlib.AsyncExitStack() as stack:
                    sessions = [await session_on(u, stack) for u in urls]
                    for turn, action in enumerate(["accept", "decline", "accept", "decline"]):
                        first, second = sessions[turn % 2], sessions[(turn + 1) % 2]
                        arguments = {"text": f"note {turn}"}
                        asked = await first.call_tool(
                            "write_note", arguments, allow_input_required=True
                        )
                        assert isinstance(asked, types.InputRequiredResult)
                        results.append(
                            await second.call_tool(
                                "write_note",
                                arguments,
                                input_responses={APPROVAL_REQUEST: answers[action]},
                                request_state=asked.request_state,
                                allow_input_required=True,
                            )
                        )
                        # Used once: the first instance refuses it now too.
                        again = await first.call_tool(
                            "write_note",
                            arguments,
                            input_responses={APPROVAL_REQUEST: answers["accept"]},
                            request_state=asked.request_state,
                            allow_input_required=True,
                        )
                        results.append(again)
                return results

            results = run(body)
        finally:
            for process, _ in instances:
                process.terminate()
                process.wait(10)
                if process.stdout is not None:
                    process.stdout.close()
        texts = [r.content[0].text for r in results]
        denied = 'Error: tool "write_note" was denied by the operator.'
        assert texts == ["noted", STATE_REFUSED, denied, STATE_REFUSED] * 2
        # Both instances wrote to the plugin's notes in their own data folders.
        written = notes({"NRLLM_HOME": str(tmp_path / "one")}) + notes(
            {"NRLLM_HOME": str(tmp_path / "two")}
        )
        assert sorted(written) == ["note 0", "note 2"]
        from nrllm_core.store import Store

        store = Store.open(url, data_dir=tmp_path / "one", environ={"NRLLM_AUDIT_KEY": AUDIT_KEY})
        try:
            runs = store.list_runs()
            decisions = []
            for info in runs:
                detail = store.get_run(info.run_id)
                assert detail is not None
                assert not store.verify(info.run_id).broken
                kinds = [step.kind for step in detail.steps]
                assert kinds == [
                    "start",
                    "gate",
                    "suspension",
                    "start",
                    "approval",
                    "tool",
                    "finish",
                ]
                decisions.append(
                    next(s for s in detail.steps if s.kind == "approval").payload["decision"]
                )
            assert sorted(decisions) == ["approved", "approved", "denied", "denied"]
            assert {info.kind.value for info in runs} == {"mcp"}
        finally:
            store.close()


def test_a_waiting_call_nobody_answers_in_time_ends_unanswered(tmp_path, monkeypatch):
    """The client never came back: once its approval expired, the gateway ends the waiting
    run as unanswered; one still open is left to its person."""
    from datetime import UTC, datetime, timedelta

    from nrllm_core import Host, TrustZone
    from nrllm_mcp._serve import SWEEPER, settle_abandoned

    now = [datetime(2026, 3, 1, 12, 0, tzinfo=UTC)]
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path))
    host = Host.from_config(
        data={"actor": {"id": "alice"}, "approvals": {"ttl_seconds": 3600}},
        plugins=[served_plugin],
        load_entry_points=False,
        data_dir=tmp_path,
        environ={},
        clock=lambda: now[0],
    )
    opened: list[str] = []
    pending = host.pending

    def counted(run_id: str, **options: Any) -> Any:
        opened.append(run_id)
        return pending(run_id, **options)

    monkeypatch.setattr(host, "pending", counted)
    try:
        old = host.submit("write_note", {"text": "old"}, zone=TrustZone.LOCAL, kind="mcp")
        now[0] += timedelta(minutes=30)
        fresh = host.submit("write_note", {"text": "new"}, zone=TrustZone.LOCAL, kind="mcp")
        assert settle_abandoned(host) == 0
        # Nothing was due: no sealed turn was opened.
        assert opened == []
        now[0] += timedelta(minutes=31)
        assert settle_abandoned(host) == 1
        assert opened == [old.run_id]
        assert settle_abandoned(host) == 0
        # An expiry moved back in the database gets a turn opened, not ended: its sealed
        # state says it is still open.
        with host.store._engine.begin() as connection:
            connection.exec_driver_sql(
                "UPDATE suspensions SET expires_at = suspended_at WHERE run_id = ?"
                if connection.dialect.name == "sqlite"
                else "UPDATE suspensions SET expires_at = suspended_at WHERE run_id = %s",
                (fresh.run_id,),
            )
        assert settle_abandoned(host) == 0
        assert opened == [old.run_id, fresh.run_id]
        runs = {info.run_id: info for info in host.runs()}
        assert runs[old.run_id].status.value == "cancelled"
        assert runs[fresh.run_id].status.value == "awaiting_approval"
        detail = host.store.get_run(old.run_id)
        assert detail is not None
        step = next(s for s in detail.steps if s.kind == "approval").payload
        assert (step["decision"], step["approver"]) == ("unanswered", SWEEPER)
        assert not host.store.verify(old.run_id).broken
    finally:
        host.store.close()
    assert notes({"NRLLM_HOME": str(tmp_path)}) == []

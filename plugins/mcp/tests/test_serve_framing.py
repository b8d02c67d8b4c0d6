"""How the gateway frames a handshake session's answers: which opening requests make them
plain JSON, and that every request reaches the SDK's app whole, read or not."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from nrllm_mcp._serve_framing import OPENING_BOUND, asks_nothing, plain_unless_asked


def initialize(capabilities: Any) -> bytes:
    params = {"protocolVersion": "2025-06-18", "capabilities": capabilities, "clientInfo": {}}
    return json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    ).encode()


@pytest.mark.parametrize("capabilities", [{}, {"elicitation": None}, {"sampling": {}}])
def test_an_initialize_without_elicitation_asks_nothing(capabilities):
    assert asks_nothing(initialize(capabilities))


@pytest.mark.parametrize(
    "body",
    [
        initialize({"elicitation": {}}),
        initialize({"elicitation": {"form": {}}}),
        # A repeated key counts as the SDK's parser reads it: the last one.
        initialize({}).replace(
            b'"capabilities": {}', b'"capabilities": {"elicitation": null, "elicitation": {}}'
        ),
        initialize(None),
        initialize([]),
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode(),
        json.dumps([json.loads(initialize({}))]).encode(),
        b'{"method": "initialize", "params": 3}',
        b"not json",
        b"",
        b"\xff\xfe",
    ],
)
def test_anything_else_keeps_the_stream(body):
    assert not asks_nothing(body)


class Recorder:
    """The SDK's app in miniature: reads the whole body, then answers with a session id."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        self.bodies.append(body)
        headers = [(b"content-type", b"text/event-stream"), (b"mcp-session-id", b"s1")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b""})


def serve(
    body: bytes, *, chunk: int, headers: list[tuple[bytes, bytes]] = ()
) -> tuple[Recorder, Any]:
    """``body`` POSTed in chunks of ``chunk`` bytes through the middleware; the app, and the
    transport of session ``s1`` after."""
    app, transport = Recorder(), SimpleNamespace(is_json_response_enabled=False)
    manager = SimpleNamespace(_server_instances={"s1": transport})
    middleware = plain_unless_asked(app, manager)
    pieces = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    messages = [
        {"type": "http.request", "body": p, "more_body": i < len(pieces) - 1}
        for i, p in enumerate(pieces)
    ]
    scope = {"type": "http", "method": "POST", "headers": list(headers)}

    async def receive():
        return messages.pop(0)

    async def send(message):
        pass

    anyio.run(middleware, scope, receive, send)
    return app, transport


@pytest.mark.parametrize("chunk", [1, 7, 1 << 20])
def test_a_session_opened_without_elicitation_answers_in_json(chunk):
    body = initialize({})
    app, transport = serve(body, chunk=chunk)
    assert app.bodies == [body]
    assert transport.is_json_response_enabled


def test_a_session_opened_with_elicitation_keeps_its_stream():
    app, transport = serve(initialize({"elicitation": {}}), chunk=5)
    assert app.bodies == [initialize({"elicitation": {}})]
    assert not transport.is_json_response_enabled


def test_a_body_past_the_bound_reaches_the_app_whole_and_unjudged():
    # Valid, without elicitation, but too long to be read here: the SDK judges it alone.
    padded = initialize({}).replace(
        b'"clientInfo": {}', b'"clientInfo": {"name": "%s"}' % (b"x" * OPENING_BOUND)
    )
    app, transport = serve(padded, chunk=4096)
    assert app.bodies == [padded]
    assert not transport.is_json_response_enabled


def test_a_request_of_a_session_passes_untouched():
    body = initialize({})
    app, transport = serve(body, chunk=3, headers=[(b"mcp-session-id", b"s1")])
    assert app.bodies == [body]
    assert not transport.is_json_response_enabled


def test_a_request_naming_its_revision_passes_untouched():
    # 2026-07-28 on, every request names its revision and opens no session.
    body = initialize({})
    app, transport = serve(body, chunk=3, headers=[(b"mcp-protocol-version", b"2026-07-28")])
    assert app.bodies == [body]
    assert not transport.is_json_response_enabled

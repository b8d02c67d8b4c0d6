"""How ``nrllm mcp serve`` frames a handshake session's answers over HTTP: a plain JSON body
when the session's client declared no elicitation, an SSE stream otherwise.

On the revisions with an ``initialize`` handshake (up to 2025-11-25) the SDK answers every
POST of a session with an SSE stream, so that the server can send requests to the client
during a call. The gateway sends one kind only, the question that asks a person to approve,
and only to a client that declared elicitation; a client that did not can be sent nothing but
each call's answer, which a JSON body carries for about three quarters of the server's CPU
(docs/performance.md). The choice is made once per session, from its ``initialize`` request,
before the session's first answer is sent; a request this cannot read leaves the SDK's default.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["plain_unless_asked"]

# An initialize request is a few hundred bytes; past this the SDK reads and judges it alone.
OPENING_BOUND: Final = 64 * 1024
SESSION_HEADER: Final = b"mcp-session-id"
# Requests with either header are past the opening of a session (or of 2026-07-28 on, which
# has none): only a request with neither can be a session's ``initialize``.
LATER_HEADERS: Final = frozenset({SESSION_HEADER, b"mcp-protocol-version"})


def asks_nothing(body: bytes) -> bool:
    """Whether ``body`` is an ``initialize`` request whose client declares no elicitation.

    Parsed as the SDK parses it (pydantic-core's parser, the last of repeated keys; an absent
    or ``null`` capability is none); anything else is ``False``, which keeps the stream. Were
    the two ever to differ, a client the SDK takes as able to answer would be asked over a
    session without a stream: the request fails, is recorded ``unanswered``, nothing runs."""
    import pydantic_core

    try:
        request = pydantic_core.from_json(body)
    except ValueError:
        return False
    if not isinstance(request, dict) or request.get("method") != "initialize":
        return False
    params = request.get("params")
    capabilities = params.get("capabilities") if isinstance(params, dict) else None
    return isinstance(capabilities, dict) and capabilities.get("elicitation") is None


async def opening(receive: Receive) -> tuple[list[Message], bytes | None]:
    """The request's messages read so far, to be replayed, and its whole body when it ended
    within :data:`OPENING_BOUND` (else ``None``: the rest is left unread)."""
    messages: list[Message] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, None
        size += len(message.get("body", b""))
        if size > OPENING_BOUND:
            return messages, None
        if not message.get("more_body", False):
            return messages, b"".join(m.get("body", b"") for m in messages)


def replaying(messages: Iterable[Message], receive: Receive) -> Receive:
    """``receive`` with ``messages`` first, as if they had not been read."""
    pending = collections.deque(messages)

    async def replay() -> Message:
        return pending.popleft() if pending else await receive()

    return replay


def session_of(message: Message) -> str | None:
    """The session id a response's start names, if any."""
    for name, value in message.get("headers", ()):
        if name.lower() == SESSION_HEADER:
            return bytes(value).decode("latin-1")
    return None


@final
class plain_unless_asked:
    """ASGI middleware before the SDK's app: a POST that opens a session (no session id, no
    protocol version yet) and declares no elicitation has its session's answers sent as JSON
    bodies."""

    __slots__ = ("_app", "_manager")

    def __init__(self, app: ASGIApp, manager: StreamableHTTPSessionManager) -> None:
        self._app = app
        self._manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or _is_later(scope):
            await self._app(scope, receive, send)
            return
        messages, body = await opening(receive)
        replay = replaying(messages, receive)
        if body is None or not asks_nothing(body):
            await self._app(scope, replay, send)
            return

        async def framed(message: Message) -> None:
            # Before the start leaves: the client's next request already finds JSON set.
            session = session_of(message) if message["type"] == "http.response.start" else None
            if session is not None:
                self._answer_plainly(session)
            await send(message)

        await self._app(scope, replay, framed)

    def _answer_plainly(self, session: str) -> None:
        # The SDK offers the choice per manager only, so the session's own transport is set
        # (through the manager's private table of sessions; a test holds it to the SDK).
        transports: dict[str, Any] = self._manager._server_instances
        transport = transports.get(session)
        if transport is not None:
            transport.is_json_response_enabled = True


def _is_later(scope: Scope) -> bool:
    return any(name in LATER_HEADERS for name, _ in scope["headers"])

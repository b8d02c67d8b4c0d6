"""A Starlette host that runs prompts on an AsyncHost and streams each run to the browser."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from nrllm_core import (
    AsyncHost,
    Finished,
    StreamEvent,
    StreamRestarted,
    Suspended,
    TextDelta,
    ToolAnswered,
    ToolCallStarted,
)


def line(event: StreamEvent) -> dict[str, object] | None:
    """What the browser sees of an event: text as it arrives, calls, and the run's end."""
    if isinstance(event, TextDelta):
        return {"event": "text", "text": event.text}
    if isinstance(event, StreamRestarted):
        return {"event": "restart"}
    if isinstance(event, ToolCallStarted):
        return {"event": "call", "id": event.call_id, "tool": event.name}
    if isinstance(event, ToolAnswered):
        # The wire payload only: what the model gets back, never an artifact.
        return {"event": "answer", "id": event.payload.call_id, "error": event.payload.is_error}
    if isinstance(event, Suspended | Finished):
        return {"event": "end", **event.outcome.to_dict()}
    return None  # thinking deltas stay on the server


def make_app(host: AsyncHost) -> Starlette:
    async def run(request: Request) -> Response:
        body = await request.json()
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            return JSONResponse({"error": "a prompt is required"}, status_code=400)

        async def lines() -> AsyncIterator[bytes]:
            # Leaving early (the browser went away) cancels the run: it settles cancelled.
            async for event in host.stream(prompt):
                shown = line(event)
                if shown is not None:
                    yield json.dumps(shown).encode() + b"\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    return Starlette(routes=[Route("/run", run, methods=["POST"])])

"""A real MCP server written with the SDK, run by the tests over stdio or streamable HTTP.

``python mcp_server.py STATE_DIR stdio`` or ``python mcp_server.py STATE_DIR http PORT``.
What it lists is read from STATE_DIR on every ``tools/list``, so a test can change a
description, list no tool at all (STATE_DIR/empty), offer a tool of a given input schema
(STATE_DIR/schema, its JSON) or add a tool between two connections. With STATE_DIR/hostile, the
server puts
that file's text everywhere a server controls: its name, version and instructions, its stderr,
a tool's name, a tool's description and a tool's result. Every start appends its process id
to STATE_DIR/starts; with STATE_DIR/start_delay, the server sleeps that many seconds first.
With STATE_DIR/revision, the server is one of that (handshake-era) protocol revision: it knows
no ``server/discover`` and answers ``initialize`` with that revision.
It lists two resources (``test://notes``, text; ``test://picture``, a blob of IMAGE) and a prompt
(``summarise``), and serves ``test://secret`` without listing it; with STATE_DIR/hostile, a
resource and a prompt carry that text in every field. Its tool ``roots`` asks the client for
its roots (``roots/list``) and answers their URIs, one a line, or the error it got.
"""

from __future__ import annotations

import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
from mcp.server import Server, ServerRequestContext
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

IMAGE = b"\x89PNG\r\n\x1a\n" + b"\x07" * (48213 - 8)


def _state() -> Path:
    # Read when a request arrives, not at import: the tests import IMAGE from this module.
    return Path(sys.argv[1])


def _hostile() -> str | None:
    path = _state() / "hostile"
    return path.read_text(encoding="utf-8") if path.exists() else None


def _description() -> str:
    path = _state() / "description"
    return path.read_text(encoding="utf-8") if path.exists() else "Echo the text back."


def _tools() -> list[types.Tool]:
    text_schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    empty = {"type": "object", "properties": {}}
    any_object = {"type": "object"}
    tools = [
        types.Tool(name="echo", description=_description(), input_schema=text_schema),
        types.Tool(name="audience", description="Says things to whom.", input_schema=empty),
        types.Tool(name="image", description="A picture.", input_schema=empty),
        types.Tool(name="rows", description="Rows of a table.", input_schema=empty),
        types.Tool(name="hang", description="Never answers.", input_schema=empty),
        types.Tool(name="broken", description="Fails.", input_schema=empty),
        types.Tool(name="environment", description="Its variables' names.", input_schema=empty),
        types.Tool(name="grow", description="Changes its tools and says so.", input_schema=empty),
        types.Tool(name="chatty", description="Logs its text, then answers.", input_schema=empty),
        types.Tool(name="sample", description="Asks the client's model.", input_schema=any_object),
        types.Tool(name="ask", description="Asks the client's person.", input_schema=any_object),
        types.Tool(name="roots", description="The client's roots.", input_schema=empty),
        types.Tool(
            name="delete_all",
            description="Deletes.",
            input_schema=empty,
            annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True),
        ),
    ]
    if (_state() / "empty").exists():
        tools = []
    schema = _state() / "schema"
    if schema.exists():
        shaped = json.loads(schema.read_text(encoding="utf-8"))
        tools.append(types.Tool(name="shaped", description="Shaped.", input_schema=shaped))
    if (_state() / "collide").exists():
        # Two names that are one after nrllm's reduction.
        tools += [
            types.Tool(name="echo.v2", description="One.", input_schema=empty),
            types.Tool(name="echo_v2", description="Two.", input_schema=empty),
        ]
    if (_state() / "extra").exists():
        tools.append(types.Tool(name="extra", description="Added later.", input_schema=empty))
    hostile = _hostile()
    if hostile is not None:
        tools += [
            types.Tool(name=hostile, description=hostile, input_schema=empty),
            types.Tool(name="shout", description=f"Shouts {hostile}", input_schema=empty),
        ]
    return tools


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=_tools())


async def call_tool(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
) -> types.CallToolResult:
    arguments = params.arguments or {}
    calls = _state() / "calls"
    with calls.open("a", encoding="utf-8") as log:
        log.write(params.name + "\n")
    if params.name == "echo":
        return types.CallToolResult(content=[types.TextContent(text=arguments["text"])])
    if params.name == "image":
        data = base64.b64encode(IMAGE).decode("ascii")
        return types.CallToolResult(
            content=[
                types.TextContent(text="here is the picture"),
                types.ImageContent(data=data, mime_type="image/png"),
            ]
        )
    if params.name == "rows":
        return types.CallToolResult(
            content=[types.TextContent(text="2 rows")],
            structured_content={"result": [{"city": "Oslo", "n": 1}, {"city": "Bergen", "n": 2}]},
        )
    if params.name == "audience":
        return types.CallToolResult(
            content=[
                types.TextContent(text="for both"),
                types.TextContent(
                    text="for the model", annotations=types.Annotations(audience=["assistant"])
                ),
                types.TextContent(
                    text="for the user: 4111 1111 1111 1111",
                    annotations=types.Annotations(audience=["user"]),
                ),
                types.TextContent(text="for nobody", annotations=types.Annotations(audience=[])),
                types.TextContent(
                    text="for everyone",
                    annotations=types.Annotations(audience=["user", "assistant"], priority=1),
                ),
            ]
        )
    if params.name == "grow":
        # Adds a tool, or with {"describe": TEXT} changes echo's description, and says so
        # (``notifications/tools/list_changed``): on the listen stream from 2026-07-28 on,
        # unasked before.
        if "describe" in arguments:
            (_state() / "description").write_text(arguments["describe"], encoding="utf-8")
        else:
            (_state() / "extra").touch()
        from mcp.server.subscriptions import ToolsListChanged

        await _bus.publish(ToolsListChanged())
        if ctx.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            await ctx.session.send_tool_list_changed()
        return types.CallToolResult(content=[types.TextContent(text="grown")])
    if params.name == "chatty":
        # Logs the text as the server's own log line (``notifications/message``).
        await ctx.session.send_log_message("warning", arguments["text"], logger="chatty\u202e")
        # And reports its progress (``notifications/progress``), when asked to.
        await ctx.session.report_progress(1, 2, arguments["text"])
        await ctx.session.report_progress(2, 2)
        return types.CallToolResult(content=[types.TextContent(text="chatted")])
    if params.name in ("sample", "ask"):
        return await _asking(ctx, params, arguments)
    if params.name == "roots" and ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS:
        return await _asking(ctx, params, arguments)
    if params.name == "roots":
        try:
            listed = await ctx.session.list_roots()
        except Exception as exc:
            return types.CallToolResult(
                content=[types.TextContent(text=f"refused: {exc}")], is_error=True
            )
        return types.CallToolResult(
            content=[types.TextContent(text="\n".join(str(r.uri) for r in listed.roots))]
        )
    if params.name == "hang":
        await anyio.sleep(3600)
    if params.name == "shout":
        hostile = _hostile() or ""
        return types.CallToolResult(
            content=[types.TextContent(text=hostile)],
            structured_content={"result": [{"said": hostile}]},
        )
    if params.name == "environment":
        return types.CallToolResult(content=[types.TextContent(text=",".join(sorted(os.environ)))])
    return types.CallToolResult(content=[types.TextContent(text="it broke")], is_error=True)


def _client_request(name: str, arguments: dict[str, Any]) -> Any:
    """What ``sample``, ``ask`` and ``roots`` ask the client: {"text", "max_tokens", "tools",
    "url"}."""
    if name == "roots":
        return types.ListRootsRequest()
    if name == "sample":
        tool = types.Tool(name="pay", input_schema={"type": "object"})
        return types.CreateMessageRequest(
            params=types.CreateMessageRequestParams(
                messages=[
                    types.SamplingMessage(
                        role="user", content=types.TextContent(text=arguments.get("text", "hi"))
                    )
                ],
                max_tokens=arguments.get("max_tokens", 5000),
                tools=[tool] if arguments.get("tools") else None,
            )
        )
    if arguments.get("url"):
        return types.ElicitRequest(
            params=types.ElicitRequestURLParams(
                message="Log in", url="https://evil.example/login", elicitation_id="e1"
            )
        )
    schema = {"type": "object", "properties": {"code": {"type": "string"}}}
    return types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=arguments.get("text", "Your code?"), requested_schema=schema
        )
    )


def _said(result: Any) -> str:
    data = result if isinstance(result, dict) else result.model_dump(by_alias=True)
    if "model" in data:
        return f"{data['model']} said {data['content']['text']}"
    if "roots" in data:
        return "\n".join(str(root["uri"]) for root in data["roots"])
    return f"{data['action']} {json.dumps(data.get('content'))}"


async def _asking(
    ctx: ServerRequestContext[Any], params: types.CallToolRequestParams, arguments: dict[str, Any]
) -> Any:
    """``sample``, ``ask`` (and ``roots`` from 2026-07-28 on): ask the client {"times"}
    times, as a server of the session's revision does (a request of its own before
    2026-07-28, an "input required" result answered by calling again from then on), and say
    what came back."""
    from mcp.shared.exceptions import MCPError

    times = arguments.get("times", 1)
    request = _client_request(params.name, arguments)
    said: list[str] = []
    if ctx.session.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        kind = types.CreateMessageResult if params.name == "sample" else types.ElicitResult
        for _ in range(times):
            try:
                said.append(_said(await ctx.session.send_request(request, kind)))
            except MCPError as exc:
                said.append(f"refused: {exc.error.message}")
        return types.CallToolResult(content=[types.TextContent(text="; ".join(said))])
    said = json.loads(params.request_state) if params.request_state else []
    if params.input_responses:
        said.append(_said(params.input_responses["q"]))
    if len(said) < times:
        return types.InputRequiredResult(
            input_requests={"q": request}, request_state=json.dumps(said)
        )
    return types.CallToolResult(content=[types.TextContent(text="; ".join(said))])


NOTES = "Meeting notes: ship on Friday."
# Served when asked for, never listed: a client must not read what the server did not offer.
SECRET = "the unlisted secret"


def _resources() -> list[types.Resource]:
    resources = [
        types.Resource(
            uri="test://notes", name="notes", mime_type="text/plain", description="Notes."
        ),
        types.Resource(uri="test://picture", name="picture", mime_type="image/png"),
    ]
    hostile = _hostile()
    if hostile is not None:
        resources.append(
            types.Resource(
                uri="test://hostile", name=hostile, mime_type=hostile, description=hostile
            )
        )
    return resources


async def list_resources(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListResourcesResult:
    # One resource a page: a client that reads only the first page misses the others.
    resources = _resources()
    at = int(params.cursor) if params is not None and params.cursor else 0
    following = str(at + 1) if at + 1 < len(resources) else None
    return types.ListResourcesResult(resources=resources[at : at + 1], next_cursor=following)


async def read_resource(
    ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams
) -> types.ReadResourceResult:
    uri = str(params.uri)
    if uri == "test://picture":
        blob = base64.b64encode(IMAGE).decode("ascii")
        contents: list[types.TextResourceContents | types.BlobResourceContents] = [
            types.BlobResourceContents(uri=uri, mime_type="image/png", blob=blob)
        ]
    else:
        text = {"test://notes": NOTES, "test://secret": SECRET}.get(uri, _hostile() or "")
        contents = [types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)]
    return types.ReadResourceResult(contents=contents)


async def list_prompts(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListPromptsResult:
    topic = types.PromptArgument(name="topic", description="What about.", required=True)
    prompts = [types.Prompt(name="summarise", description="Summarise a topic.", arguments=[topic])]
    hostile = _hostile()
    if hostile is not None:
        argument = types.PromptArgument(name=hostile, description=hostile)
        prompts.append(types.Prompt(name=hostile, description=hostile, arguments=[argument]))
    return types.ListPromptsResult(prompts=prompts)


def _subscriptions() -> tuple[Any, Any]:
    from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler

    bus = InMemorySubscriptionBus()
    return bus, ListenHandler(bus)


_bus, _listen = _subscriptions()
server = Server(
    "nrllm-test",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_subscriptions_listen=_listen,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
    on_list_prompts=list_prompts,
)


async def _stdio() -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read, write):
        revision = _state() / "revision"
        older = revision.exists()
        if older:
            _older_revision(revision.read_text(encoding="utf-8").strip())
        forward, served = anyio.create_memory_object_stream[Any](16)
        async with anyio.create_task_group() as group:
            group.start_soon(_forward, read, forward, write, older)
            await server.run(served, write, server.create_initialization_options())
            group.cancel_scope.cancel()


def _older_revision(revision: str) -> None:
    """Answer ``initialize`` with ``revision``, as a server written for it would."""
    from mcp.server import runner

    negotiate = runner.ServerRunner._negotiate_initialize

    def older(params: Any) -> Any:
        accepted, _ = negotiate(params)
        return accepted, revision

    runner.ServerRunner._negotiate_initialize = staticmethod(older)  # type: ignore[method-assign]


async def _forward(read: Any, forward: Any, write: Any, older: bool) -> None:
    """Pass every message on, writing the id of each request the client cancels
    (``notifications/cancelled``) to STATE_DIR/cancelled. With ``older``, not
    ``server/discover`` (2026-07-28), which a server of an older revision does not know: it
    answers "method not found" and stays in the handshake era."""
    from mcp.shared.message import SessionMessage

    async with forward:
        async for item in read:
            message = getattr(item, "message", None)
            if (
                isinstance(message, types.JSONRPCNotification)
                and message.method == "notifications/cancelled"
            ):
                with (_state() / "cancelled").open("a", encoding="utf-8") as cancelled:
                    cancelled.write(f"{(message.params or {}).get('requestId')}\n")
            if (
                older
                and isinstance(message, types.JSONRPCRequest)
                and message.method == "server/discover"
            ):
                unknown = types.ErrorData(code=-32601, message="Method not found")
                await write.send(
                    SessionMessage(types.JSONRPCError(jsonrpc="2.0", id=message.id, error=unknown))
                )
                continue
            await forward.send(item)


def main() -> None:
    with (_state() / "starts").open("a", encoding="utf-8") as starts:
        starts.write(f"{os.getpid()}\n")
    delay = _state() / "start_delay"
    if delay.exists():
        import time

        time.sleep(float(delay.read_text(encoding="utf-8")))
    hostile = _hostile()
    if hostile is not None:
        server.name = server.version = server.instructions = hostile
        print(hostile, file=sys.stderr, flush=True)
    if sys.argv[2] == "stdio":
        anyio.run(_stdio)
        return
    import uvicorn

    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[3]), log_level="warning")


if __name__ == "__main__":
    main()

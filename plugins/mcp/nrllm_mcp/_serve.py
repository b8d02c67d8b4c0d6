"""``nrllm mcp serve``: the tools the gate offers one zone, for MCP clients.

Every call goes through ``Host.invoke`` with the live gate and is recorded as a run of kind
``mcp``. Only the call's bounded ``content`` is sent, as one text block: artifacts,
structured content and previews never leave the host.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from nrllm_core import Actor, Host, NoApprover, RefusalReason, TrustZone

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.types import CallToolResult
    from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["Served", "bearer_guard", "build_server", "cannot_approve"]

APPROVER_SUFFIX: Final = "(through the MCP client)"


def cannot_approve(name: str) -> str:
    return f'Error: tool "{name}" needs an approval this client cannot give'


@final
@attrs.frozen(kw_only=True)
class Served:
    """Whose gate decides what is served: a provider's, or a zone's (no provider)."""

    provider: str | None = None
    zone: TrustZone | None = TrustZone.EXTERNAL_GLOBAL
    skill: str | None = None


def build_server(host: Host, served: Served) -> Server[Any]:
    """An SDK server over ``host``: the offered tools listed, each call through the seam."""
    import anyio
    import anyio.to_thread
    import mcp.types as types
    from mcp.server import Server, ServerRequestContext

    from nrllm_core import decide
    from nrllm_mcp._serve_auth import request_actor

    def offered(actor: Actor | None) -> list[Any]:
        config = host.config
        catalog = host.pm.catalog()
        report = decide(
            catalog,
            config,
            provider=served.provider,
            skill=served.skill,
            actor=actor or config.actor(),
            zone=served.zone,
        )
        return [catalog.tools[name] for name in report.offered_names]

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        # Over HTTP with OAuth, the person the token names; else the configured [actor].
        tools = await anyio.to_thread.run_sync(offered, request_actor(ctx))
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=t.name,
                    description=t.description,
                    input_schema=dict(t.parameters),
                    annotations=types.ToolAnnotations(
                        read_only_hint=not t.effect.is_write,
                        destructive_hint=t.effect.is_write,
                    ),
                )
                for t in tools
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name, arguments = params.name, dict(params.arguments or {})
        # Over HTTP with OAuth, the person the token names; else (None) the configured [actor].
        actor = request_actor(ctx)
        elicits = ctx.session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability())
        )

        # Without elicitation, or under four-eyes, nobody here can approve: the call is still
        # a run, whose approval step records the denial and whose tool step the refusal.
        def approve(pending: Any, digest: str) -> str | None:
            four_eyes = host.config.four_eyes(served.provider, served.skill)
            if not elicits or four_eyes:
                from nrllm_core.log import logger

                reason = "fourEyes" if elicits else "noElicitation"
                logger().info("nrllm.mcp.approval_unavailable", tool=pending.name, reason=reason)
                refused = RefusalReason.FOUR_EYES if elicits else RefusalReason.NO_APPROVER
                raise NoApprover(cannot_approve(pending.name), refused)
            return anyio.from_thread.run(
                _ask, ctx, pending, digest, (actor or host.config.actor()).id
            )

        def call() -> Any:
            return host.invoke(
                name,
                arguments,
                provider=served.provider,
                zone=served.zone,
                skill=served.skill,
                kind="mcp",
                approve=approve,
                actor=actor,
            )

        wire = await anyio.to_thread.run_sync(call)
        return _text(wire.content, is_error=wire.is_error)

    return Server("nrllm", on_list_tools=list_tools, on_call_tool=call_tool)


async def _ask(ctx: Any, pending: Any, digest: str, actor: str) -> str | None:
    """Ask the person at the client; ``accept`` approves, anything else (or a failure) denies."""
    lines = [f'nrllm asks for approval: tool "{pending.name}"', *pending.preview]
    lines.append(f"turn digest: {digest}")
    try:
        answer = await ctx.session.elicit_form(
            "\n".join(lines),
            {"type": "object", "properties": {}},
            related_request_id=ctx.request_id,
        )
    except Exception:
        from nrllm_core.log import logger

        logger().warning("nrllm.mcp.elicitation_failed", tool=pending.name, exc_info=True)
        return None
    return f"{actor} {APPROVER_SUFFIX}" if answer.action == "accept" else None


def _text(content: str, *, is_error: bool) -> CallToolResult:
    import mcp.types as types

    return types.CallToolResult(content=[types.TextContent(text=content)], is_error=is_error)


@final
class bearer_guard:
    """Every HTTP request needs ``Authorization: Bearer TOKEN``; anything else is a 401, whose
    plain ``WWW-Authenticate: Bearer`` names no metadata: a client must not start OAuth."""

    __slots__ = ("_app", "_token")

    def __init__(self, app: ASGIApp, *, token: str) -> None:
        if not token:
            raise ValueError("the MCP endpoint needs a non-empty token")
        self._app = app
        self._token = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            offered = dict(scope.get("headers", [])).get(b"authorization", b"")
            if not hmac.compare_digest(offered, self._token):
                from starlette.responses import PlainTextResponse

                refusal = PlainTextResponse(
                    "A bearer token is required.",
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await refusal(scope, receive, send)
                return
        await self._app(scope, receive, send)

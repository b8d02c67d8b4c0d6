"""``nrllm mcp serve``: the tools the gate offers one zone, for MCP clients.

Every call goes through ``Host.invoke`` with the live gate and is recorded as a run of kind
``mcp``. Only the call's bounded ``content`` is sent, as one text block: artifacts and
structured content never leave the host, a tool's preview only in the approval question."""

from __future__ import annotations

import hmac
import threading
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from nrllm_core import Actor, Host, NoApprover, RefusalReason, SubmitOptions, TrustZone
from nrllm_mcp._serve_approval import (
    APPROVAL_REQUEST,
    APPROVER_SUFFIX,
    decided,
    question,
    refusal,
    request_state,
    waiting_turn,
)

if TYPE_CHECKING:
    from mcp.server import Server
    from mcp.types import CallToolResult, InputRequiredResult
    from starlette.types import ASGIApp, Receive, Scope, Send

    from nrllm_core.store import RunInfo

__all__ = [
    "APPROVER_SUFFIX",
    "SWEEPER",
    "Served",
    "bearer_guard",
    "build_server",
    "cannot_approve",
    "settle_abandoned",
]

# What a second round with a request state that names no waiting call gets: never why.
STATE_REFUSED: Final = (
    "Error: this approval cannot be used (expired, already used, or not this call's); nothing ran."
)


# What a call that failed in the gateway (its configuration, its store) is answered.
CALL_FAILED: Final = "Error: the call failed; nothing more can be said here."


# Questions (up to 2025-11-25) that may wait for their person at once: each holds a worker
# thread of the 40 the server shares, so questions nobody answers never take them all.
QUESTIONS_AT_ONCE: Final = 16


def too_many_questions(name: str) -> str:
    return f'Error: tool "{name}" was not run: too many approvals are waiting; ask again later.'


# Who ends a waiting call nobody answered in time.
SWEEPER: Final = "nrllm mcp serve"


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
    from mcp.shared.exceptions import MCPError
    from mcp.types.version import MODERN_PROTOCOL_VERSIONS

    from nrllm_core import decide
    from nrllm_mcp._serve_auth import request_actor

    asking = threading.BoundedSemaphore(QUESTIONS_AT_ONCE)

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
        try:
            # Over HTTP with OAuth, the person the token names; else the configured [actor].
            tools = await anyio.to_thread.run_sync(offered, request_actor(ctx))
        except Exception as exc:
            # The SDK would send the exception's text (a path, a database's SQL): never.
            _failed("tools/list", exc)
            raise MCPError(types.INTERNAL_ERROR, "Internal error") from None
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
    ) -> types.CallToolResult | types.InputRequiredResult:
        try:
            return await answer_call(ctx, params)
        except Exception as exc:
            # The SDK would send the exception's text (a path, a database's SQL): never.
            _failed("tools/call", exc)
            return _text(CALL_FAILED, is_error=True)

    async def answer_call(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        name, arguments = params.name, dict(params.arguments or {})
        # Over HTTP with OAuth, the person the token names; else (None) the configured [actor].
        actor = request_actor(ctx)
        # Read once per call: the configuration is re-read (a stat at least) on each access.
        config = host.config
        caller = actor or config.actor()
        approver = f"{caller.id} {APPROVER_SUFFIX}"
        if params.request_state is not None or params.input_responses:
            # A second round: it decides a waiting call of the same person, never starts one.
            return await anyio.to_thread.run_sync(
                _resumed, host, params, name, arguments, caller, approver
            )
        elicits = ctx.session.check_client_capability(
            types.ClientCapabilities(elicitation=types.ElicitationCapability())
        )
        modern = ctx.session.protocol_version in MODERN_PROTOCOL_VERSIONS

        four_eyes = config.four_eyes(served.provider, served.skill)

        # Without elicitation, or under four-eyes, nobody here can approve: the call is still
        # a run, whose approval step records the denial and whose tool step the refusal.
        # Four-eyes is read again as the call waits: the configuration may have changed.
        def approve(pending: Any, digest: str) -> str:
            from nrllm_core.log import logger

            if not elicits or host.config.four_eyes(served.provider, served.skill):
                reason = "fourEyes" if elicits else "noElicitation"
                logger().info("nrllm.mcp.approval_unavailable", tool=pending.name, reason=reason)
                refused = RefusalReason.FOUR_EYES if elicits else RefusalReason.NO_APPROVER
                raise NoApprover(cannot_approve(pending.name), refused)
            if not asking.acquire(blocking=False):
                logger().warning("nrllm.mcp.approval_unavailable", tool=pending.name, reason="busy")
                raise NoApprover(too_many_questions(pending.name))
            try:
                # A question lives as long as any approval may wait, then it is unanswered.
                wait = config.approvals.ttl_seconds
                action = anyio.from_thread.run(_ask, ctx, pending, digest, wait)
            finally:
                asking.release()
            return decided(pending.name, action, approver)

        def call() -> Any:
            return host.invoke(name, arguments, approve=approve, **_options(served, actor))

        if modern and elicits and not four_eyes:
            return await anyio.to_thread.run_sync(
                _first_round, host, served, name, arguments, actor
            )
        wire = await anyio.to_thread.run_sync(call)
        return _text(wire.content, is_error=wire.is_error)

    return Server("nrllm", on_list_tools=list_tools, on_call_tool=call_tool)


def _options(served: Served, actor: Actor | None) -> SubmitOptions:
    """A served call's: a run of kind ``mcp`` under the served gate, as ``actor``."""
    return {
        "provider": served.provider,
        "zone": served.zone,
        "skill": served.skill,
        "kind": "mcp",
        "actor": actor,
    }


def _first_round(
    host: Host, served: Served, name: str, arguments: dict[str, Any], actor: Actor | None
) -> CallToolResult | InputRequiredResult:
    """2026-07-28 on: the call is submitted. One that needs no approval is answered; one that
    does waits in the store, and this round answers "input required" with the question and
    the request state naming its turn."""
    import mcp.types as types

    outcome = host.submit(name, arguments, **_options(served, actor))
    if not outcome.pending or outcome.turn_digest is None:
        return _answer(outcome)
    (pending,) = outcome.pending
    request = types.ElicitRequest(
        params=types.ElicitRequestFormParams(
            message=question(pending, outcome.turn_digest),
            requested_schema={"type": "object", "properties": {}},
        )
    )
    return types.InputRequiredResult(
        input_requests={APPROVAL_REQUEST: request},
        request_state=request_state(outcome.run_id, outcome.turn_digest),
    )


def _resumed(
    host: Host, params: Any, name: str, arguments: dict[str, Any], caller: Actor, approver: str
) -> CallToolResult:
    """A second round, on whichever instance it reached: the person's answer decides the turn
    its request state names, when that turn waits on this very call of this very person; the
    call's answer (or its refusal) is the result. Anything else is refused and nothing runs."""
    import mcp.types as types

    from nrllm_core import ApprovalRefused
    from nrllm_core.log import logger

    named = waiting_turn(params.request_state)
    why, run = "malformed", None
    if named is not None:
        run_id, digest = named
        why, run = _waiting_call(host, run_id, digest, name, arguments, caller)
    if named is None or run is None:
        logger().warning("nrllm.mcp.approval_state_refused", tool=name, reason=why)
        return _text(STATE_REFUSED, is_error=True)
    answer = (params.input_responses or {}).get(APPROVAL_REQUEST)
    action = answer.action if isinstance(answer, types.ElicitResult) else None
    if action == "accept" and host.config.four_eyes(run.provider, run.skill):
        # The caller is the call's initiator (checked above), whom four-eyes never lets
        # approve, whatever the approver's name says: the call keeps waiting for someone else.
        logger().info("nrllm.mcp.approval_unavailable", tool=name, reason="fourEyes")
        return _text(cannot_approve(name), is_error=True)
    why = RefusalReason.NOT_AWAITING.value
    try:
        if action in ("accept", "decline"):
            decision = host.approve(
                run_id, approve=action == "accept", approver=approver, turn_digest=digest
            )
            return _answer(decision)
        reason = RefusalReason.CANCELLED if action == "cancel" else RefusalReason.UNANSWERED
        ended = host.cancel(run_id, by=approver, reason=reason)
    except ApprovalRefused as exc:
        ended, why = False, exc.reason.value
    if not ended:
        # Decided, ended or expired meanwhile (on another instance, say).
        logger().warning("nrllm.mcp.approval_state_refused", tool=name, reason=why)
        return _text(STATE_REFUSED, is_error=True)
    return _text(str(refusal(name, action, approver)), is_error=True)


def settle_abandoned(host: Host) -> int:
    """End each waiting MCP call whose approval expired with no second round, as
    ``unanswered`` by this gateway (the audit's record of a question nobody answered); how
    many. Any instance may: ending one is a single atomic write.

    Only the turns the store lists as due are opened, and each one's sealed state decides:
    a call still open (the listing was wrong) is left waiting."""
    from nrllm_core import ApprovalRefused
    from nrllm_core.store import RunKind

    ended = 0
    for run_id in host.store.due_suspensions(RunKind.MCP):
        try:
            host.pending(run_id)
        except ApprovalRefused as exc:
            if exc.reason is RefusalReason.EXPIRED and host.cancel(
                run_id, by=SWEEPER, reason=RefusalReason.UNANSWERED
            ):
                ended += 1
    return ended


def _waiting_call(
    host: Host, run_id: str, digest: str, name: str, arguments: dict[str, Any], caller: Actor
) -> tuple[str, RunInfo | None]:
    """The named turn's run when it is this caller's waiting call, or why not (a fixed word
    for the log) and ``None``."""
    from nrllm_core import ApprovalRefused

    try:
        waiting = host.pending(run_id)
    except ApprovalRefused as exc:
        return exc.reason.value, None
    detail = host.store.get_run(run_id)
    if waiting is None or detail is None or waiting.turn_digest != digest:
        return "unknown", None
    (pending,) = waiting.pending
    run = detail.run
    if run.kind.value != "mcp" or (pending.name, pending.arguments) != (name, arguments):
        return "mismatch", None
    if run.actor != caller.id:
        return "mismatch", None
    return "", run


def _answer(outcome: Any) -> CallToolResult:
    """A settled call's answer; a run that failed before its call was answered says so only."""
    call = outcome.call
    if call is None:
        return _text(CALL_FAILED, is_error=True)
    return _text(call.content, is_error=call.is_error)


def _failed(method: str, exc: Exception) -> None:
    from nrllm_core.log import logger

    # The exception's class only: its text may hold what the store was sent.
    logger().error("nrllm.mcp.request_failed", method=method, error=type(exc).__name__)


async def _ask(ctx: Any, pending: Any, digest: str, seconds: float) -> str | None:
    """Ask the person at the client (up to 2025-11-25): the answer's action, or ``None`` when
    the request failed or got no answer in ``seconds``."""
    import anyio

    try:
        with anyio.fail_after(seconds):
            answer = await ctx.session.elicit_form(
                question(pending, digest),
                {"type": "object", "properties": {}},
                related_request_id=ctx.request_id,
            )
    except Exception:
        from nrllm_core.log import logger

        logger().warning("nrllm.mcp.elicitation_failed", tool=pending.name, exc_info=True)
        return None
    return str(answer.action)


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

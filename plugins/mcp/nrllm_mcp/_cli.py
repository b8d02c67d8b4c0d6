"""``nrllm mcp``: the servers and their state, the pins and their approval, and ``serve``."""

from __future__ import annotations

import difflib
import os
from typing import TYPE_CHECKING, Any, Final

import click

from nrllm_core import HostConfig, TrustZone
from nrllm_core.cli import BadInput, echo, echo_json, host_config
from nrllm_mcp._settings import (
    SECTION,
    McpSettings,
    ServerSettings,
    ServeSettings,
    SettingsError,
    load_settings,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from nrllm_mcp._connection import Connection
    from nrllm_mcp._pins import PinStore
    from nrllm_mcp._serve_auth import TokenCheck

__all__ = ["mcp"]

# How often ``nrllm mcp serve`` ends the waiting calls whose approval expired unanswered.
SWEEP_SECONDS: Final = 60.0


def _config(ctx: click.Context) -> tuple[HostConfig, McpSettings]:
    """The command's configuration (``--config``, ``$NRLLM_CONFIG``, ``./nrllm.toml``), as
    core reads it, and its ``[mcp]`` section."""
    config = host_config(ctx)
    try:
        return config, load_settings(config.plugin_settings.get(SECTION, {}))
    except SettingsError as exc:
        raise BadInput(f"invalid configuration: {exc}") from None


def _pins(ctx: click.Context, config: HostConfig) -> Any:
    from nrllm_core.store import default_data_dir
    from nrllm_mcp._client import close_all
    from nrllm_mcp._pins import PinStore

    store = PinStore.open(config.store.url, data_dir=default_data_dir())
    ctx.call_on_close(store.close)
    ctx.call_on_close(close_all)
    return store


def _server(settings: McpSettings, name: str) -> Any:
    server = settings.servers.get(name)
    if server is None:
        known = ", ".join(sorted(settings.servers)) or "none"
        raise BadInput(f'no MCP server named "{name}" is configured (configured: {known})')
    return server


@click.group()
def mcp() -> None:
    """MCP servers' tools under governance, and governed tools for MCP clients."""


@mcp.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def servers(ctx: click.Context, as_json: bool) -> None:
    """Each configured server: its transport, its state and its tools."""
    from nrllm_core import ToolRegistry
    from nrllm_mcp._client import UNREADABLE, connection_for, register_survey, survey
    from nrllm_mcp._definition import nrllm_name
    from nrllm_mcp._pins import PinState

    config, settings = _config(ctx)
    store = _pins(ctx, config)
    rows = []
    for server in settings.servers.values():
        row: dict[str, Any] = {"name": server.name, "transport": server.transport}
        if not server.enabled:
            rows.append({**row, "state": "disabled", "reason": None, "tools": []})
            continue
        found = survey(server, os.environ, lambda: store, pin_first_use=False)
        # Registered as the catalog registers them, to say why a pinned tool is still withheld.
        registry = ToolRegistry()
        if found.failure is None:
            register_survey(registry, found, connection_for(server, os.environ))
        refused = {
            n: {"reason": reason, "detail": detail} for n, reason, detail in registry.withheld
        }
        tools = []
        for d in found.definitions:
            name = nrllm_name(server.tool_prefix, d.name)
            pin = UNREADABLE if found.states is None else found.states[d.name]
            # A tool that is not pinned is withheld for its pin state, which ``pin`` says.
            withheld = refused.get(name) if name is not None and pin == PinState.PINNED else None
            tools.append({"tool": d.name, "name": name, "pin": pin, "withheld": withheld})
        state = "failed" if found.failure is not None else "connected"
        rows.append({**row, "state": state, "reason": found.failure, "tools": tools})
    if as_json:
        echo_json(rows)
        return
    if not rows:
        echo("no MCP servers configured ([mcp.servers.NAME] in nrllm.toml)")
    for row in rows:
        reason = f": {row['reason']}" if row["reason"] else ""
        echo(f"{row['name']} ({row['transport']}): {row['state']}{reason}")
        for tool in row["tools"]:
            pin = "new (pinned on first use)" if tool["pin"] == PinState.NEW else tool["pin"]
            if tool["withheld"] is not None:
                reason, detail = tool["withheld"]["reason"], tool["withheld"]["detail"]
                pin = f"{pin}, withheld ({reason}{f': {detail}' if detail else ''})"
            echo(f"  {tool['name'] or '(no usable name)'}  {pin}  (server's {tool['tool']})")


@mcp.command()
@click.argument("server_name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def resources(ctx: click.Context, server_name: str, as_json: bool) -> None:
    """The resources the server lists (every page): URI, name, MIME type, description."""
    from nrllm_mcp._resources import shown_resources

    rows = shown_resources(_listed(ctx, server_name, "resources", lambda c: c.list_resources()))
    if as_json:
        echo_json(rows)
        return
    if not rows:
        echo(f"{server_name} lists no resources")
    for row in rows:
        echo(f"{row['uri']}  {row['name']}  ({row['mimeType'] or 'no MIME type'})")
        if row["description"]:
            echo(f"  {row['description']}")


@mcp.command()
@click.argument("server_name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def prompts(ctx: click.Context, server_name: str, as_json: bool) -> None:
    """The prompts the server lists (every page): name, description, arguments."""
    from nrllm_mcp._resources import shown_prompts

    rows = shown_prompts(_listed(ctx, server_name, "prompts", lambda c: c.list_prompts()))
    if as_json:
        echo_json(rows)
        return
    if not rows:
        echo(f"{server_name} lists no prompts")
    for row in rows:
        echo(f"{row['name']}  {row['description'] or ''}".rstrip())
        for argument in row["arguments"]:
            needed = "required" if argument["required"] else "optional"
            echo(f"  {argument['name']} ({needed})  {argument['description'] or ''}".rstrip())


def _listed(
    ctx: click.Context, server_name: str, what: str, listing: Callable[[Connection], list[Any]]
) -> list[Any]:
    """The server's ``resources`` or ``prompts``, every page; the failure, never the server's
    text of it, as the command's error."""
    from nrllm_mcp._client import close_all, connection_for
    from nrllm_mcp._connection import ConnectionFailed

    _, settings = _config(ctx)
    server = _server(settings, server_name)
    if not server.enabled:
        raise BadInput(f'MCP server "{server.name}" is disabled')
    ctx.call_on_close(close_all)
    connection = connection_for(server, os.environ)
    try:
        connection.open_for_request()
        return listing(connection)
    except ConnectionFailed as exc:
        raise click.ClickException(f'MCP server "{server.name}" cannot be read: {exc}') from None
    except Exception:
        raise click.ClickException(
            f'MCP server "{server.name}" did not list its {what} (it may serve none)'
        ) from None


@mcp.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def pins(ctx: click.Context, as_json: bool) -> None:
    """The pinned tool definitions, with the original descriptions."""
    if ctx.invoked_subcommand is not None:
        return
    from nrllm_mcp._definition import visible

    config, _ = _config(ctx)
    rows = [
        {
            "server": p.server,
            "tool": p.tool,
            "digest": p.digest,
            "pinned_at": p.pinned_at,
            "pinned_by": p.pinned_by,
            "description": p.definition.description,
            "mac": p.mac.value,
        }
        for p in _pins(ctx, config).pins()
    ]
    if as_json:
        echo_json(rows)
        return
    if not rows:
        echo("no MCP tool is pinned")
    for row in rows:
        echo(
            f"{row['server']} {row['tool']}  sha256:{row['digest'][:16]}  {row['pinned_at']}"
            f"  by {row['pinned_by']}{_MAC_SHOWN[row['mac']]}"
        )
        echo(f"  {visible(row['description'])}")


# What ``nrllm mcp pins`` adds to a pin's line, by its mac check.
_MAC_SHOWN = {"valid": "", "tampered": "  tampered", "missing": "  no MAC: approve again"}
# How ``approve`` names a pin whose mac does not hold; its stored definition is not shown.
_UNTRUSTED = {"tampered": "tampered", "missing": "unauthenticated"}


@pins.command()
@click.argument("server_name", required=False)
@click.argument("tool_name", required=False)
@click.option("--all", "every", is_flag=True, help="Every enabled server, one after the other.")
@click.option("--yes", is_flag=True, help="Approve without asking (the diff is still shown).")
@click.pass_context
def approve(
    ctx: click.Context, server_name: str | None, tool_name: str | None, every: bool, yes: bool
) -> None:
    """Pin the server's changed and new tools (or only TOOL) as it lists them now; with
    --all, every enabled server's, asking once per server."""
    if every and server_name is not None:
        raise BadInput("name a server or --all, not both")
    if not every and server_name is None:
        raise BadInput("name the server whose tools to approve, or --all for every server")
    config, settings = _config(ctx)
    by = config.actor().id
    if server_name is not None:
        server = _server(settings, server_name)
        _approve_server(_pins(ctx, config), server, tool_name, yes=yes, by=by)
        return
    store = _pins(ctx, config)
    # After an upgrade every server may need approving again: each is shown and asked for in
    # turn, and one that cannot be read or is declined leaves the others to go on.
    not_approved = []
    for server in settings.servers.values():
        if not server.enabled:
            continue
        echo(f"{server.name} ({server.transport}):")
        try:
            _approve_server(store, server, None, yes=yes, by=by)
        except click.ClickException as exc:
            echo(f"{server.name}: {exc.format_message()}", err=True)
            not_approved.append(server.name)
    if not_approved:
        raise click.ClickException(f"not approved: {', '.join(not_approved)}")


def _approve_server(
    store: PinStore, server: ServerSettings, tool_name: str | None, *, yes: bool, by: str
) -> None:
    """Show the diff of each of ``server``'s tools (or only ``tool_name``) that does not match
    its pin, ask (unless ``yes``), and pin them for ``by``."""
    from nrllm_mcp._client import survey
    from nrllm_mcp._pins import PinState

    found = survey(server, os.environ, lambda: store, pin_first_use=False)
    if found.failure is not None:
        raise click.ClickException(f'MCP server "{server.name}" cannot be read: {found.failure}')
    if found.states is None:
        raise click.ClickException("the pin store cannot be read; nothing was approved")
    pending = [
        d
        for d in found.definitions
        if found.states[d.name] != PinState.PINNED and (tool_name is None or d.name == tool_name)
    ]
    if tool_name is not None and tool_name not in found.states:
        raise BadInput(f'MCP server "{server.name}" lists no tool "{tool_name}"')
    if not pending:
        echo("nothing to approve: every listed tool matches its pin")
        return
    pinned = {p.tool: p for p in store.pins(server.name)}
    for definition in pending:
        pin = pinned.get(definition.name)
        before = None if pin is None or pin.mac != "valid" else pin.definition
        kind = "new" if pin is None else _UNTRUSTED.get(pin.mac, "changed")
        echo(f"{kind}: {server.name} {definition.name}")
        diff = difflib.unified_diff(
            [] if before is None else before.pretty(),
            definition.pretty(),
            fromfile="pinned",
            tofile="listed now",
            lineterm="",
        )
        for line in diff:
            echo(line)
    if not yes and not click.confirm("Pin these definitions?", default=False):
        raise click.ClickException("nothing was approved")
    store.pin(server.name, pending, by=by)
    echo(f"pinned {len(pending)} tool(s) of {server.name}")


@mcp.command()
@click.argument("server_name")
@click.option(
    "--timeout",
    type=click.FloatRange(1, 3600),
    default=300,
    show_default=True,
    help="Seconds to wait for the redirect.",
)
@click.pass_context
def login(ctx: click.Context, server_name: str, timeout: float) -> None:
    """Log in to an OAuth server: open the printed URL; the redirect comes back to this
    machine (127.0.0.1), and the tokens are kept encrypted in the data folder."""
    from nrllm_mcp._oauth import LoginFailed
    from nrllm_mcp._oauth import login as log_in

    server = _oauth_server(ctx, server_name)
    echo("Open this URL in a browser to log in (waiting for its redirect):")
    try:
        log_in(server, os.environ, echo, timeout=timeout)
    except LoginFailed as exc:
        raise click.ClickException(f'login to "{server.name}" failed: {exc}') from None
    echo(f"logged in to {server.name}")


@mcp.command()
@click.argument("server_name")
@click.pass_context
def logout(ctx: click.Context, server_name: str) -> None:
    """Delete an OAuth server's stored tokens."""
    from nrllm_mcp._oauth import logout as log_out

    server = _oauth_server(ctx, server_name)
    echo(f"logged out of {server.name}" if log_out(server) else f"{server.name}: not logged in")


def _oauth_server(ctx: click.Context, name: str) -> ServerSettings:
    server: ServerSettings = _server(_config(ctx)[1], name)
    if server.auth != "oauth":
        raise BadInput(f'MCP server "{name}" does not use OAuth (auth = "oauth")')
    return server


@mcp.command()
@click.option(
    "--zone",
    type=click.Choice([zone.value for zone in TrustZone]),
    default=None,
    help="Serve the tools this zone is offered (default: externalGlobal).",
)
@click.option("--provider", default=None, help="Serve the tools this provider's gate offers.")
@click.option("--skill", default=None, help="Narrow to this skill's tools.")
@click.option(
    "--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True
)
@click.option("--host", "bind", default="127.0.0.1", show_default=True, help="HTTP: address.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option(
    "--token-env",
    default=None,
    help="HTTP: the environment variable holding the bearer token (default: a new one); "
    'not with [mcp.serve] auth = "oauth".',
)
@click.pass_context
def serve(
    ctx: click.Context,
    zone: str | None,
    provider: str | None,
    skill: str | None,
    transport: str,
    bind: str,
    port: int,
    token_env: str | None,
) -> None:
    """Serve the tools the gate offers one zone (or provider) to MCP clients."""
    from nrllm_core import Host
    from nrllm_mcp._serve import Served

    if zone is not None and provider is not None:
        raise BadInput("name a zone or a provider, not both")
    config, settings = _config(ctx)
    if provider is not None and provider not in config.providers:
        raise BadInput(f'no provider named "{provider}" is configured')
    if skill is not None and skill not in config.skills:
        raise BadInput(f'no skill named "{skill}" is configured')
    oauth = transport == "http" and settings.serve.auth == "oauth"
    if oauth and token_env is not None:
        raise BadInput('--token-env is for the static token; [mcp.serve] auth = "oauth" takes none')
    token = None
    if transport == "http" and not oauth:
        token = _token(bind, token_env)
    check = None
    if oauth:
        from nrllm_mcp._serve_auth import verifier

        try:
            # Before anything starts: missing credentials must not surface as refused requests.
            check = verifier(settings.serve, os.environ)
        except SettingsError as exc:
            raise BadInput(f"invalid configuration: {exc}") from None
    served = Served(
        provider=provider,
        zone=None if provider is not None else TrustZone(zone or TrustZone.EXTERNAL_GLOBAL),
        skill=skill,
    )
    # The host hands its own configuration to its manager: the MCP servers' tools are
    # registered with it.
    host = Host.from_config((ctx.find_root().obj or {}).get("config_path"))
    ctx.call_on_close(host.store.close)
    from nrllm_mcp._client import close_all

    ctx.call_on_close(close_all)
    ctx.call_on_close(_sweeping(host))
    if transport == "stdio":
        _serve_stdio(host, served)
    else:
        _serve_http(
            host,
            served,
            bind=bind,
            port=port,
            token=token,
            check=check,
            shown=token_env is None,
            settings=settings.serve,
        )


def _sweeping(host: Any) -> Callable[[], None]:
    """Every minute, on a thread of its own, end the waiting calls whose approval expired
    unanswered (see ``settle_abandoned``); what stops it, once its sweep is done."""
    import threading

    from nrllm_core.log import logger
    from nrllm_mcp._serve import settle_abandoned

    stop = threading.Event()

    def sweep() -> None:
        while not stop.is_set():
            try:
                ended = settle_abandoned(host)
            except Exception:
                logger().warning("nrllm.mcp.serve_sweep_failed", exc_info=True)
            else:
                if ended:
                    logger().info("nrllm.mcp.serve_unanswered_ended", count=ended)
            stop.wait(SWEEP_SECONDS)

    worker = threading.Thread(target=sweep, name="nrllm-mcp-sweep", daemon=True)
    worker.start()

    def stopped() -> None:
        stop.set()
        worker.join(SWEEP_SECONDS)

    return stopped


def _token(bind: str, token_env: str | None) -> str:
    import ipaddress
    import secrets

    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        # A name may resolve anywhere; only a loopback address literal counts as local.
        loopback = False
    else:
        loopback = address.is_loopback
        if address.is_unspecified:
            # A request names the address it reached as its Host, never this one: every
            # client would be refused (421) by the check against DNS rebinding.
            raise BadInput(
                f"--host {bind} listens everywhere but no client names it: give the address "
                "or name clients use (with --token-env)"
            )
    if token_env is None:
        if not loopback:
            raise BadInput(f"--host {bind} is reachable from other machines; it needs --token-env")
        return secrets.token_urlsafe(32)
    token = os.environ.get(token_env, "")
    if len(token) < 16:
        raise BadInput(f"--token-env {token_env}: the variable must hold at least 16 characters")
    return token


def _serve_stdio(host: Any, served: Any) -> None:
    import anyio
    from mcp.server.stdio import stdio_server

    from nrllm_mcp._serve import build_server

    server = build_server(host, served)

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def _serve_http(
    host: Any,
    served: Any,
    *,
    bind: str,
    port: int,
    token: str | None,
    check: TokenCheck | None,
    shown: bool,
    settings: ServeSettings,
) -> None:
    """Streamable HTTP at ``/mcp``: behind the static token (``token``), or, without one, as
    the OAuth resource server ``settings`` describe, each token checked by ``check``."""
    import ipaddress
    import signal
    import socket
    from urllib.parse import urlsplit

    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    from nrllm_mcp._serve import bearer_guard, build_server
    from nrllm_mcp._serve_framing import plain_unless_asked

    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((bind, port))
    except OSError as exc:
        listener.close()
        raise BadInput(f"cannot listen on {bind}:{port} ({exc.strerror})") from None
    bound = listener.getsockname()[1]
    name = f"[{bind}]" if family == socket.AF_INET6 else bind
    names = [name]
    try:
        if ipaddress.ip_address(bind).is_loopback:
            # What a browser or client on this machine writes for the same address.
            names.append("localhost")
    except ValueError:
        pass
    hosts = [f"{n}:{bound}" for n in names]
    origins = [f"http://{n}:{bound}" for n in names]
    if token is None:
        # Behind a proxy the requests name the public resource URL's host.
        resource = urlsplit(settings.resource or "")
        hosts.append(resource.netloc)
        origins.append(f"{resource.scheme}://{resource.netloc}")
    # DNS-rebinding protection: only these as Host, and no page of another origin.
    security = TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )
    mcp_server = build_server(host, served)
    app = plain_unless_asked(
        mcp_server.streamable_http_app(transport_security=security, host=bind),
        mcp_server.session_manager,
    )
    echo(f"nrllm MCP endpoint: http://{name}:{bound}/mcp")
    guarded: Any
    if token is None:
        from nrllm_mcp._serve_auth import oauth_guard

        if check is None:
            raise ValueError("an OAuth endpoint needs its token check")
        guarded = oauth_guard(app, settings=settings, check=check)
        echo(f"OAuth resource: {settings.resource} (authorization server {settings.issuer})")
    else:
        guarded = bearer_guard(app, token=token)
        echo(f"bearer token: {token}" if shown else "bearer token: the value of --token-env")
    server = uvicorn.Server(uvicorn.Config(guarded, log_level="warning", access_log=False))
    # uvicorn stops gracefully on SIGTERM (the answers in flight sent), then raises the signal
    # again for the handler it found. Python's default would end the process there, before the
    # command closes its audit store and MCP sessions; a stop asked for ends as ^C does.
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        server.run(sockets=[listener])
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(0)

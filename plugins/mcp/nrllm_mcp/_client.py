"""MCP servers' tools as nrllm tools: classified by the operator, pinned, called on the
plugin's loop with a timeout, and re-connected once after a failure."""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, final

import attrs

from nrllm_core import DataClass, Effect, Integrity, Tool, ToolContext, ToolRegistry, ToolResult
from nrllm_core.log import logger
from nrllm_mcp._connection import Connection, ConnectionFailed, Progress, wait_closed
from nrllm_mcp._definition import Definition, clean_description, clean_schema, nrllm_name
from nrllm_mcp._results import to_tool_result
from nrllm_mcp._runner import Abandoned
from nrllm_mcp._settings import McpSettings, ServerSettings

__all__ = [
    "McpTool",
    "Survey",
    "close_all",
    "connection_for",
    "register_servers",
    "register_survey",
    "survey",
]

# Why a server's tool is withheld, as ``nrllm tools`` shows it (``no: REASON``).
UNREADABLE: Final = "pinsUnreadable"
BAD_SCHEMA: Final = "invalidSchema"
TOO_LARGE: Final = "tooLarge"
UNAVAILABLE: Final = "serverUnavailable"
FIRST_USE: Final = "(first use)"

_lock = threading.Lock()
# Held weakly: a connection lives as long as its holders (the tools of a host's catalog), so a
# host keeps its sessions across runs and calls, and they close when it goes.
_connections: weakref.WeakValueDictionary[str, Connection] = weakref.WeakValueDictionary()


def connection_for(server: ServerSettings, environ: Mapping[str, str]) -> Connection:
    """The connection to ``server`` that a catalog still holds, else a new one; a changed
    configuration gets a new one (the old one closes when its holders go)."""
    with _lock:
        known = _connections.get(server.name)
        if known is not None and known.settings == server:
            return known
        fresh = Connection(server, environ)
        _connections[server.name] = fresh
    return fresh


def close_all() -> None:
    """Close every connection (a command that is done, a test's teardown)."""
    with _lock:
        connections = list(_connections.values())
        _connections.clear()
    for connection in connections:
        connection.close()
    wait_closed()


@final
@attrs.frozen(kw_only=True)
class Survey:
    """One server's listed tools and their pin states, or why they cannot be had."""

    server: ServerSettings
    definitions: tuple[Definition, ...] = ()
    # Tool name to ``pinned``/``changed``/``unpinned``/``new``; ``None`` when the pins could
    # not be read.
    states: Mapping[str, str] | None = None
    failure: str | None = None


def listing(connection: Connection) -> list[Any] | str:
    """The server's tools, its session opened (or re-listed); or why they cannot be had."""
    try:
        listed = connection.reopen()
        if listed is None:
            try:
                listed = connection.list_tools()
            except Exception:
                # A session that broke since it was opened: opened again, once.
                listed = connection.open()
    except Exception as exc:
        # Not waited for: a server stuck starting must not hold up the others' listings.
        connection.close(wait=False)
        return str(exc) if isinstance(exc, ConnectionFailed) else "the server did not answer"
    return listed


def listings(connections: Sequence[Connection]) -> list[list[Any] | str]:
    """Every server's :func:`listing`, the servers started at once: the slowest (or one that
    never starts, up to its ``start_timeout_seconds``) sets the wait, not their sum."""
    if len(connections) < 2:
        return [listing(c) for c in connections]
    from concurrent.futures import ThreadPoolExecutor

    # One thread per server, each waiting on the plugin's loop, where the sessions start.
    with ThreadPoolExecutor(len(connections), thread_name_prefix="nrllm-mcp-start") as pool:
        return list(pool.map(listing, connections))


def survey(
    server: ServerSettings,
    environ: Mapping[str, str],
    pins: Any,
    *,
    pin_first_use: bool,
    listed: list[Any] | str | None = None,
) -> Survey:
    """Connect (or re-list), unless ``listed`` is the listing already had, and compare every
    tool with its pin. A server's first listing is pinned as found (trust on first use), the
    server itself even when it lists no tool, when ``pin_first_use``; otherwise its tools are
    ``new``."""
    from nrllm_mcp._pins import PinState, pin_states

    if listed is None:
        listed = listing(connection_for(server, environ))
    if isinstance(listed, str):
        return Survey(server=server, failure=listed)
    definitions = tuple(Definition.from_mcp(t) for t in listed)
    try:
        store = pins()
        if not store.known(server.name):
            if not pin_first_use:
                return Survey(
                    server=server,
                    definitions=definitions,
                    states={d.name: PinState.NEW.value for d in definitions},
                )
            store.pin(server.name, definitions, by=FIRST_USE)
        pinned = store.pins(server.name)
        states = {name: state.value for name, state in pin_states(definitions, pinned).items()}
    except Exception:
        logger().error("nrllm.mcp.pins_unreadable", server=server.name, exc_info=True)
        return Survey(server=server, definitions=definitions)
    return Survey(server=server, definitions=definitions, states=states)


def register_servers(
    registry: ToolRegistry,
    settings: McpSettings,
    store_url: str | None,
    environ: Mapping[str, str],
) -> None:
    """Register every enabled server's pinned tools and withhold the rest; the pins are in
    the audit's database, at ``store_url`` (``[store] url``)."""
    enabled = [server for server in settings.servers.values() if server.enabled]
    if not enabled:
        # No server, no pins: the pin store (and SQLAlchemy with it) is not even imported.
        return
    from nrllm_core.store import default_data_dir
    from nrllm_mcp._pins import PinStore

    opened: list[PinStore] = []

    def pins() -> PinStore:
        if not opened:
            opened.append(PinStore.open(store_url, data_dir=default_data_dir()))
        return opened[0]

    connections = [connection_for(server, environ) for server in enabled]
    try:
        for connection, listed in zip(connections, listings(connections), strict=True):
            server = connection.settings
            found = survey(server, environ, pins, pin_first_use=True, listed=listed)
            register_survey(registry, found, connection)
            if server.resources and found.failure is None:
                from nrllm_mcp._resources import ReadResource

                registry.register(ReadResource(connection))
            if found.failure is not None:
                _withhold_pinned(registry, server, found.failure, pins)
    finally:
        for store in opened:
            store.close()


def _withhold_pinned(
    registry: ToolRegistry, server: ServerSettings, failure: str, pins: Callable[[], Any]
) -> None:
    """Withhold the pinned tools of a server that could not be listed, saying why: they are
    missing from the catalog for this server's failure alone."""
    try:
        pinned = pins().pins(server.name)
    except Exception:
        logger().error("nrllm.mcp.pins_unreadable", server=server.name, exc_info=True)
        return
    for pin in pinned:
        name = nrllm_name(server.tool_prefix, pin.tool)
        if name is not None:
            registry.withhold(name, UNAVAILABLE, detail=failure)


def register_survey(registry: ToolRegistry, found: Survey, connection: Connection) -> None:
    """Register the surveyed server's pinned tools that can be offered, and withhold the rest
    with the reason (and, for a pinned one, what is wrong with it)."""
    server = found.server
    if found.failure is not None:
        logger().warning("nrllm.mcp.server_failed", server=server.name, reason=found.failure)
        return
    for definition in found.definitions:
        name = nrllm_name(server.tool_prefix, definition.name)
        if name is None:
            logger().warning("nrllm.mcp.tool_unnamed", server=server.name)
            continue
        state = UNREADABLE if found.states is None else found.states[definition.name]
        if state != "pinned":
            registry.withhold(name, state)
            continue
        try:
            tool = McpTool(name=name, definition=definition, connection=connection)
        except ValueError as exc:
            _refuse_schema(registry, server, name, exc)
            continue
        size = tool.offered_bytes()
        if size > server.max_tool_bytes:
            detail = f"{size} bytes as offered, over max_tool_bytes {server.max_tool_bytes}"
            registry.withhold(name, TOO_LARGE, detail=detail)
            continue
        try:
            registry.register(tool)
        except (TypeError, ValueError) as exc:
            # Either schema is not one jsonschema can compile.
            _refuse_schema(registry, server, name, exc)


def _refuse_schema(
    registry: ToolRegistry, server: ServerSettings, name: str, problem: Exception
) -> None:
    registry.withhold(name, BAD_SCHEMA, detail=str(problem))
    # The log says what ``nrllm tools`` says: the problem as core recorded it, bounded and in
    # printable ASCII (jsonschema's message quotes the server's schema as it is).
    _, _, shown = registry.withheld[-1]
    logger().warning("nrllm.mcp.schema_refused", server=server.name, tool=name, problem=shown)


def effect_for(server: ServerSettings, definition: Definition) -> Effect:
    """Read-only only when the operator says so and the server's own hints do not object:
    the hints may make a tool stricter, never looser."""
    hints = definition.annotations
    objects = hints.get("readOnlyHint") is False or hints.get("destructiveHint") is True
    if definition.name in server.read_only_tools and not objects:
        return Effect.READ_ONLY
    return Effect.NON_IDEMPOTENT_WRITE


class McpTool(Tool):
    """One pinned tool of one server."""

    def __init__(self, *, name: str, definition: Definition, connection: Connection) -> None:
        server = connection.settings
        self.name = name
        self.description = clean_description(definition.description) or (
            f"The tool {clean_description(definition.name)} of the MCP server {server.name}."
        )
        self.group = server.group
        self.parameters = clean_schema(definition.input_schema)
        # Checked against the server's own schema: what cleaning drops (``if``/``then``,
        # ``dependentRequired``, a format) must not let a call through that it refuses.
        self.argument_schema = definition.input_schema
        self.data_class: DataClass | None = server.data_class
        self.integrity: Integrity | None = server.integrity
        self.effect = effect_for(server, definition)
        self.definition = definition
        self._connection = connection

    def offered_bytes(self) -> int:
        """The size of what a model is offered of the tool, as compact UTF-8 JSON."""
        offered = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
        }
        return len(json.dumps(offered, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return call(
            self._connection,
            self.definition,
            arguments,
            self.name,
            on_progress=None if context.on_progress is None else context.report_progress,
            abandoned=context.abandoned,
            context=context,
        )

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        server = self._connection.settings
        shown = json.dumps(arguments, ensure_ascii=False, sort_keys=True)
        return [
            f"MCP server {server.name}, tool {clean_description(self.definition.name)}",
            f"arguments: {shown}",
        ]


def call(
    connection: Connection,
    definition: Definition,
    arguments: dict[str, Any],
    name: str,
    *,
    on_progress: Progress | None = None,
    abandoned: threading.Event | None = None,
    context: ToolContext | None = None,
) -> ToolResult:
    """Call the tool; a failure closes the session and the next call opens it again, once,
    and refuses to run a tool whose definition no longer matches its pin. What the server
    asks during the call is put to ``context``'s run."""
    server = connection.settings.name
    try:
        listed = connection.reopen()
    except ConnectionFailed:
        return ToolResult.error(f'Error: MCP server "{server}" cannot be reached.')
    if listed is not None:
        now = {t.name: Definition.from_mcp(t).digest for t in listed}
        if now.get(definition.name) != definition.digest:
            logger().error("nrllm.mcp.tool_changed", server=server, tool=name)
            return ToolResult.error(
                f'Error: tool "{name}" changed on the MCP server; it is withheld until '
                "its pin is approved."
            )
    from mcp import MCPError

    try:
        result = connection.call(
            definition.name,
            arguments,
            on_progress=on_progress,
            abandoned=abandoned,
            context=context,
        )
    except Abandoned:
        # The run was cancelled or the call timed out in core: the server was told to stop
        # (``notifications/cancelled``); the session is fine and stays open.
        logger().info("nrllm.mcp.call_cancelled", server=server, tool=name)
        return ToolResult.error(f'Error: the call of "{name}" was cancelled.')
    except MCPError:
        # The server answered with an error, one of its own requests refused among them
        # (sampling or elicitation it may not use): the session is fine.
        logger().info("nrllm.mcp.call_refused", server=server, tool=name)
        return ToolResult.error(f'Error: MCP server "{server}" refused the call of "{name}".')
    except TimeoutError:
        connection.close(wait=False)
        logger().warning("nrllm.mcp.call_timeout", server=server, tool=name)
        return ToolResult.error(
            f'Error: MCP server "{server}" did not answer in time; the connection is '
            "re-opened on the next call."
        )
    except Exception:
        connection.close()
        logger().warning("nrllm.mcp.call_failed", server=server, tool=name, exc_info=True)
        return ToolResult.error(
            f'Error: MCP server "{server}" failed; the connection is re-opened on the next call.'
        )
    from mcp.types import CallToolResult

    if not isinstance(result, CallToolResult):
        return ToolResult.error(f'Error: MCP server "{server}" answered malformed.')
    return to_tool_result(result, name)

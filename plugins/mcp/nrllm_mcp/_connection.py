"""One MCP server's session, held open by a task on the plugin's loop.

The transport and the session are async context managers that must be entered and left by
the same task: one task holds them until it is told to stop or the session has been idle for
``idle_seconds``, and calls use the session. The session lives as long as its
:class:`Connection` is held (by the tools of a host's catalog): when the last holder goes, the
session is closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import threading
import time
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, Final, TypeVar, final

from nrllm_core import ToolContext
from nrllm_core.log import logger
from nrllm_mcp import _runner
from nrllm_mcp._asking import Asking
from nrllm_mcp._oauth import NotLoggedIn
from nrllm_mcp._settings import ServerSettings

__all__ = ["Connection", "ConnectionFailed", "Progress", "wait_closed"]

T = TypeVar("T")

# What hears a call's progress: how far, of how much (``None``: unknown), and what it says.
Progress = Callable[[float, float | None, str | None], None]

# How long a closing session may take to stop its child or its HTTP session.
_CLOSE_SECONDS: Final = 10.0

# Sessions being stopped in the background (a server that failed to start, a hung one):
# ``wait_closed`` waits for them, so a command or a test leaves no child behind.
_closing_lock = threading.Lock()
_closing: set[concurrent.futures.Future[None]] = set()


class ConnectionFailed(Exception):
    """The server could not be reached; the message is fixed text, safe to show."""


@final
class Connection:
    """A session with one server: opened on demand, closed once it failed, when it has been
    idle for ``idle_seconds`` (opened again on the next use), or when nothing holds this
    object any more (the host whose catalog's tools held it is gone)."""

    def __init__(self, settings: ServerSettings, environ: Mapping[str, str]) -> None:
        self.settings = settings
        self._state = _Session(settings, environ)
        # The loop's task holds the session, never this handle: the handle can go, and its
        # going closes the session (without waiting: it may go on any thread, the loop's too).
        weakref.finalize(self, self._state.close, wait=False)

    def open(self) -> list[Any]:
        """Open the session and list the server's tools (every page)."""
        return self._state.open()

    def reopen(self) -> list[Any] | None:
        """Open the session if it is closed and return the fresh listing; ``None`` when it
        was open (another thread may just have opened it)."""
        return self._state.reopen()

    def list_tools(self) -> list[Any]:
        return self._state.list_tools()

    def open_for_request(self) -> None:
        """Open the session if it is closed, for a request that is not a tool's call."""
        self._state.open_for_request()

    def list_resources(self) -> list[Any]:
        """The server's resources (every page); raises as :meth:`call` does."""
        return self._state.ask(lambda session: _pages(session.list_resources, "resources"))

    def list_prompts(self) -> list[Any]:
        """The server's prompts (every page); raises as :meth:`call` does."""
        return self._state.ask(lambda session: _pages(session.list_prompts, "prompts"))

    def read_resource(self, uri: str) -> Any:
        """The server's ``ReadResourceResult`` for ``uri``; raises as :meth:`call` does."""
        return self._state.ask(lambda session: session.read_resource(uri))

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        on_progress: Progress | None = None,
        abandoned: threading.Event | None = None,
        context: ToolContext | None = None,
    ) -> Any:
        """The server's ``CallToolResult``; raises on a timeout or a broken session, and
        :class:`~nrllm_mcp._runner.Abandoned` once ``abandoned`` is set (the request is
        cancelled: the server gets ``notifications/cancelled``). ``on_progress`` hears the
        call's ``notifications/progress``, on the plugin's loop. What the server asks during
        the call (sampling, elicitation), where its settings allow it, is put to the run of
        ``context``."""
        return self._state.call(name, arguments, on_progress, abandoned, context)

    @property
    def revision(self) -> str | None:
        """The protocol revision the open session speaks (``None`` when it is closed)."""
        session = self._state._session
        return None if session is None else str(session.protocol_version)

    def close(self, *, wait: bool = True) -> None:
        """Stop the session; with ``wait``, wait (bounded) for the transport to shut down. A
        hung server's caller does not wait: its session stops in the background."""
        self._state.close(wait=wait)


@final
class _Session:
    """What a :class:`Connection` holds: the session, and the task on the loop holding it."""

    def __init__(self, settings: ServerSettings, environ: Mapping[str, str]) -> None:
        self.settings = settings
        self._environ = environ
        # Tools run on any thread: opening and closing take turns.
        self._lock = threading.RLock()
        self._session: Any = None
        self._stop: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        # Calls in flight and the last use, for the idle close. The loop takes this lock too,
        # so it is never held while waiting for the loop.
        self._uses = threading.Lock()
        self._busy = 0
        self._last_used = time.monotonic()
        # Set when the open session's server said its tools changed
        # (``notifications/tools/list_changed``): the next use lists them again first.
        self._changed = False
        # What the server may ask during a call, and the call it asks for.
        self._asking = Asking(settings)

    # -- synchronous, for the tools and the commands --------------------------------------------

    def open(self) -> list[Any]:
        """Open the session and list the server's tools (every page)."""
        with self._lock:
            self.close()
            try:
                return _runner.run(self._open(), self.settings.start_timeout_seconds)
            except ConnectionFailed:
                self.close(wait=False)
                raise
            except TimeoutError:
                self.close(wait=False)
                raise ConnectionFailed("the server did not start in time") from None
            except Exception as exc:
                self.close(wait=False)
                raise ConnectionFailed(_reason(exc)) from None

    def reopen(self) -> list[Any] | None:
        """Open the session if it is closed, or list its tools again if the server said they
        changed, and return the fresh listing; ``None`` when it was open and unchanged
        (another thread may just have opened it)."""
        with self._lock:
            with self._uses:
                changed, self._changed = self._changed, False
                if self._session is not None:
                    # Used now: the idle close does not take it between this and the call.
                    self._last_used = time.monotonic()
                    if not changed:
                        return None
            if self._session is not None:
                try:
                    return self.list_tools()
                except Exception:
                    # A session that broke since the notification: opened again, once.
                    pass
            return self.open()

    def list_tools(self) -> list[Any]:
        return self.ask(self._list)

    def open_for_request(self) -> None:
        """Open the session if it is closed. The tools it lists were compared with no pin, so
        the next tool's call lists them again, as after the server said they changed."""
        with self._lock:
            with self._uses:
                if self._session is not None:
                    self._last_used = time.monotonic()
                    return
            self.open()
            with self._uses:
                self._changed = True

    def ask(self, request: Callable[[Any], Coroutine[Any, Any, T]]) -> T:
        """Run ``request(session)`` on the open session, bounded by ``timeout_seconds``."""
        session = self._use()
        try:
            return _runner.run(request(session), self.settings.timeout_seconds)
        finally:
            self._done()

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        on_progress: Progress | None,
        abandoned: threading.Event | None,
        context: ToolContext | None,
    ) -> Any:
        timeout = self.settings.timeout_seconds
        progress = None
        if on_progress is not None:
            # The SDK asks the server for progress (a progress token) only when it is heard.
            async def progress(done: float, total: float | None, message: str | None) -> None:
                on_progress(done, total, message)

        with self._asking.turn(context, abandoned):
            session = self._use()
            try:
                # The limit is this wait's alone: an SDK read timeout of the same length would
                # race it and fail the call as something other than a timeout.
                return _runner.run(
                    _call_tool(session, name, arguments, progress), timeout, abandoned
                )
            finally:
                self._done()

    def _use(self) -> Any:
        with self._uses:
            if self._session is None:
                raise ConnectionFailed("the session is closed")
            self._busy += 1
            return self._session

    def _done(self) -> None:
        with self._uses:
            self._busy -= 1
            self._last_used = time.monotonic()

    def close(self, *, wait: bool = True) -> None:
        """Stop the holding task; with ``wait``, wait (bounded) for the transport to shut
        down. A hung server's caller does not wait: its session stops in the background."""
        with self._lock:
            task, stop, started = self._task, self._stop, self._session is not None
            self._session = self._task = self._stop = None
        if task is None or stop is None:
            return
        if not wait:
            stopping = asyncio.run_coroutine_threadsafe(_stop(task, stop, started), _runner.loop())
            with _closing_lock:
                _closing.add(stopping)
            stopping.add_done_callback(_forget)
            return
        with contextlib.suppress(Exception):
            _runner.run(_stop(task, stop, started), _CLOSE_SECONDS)

    # -- on the loop --------------------------------------------------------------------------

    async def _open(self) -> list[Any]:
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._hold(ready, self._stop))
        session = await ready
        with self._uses:
            self._session = session
            self._last_used = time.monotonic()
            # The listing below is the fresh one.
            self._changed = False
        return await self._list(session)

    async def _list(self, session: Any) -> list[Any]:
        return await _pages(session.list_tools, "tools")

    async def _hold(self, ready: asyncio.Future[Any], stop: asyncio.Event) -> None:
        from mcp import ClientSession

        try:
            # Checked before the server starts: it is never offered a folder that is not one.
            roots = _roots_callback(self.settings)
            async with contextlib.AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(stack))
                session = await stack.enter_async_context(
                    ClientSession(
                        read,
                        write,
                        read_timeout_seconds=max(
                            self.settings.timeout_seconds, self.settings.start_timeout_seconds
                        ),
                        message_handler=self._on_message,
                        logging_callback=self._on_log,
                        **self._asking.callbacks(),
                        # None: the SDK declares no roots capability and refuses ``roots/list``.
                        list_roots_callback=roots,
                        # From 2026-07-28 on, a server logs to a request only when asked to.
                        log_level="info",
                    )
                )
                await _negotiate(session)
                await _listen_for_changes(session, stack, self.settings.name)
                ready.set_result(session)
                await self._until_stopped_or_idle(session, stop)
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(ConnectionFailed(_reason(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            if not ready.done():
                ready.set_exception(ConnectionFailed("the connection closed"))

    async def _on_message(self, message: Any) -> None:
        """What the server tells the session unasked. A changed tool list is not trusted
        here: the next use lists the tools again, and a call compares its tool with its pin
        (:func:`nrllm_mcp._client.call`), as at start."""
        from mcp.types import ToolListChangedNotification

        if isinstance(message, ToolListChangedNotification):
            with self._uses:
                self._changed = True
            logger().info("nrllm.mcp.tools_list_changed", server=self.settings.name)

    async def _on_log(self, params: Any) -> None:
        from nrllm_mcp._server_log import log_server_message

        log_server_message(self.settings.name, params)

    async def _until_stopped_or_idle(self, session: Any, stop: asyncio.Event) -> None:
        idle = self.settings.idle_seconds
        while True:
            with self._uses:
                left = self._last_used + idle - time.monotonic()
                if self._busy == 0 and left <= 0 and self._session is session:
                    # Taken from the callers before it closes: the next use opens it again.
                    self._session = None
                    break
            # A call in flight longer than ``idle_seconds`` is looked at again after it.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), left if left > 0 else idle)
            if stop.is_set():
                return
        logger().info("nrllm.mcp.session_idle_closed", server=self.settings.name, seconds=idle)

    def _transport(self, stack: contextlib.AsyncExitStack) -> Any:
        settings = self.settings
        if settings.command is not None:
            from mcp.client.stdio import stdio_client

            errlog = stack.enter_context(open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
            return stdio_client(self._child(settings), errlog=errlog)
        import httpx2

        headers = {}
        for header, variable in settings.headers_env.items():
            value = self._environ.get(variable)
            if value is None:
                raise ConnectionFailed(f"header {header}: ${variable} is not set")
            headers[header] = value
        if settings.auth == "oauth":
            from nrllm_mcp._oauth import authorized_streams

            return authorized_streams(settings, self._environ, headers, settings.timeout_seconds)
        client = httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(settings.timeout_seconds)
        )
        return _with_client(client, settings.url or "")

    def _child(self, settings: ServerSettings) -> Any:
        """The child runs under ``env -i``: only the listed variables and PATH, nothing of the
        host's (the SDK would pass HOME, USER and SHELL along)."""
        from mcp.client.stdio import StdioServerParameters

        env_program = shutil.which("env", path=os.defpath)
        if env_program is None:
            raise ConnectionFailed("no env program to start the server with a clean environment")
        variables = {"PATH": self._environ.get("PATH", os.defpath), **settings.env}
        return StdioServerParameters(
            command=env_program,
            args=[
                "-i",
                "--",
                *(f"{k}={v}" for k, v in variables.items()),
                settings.command or "",
                *settings.args,
            ],
        )


async def _call_tool(session: Any, name: str, arguments: dict[str, Any], progress: Any) -> Any:
    """The call's result. From 2026-07-28 on, a server asks its client (sampling,
    elicitation, roots) by answering "input required": the requests are answered through the
    session's callbacks, as an older server's own requests are, and the call is made again
    with the answers, by the SDK's own driver."""
    from mcp.client._input_required import run_input_required_driver
    from mcp.client.session import ClientRequestContext
    from mcp.types import InputRequiredResult

    async def again(responses: Any, state: str | None) -> Any:
        return await session.call_tool(
            name,
            arguments,
            progress_callback=progress,
            input_responses=responses,
            request_state=state,
            allow_input_required=True,
        )

    async def dispatch(key: str, request: Any) -> Any:
        meta = request.params.meta if request.params else None
        context = ClientRequestContext(session=session, request_id=key, meta=meta)
        return await session.dispatch_input_request(context, request)

    first = await again(None, None)
    if not isinstance(first, InputRequiredResult):
        return first
    return await run_input_required_driver(first, dispatch=dispatch, retry=again)


async def _pages(request: Callable[..., Any], field: str) -> list[Any]:
    """Every page of a listing (``tools``, ``resources``, ``prompts``), up to 100 pages."""
    from mcp.types import PaginatedRequestParams

    items: list[Any] = []
    cursor = None
    for _ in range(100):
        params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
        page = await request(params=params)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None:
            return items
    raise ConnectionFailed(f"the server's {field} list did not end")


def _roots_callback(settings: ServerSettings) -> Any:
    """What answers the server's ``roots/list``: the configured folders as ``file://`` URIs,
    each resolved now (a symbolic link to the folder it names); ``None`` when none is set.
    A root that is not an existing folder stops the server from starting, naming the key."""
    if not settings.roots:
        return None
    from pathlib import Path

    from mcp.types import ListRootsResult, Root
    from pydantic import FileUrl

    offered = []
    for index, root in enumerate(settings.roots):
        folder = Path(root).resolve()
        if not folder.is_dir():
            raise ConnectionFailed(
                f"mcp.servers.{settings.name}.roots[{index}] is not an existing folder"
            )
        offered.append(Root(uri=FileUrl(folder.as_uri())))
    answer = ListRootsResult(roots=offered)

    async def list_roots(context: Any) -> Any:
        logger().info("nrllm.mcp.roots_listed", server=settings.name, roots=len(offered))
        return answer

    return list_roots


async def _negotiate(session: Any) -> None:
    """Speak the newest revision both ends know: ``server/discover`` (2026-07-28 on), else
    the ``initialize`` handshake (2024-11-05 to 2025-11-25) for a server that does not know
    it. The SDK's own ``auto`` policy, through the session's public methods."""
    from mcp import MCPError

    try:
        await session.discover()
    except MCPError:
        await session.initialize()


async def _listen_for_changes(session: Any, stack: contextlib.AsyncExitStack, server: str) -> None:
    """From 2026-07-28 on, a server's change notifications come only on a
    ``subscriptions/listen`` stream the client opened: open one for the tool list. The SDK
    hands its events to the session's ``message_handler`` as before that revision, when the
    server sends them unasked. A server that serves no such stream is only not heard."""
    from mcp import MCPError
    from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost, listen

    try:
        await stack.enter_async_context(listen(session, tools_list_changed=True))
    except ListenNotSupportedError:
        return
    except (MCPError, SubscriptionLost, TimeoutError):
        logger().info("nrllm.mcp.no_change_stream", server=server)


@contextlib.asynccontextmanager
async def _with_client(client: Any, url: str) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client

    async with client, streamable_http_client(url, http_client=client) as streams:
        yield streams


async def _stop(task: asyncio.Task[None], stop: asyncio.Event, started: bool) -> None:
    """Let the holding task leave its session; one still starting (past its start timeout)
    is cancelled at once, since it would not look at ``stop`` before its handshake ends."""
    stop.set()
    if not started:
        task.cancel()
    await asyncio.wait({task}, timeout=_CLOSE_SECONDS)
    if not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=_CLOSE_SECONDS)


def _forget(stopping: concurrent.futures.Future[None]) -> None:
    with _closing_lock:
        _closing.discard(stopping)


def wait_closed() -> None:
    """Wait (bounded) for the sessions being stopped in the background."""
    with _closing_lock:
        pending = list(_closing)
    concurrent.futures.wait(pending, timeout=2 * _CLOSE_SECONDS)


def _reason(exc: BaseException) -> str:
    """What a failure is, without its text (which can quote a URL's token or a header)."""
    if isinstance(exc, ConnectionFailed | NotLoggedIn):
        return str(exc)
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _reason(exc.exceptions[0])
    if isinstance(exc, TimeoutError):
        return "the server did not answer in time"
    if isinstance(exc, OSError):
        return f"the server could not be started or reached ({type(exc).__name__})"
    return f"the connection failed ({type(exc).__name__})"

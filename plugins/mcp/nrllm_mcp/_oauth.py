"""OAuth for remote MCP servers: ``nrllm mcp login`` and the token a run's requests carry.

``login`` runs the authorization-code flow with PKCE through the SDK's
``OAuthClientProvider`` (the server's protected-resource and authorization-server metadata,
dynamic client registration unless a ``client_id`` is configured) and receives the redirect
on an ephemeral loopback port. What it obtains (the tokens, the client, the metadata a refresh
needs after a restart) is sealed with the state key, bound to the server's name and URL, in a
0600 file of the data folder. A run reads that file and never waits for a person: with no
file, or a refresh the authorization server refuses, the server fails with a fixed reason.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final, final
from urllib.parse import parse_qs, urlsplit

from nrllm_core.log import logger
from nrllm_mcp._settings import ServerSettings

__all__ = ["LoginFailed", "NotLoggedIn", "authorized_streams", "login", "logout", "token_file"]

# How long ``login`` waits for the redirect unless told otherwise.
LOGIN_SECONDS: Final = 300.0
_CALLBACK_PATH: Final = "/callback"
# An OAuth error code (RFC 6749 §4.1.2.1) is shown only when it has this shape: it is text the
# authorization server chose.
_ERROR_CODE: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# The largest redirect request the loopback listener reads.
_REQUEST_BYTES: Final = 16_384


class NotLoggedIn(Exception):
    """No usable token for the server: a person has to log in. The text is fixed and safe."""

    def __init__(self, server: str) -> None:
        super().__init__(f"not logged in: run nrllm mcp login {server}")


class LoginFailed(Exception):
    """``login`` did not obtain a token; the text is fixed or checked, safe to show."""


def token_file(settings: ServerSettings, data_dir: Path) -> Path:
    return data_dir / "mcp-oauth" / f"{settings.name}.sealed"


def _bound_to(settings: ServerSettings) -> str:
    # The file opens only for this server at this URL: one copied to another server's name,
    # or kept after the URL changed, does not hand that server these tokens.
    return f"nrllm-mcp-oauth\x00{settings.name}\x00{settings.url}"


@final
class _Storage:
    """The SDK's ``TokenStorage``, over the sealed file. At login it starts empty (or with the
    configured client), so the flow runs whole; a run's starts with what login stored."""

    def __init__(
        self,
        settings: ServerSettings,
        data_dir: Path,
        environ: Mapping[str, str],
        record: dict[str, Any],
    ) -> None:
        self._settings = settings
        self._data_dir = data_dir
        self._environ = environ
        self.record = record

    async def get_tokens(self) -> Any:
        from mcp.shared.auth import OAuthToken

        tokens = self.record.get("tokens")
        return None if tokens is None else OAuthToken.model_validate(tokens)

    async def set_tokens(self, tokens: Any) -> None:
        expires_in = tokens.expires_in
        self.record["tokens"] = tokens.model_dump(mode="json", exclude_none=True)
        # Kept as a time: a run started later knows whether the access token has expired and
        # refreshes it first (the SDK counts expiry from when it received the token).
        self.record["expires_at"] = None if expires_in is None else time.time() + expires_in
        self.save()

    async def get_client_info(self) -> Any:
        from mcp.shared.auth import OAuthClientInformationFull

        client = self.record.get("client")
        return None if client is None else OAuthClientInformationFull.model_validate(client)

    async def set_client_info(self, client_info: Any) -> None:
        # Written with the tokens: a registration whose login did not finish is not kept.
        self.record["client"] = client_info.model_dump(mode="json", exclude_none=True)

    def save(self) -> None:
        from nrllm_core.sealing import write_sealed

        write_sealed(
            token_file(self._settings, self._data_dir),
            _bound_to(self._settings),
            json.dumps(self.record).encode(),
            data_dir=self._data_dir,
            environ=self._environ,
        )


def _client_metadata(settings: ServerSettings, redirect_uri: str) -> Any:
    from mcp.shared.auth import OAuthClientMetadata

    return OAuthClientMetadata(
        client_name="nrllm",
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=" ".join(settings.scopes) or None,
    )


def _configured_client(settings: ServerSettings, redirect_uri: str) -> dict[str, Any] | None:
    if settings.client_id is None:
        return None
    # A client registered beforehand for a public (PKCE) client on a loopback redirect; the
    # authorization server accepts any port of it (RFC 8252 §7.3).
    return {
        "client_id": settings.client_id,
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


# -- a run ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def authorized_streams(
    settings: ServerSettings,
    environ: Mapping[str, str],
    headers: Mapping[str, str],
    timeout: float,
) -> AsyncIterator[Any]:
    """The streamable HTTP transport whose requests carry the stored token, refreshed when it
    expired; :class:`NotLoggedIn` when there is none or the refresh was refused."""
    import httpx2
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import OAuthMetadata, ProtectedResourceMetadata

    from nrllm_core.sealing import SealError, read_sealed
    from nrllm_core.store import default_data_dir

    data_dir = default_data_dir()
    try:
        sealed = read_sealed(
            token_file(settings, data_dir), _bound_to(settings), data_dir=data_dir, environ=environ
        )
    except SealError:
        logger().warning("nrllm.mcp.oauth_token_unreadable", server=settings.name)
        raise NotLoggedIn(settings.name) from None
    record: dict[str, Any] = {} if sealed is None else json.loads(sealed)
    client = record.get("client") or {}
    if record.get("tokens") is None or (
        settings.client_id is not None and client.get("client_id") != settings.client_id
    ):
        raise NotLoggedIn(settings.name)
    asked = {"login": False}

    async def no_person(url: str) -> None:
        # A run never opens a browser nor waits for a redirect: the flow stops here.
        asked["login"] = True
        raise NotLoggedIn(settings.name)

    async def no_redirect() -> Any:
        raise NotLoggedIn(settings.name)

    redirect_uris = client.get("redirect_uris") or ["http://127.0.0.1/callback"]
    provider = OAuthClientProvider(
        server_url=settings.url or "",
        client_metadata=_client_metadata(settings, redirect_uris[0]),
        storage=_Storage(settings, data_dir, environ, record),
        redirect_handler=no_person,
        callback_handler=no_redirect,
    )
    # What login discovered, so that a refresh goes to the authorization server's token
    # endpoint with the resource, and an expired token is refreshed before it is sent.
    context = provider.context
    if record.get("metadata") is not None:
        context.oauth_metadata = OAuthMetadata.model_validate(record["metadata"])
    if record.get("resource") is not None:
        context.protected_resource_metadata = ProtectedResourceMetadata.model_validate(
            record["resource"]
        )
    context.auth_server_url = record.get("auth_server")
    context.token_expiry_time = record.get("expires_at")
    http = httpx2.AsyncClient(headers=dict(headers), timeout=httpx2.Timeout(timeout), auth=provider)
    try:
        async with http, streamable_http_client(settings.url or "", http_client=http) as streams:
            yield streams
    except Exception:
        # The SDK's transport reports a failed request as a closed stream: say why it failed.
        if asked["login"]:
            logger().warning("nrllm.mcp.oauth_login_needed", server=settings.name)
            raise NotLoggedIn(settings.name) from None
        raise


# -- login and logout -----------------------------------------------------------------------


def login(
    settings: ServerSettings,
    environ: Mapping[str, str],
    show: Callable[[str], None],
    *,
    timeout: float = LOGIN_SECONDS,
) -> None:
    """Log in to ``settings``' server: ``show`` the authorization URL, wait (at most
    ``timeout`` seconds) for the redirect on a loopback port, and store the tokens."""
    from nrllm_core.store import default_data_dir
    from nrllm_mcp import _runner

    data_dir = default_data_dir()
    try:
        # The login's own bound is the redirect's; the requests around it have the server's.
        _runner.run(
            _login(settings, environ, show, timeout, data_dir),
            timeout + 4 * settings.timeout_seconds,
        )
    except TimeoutError:
        raise LoginFailed("the server did not answer in time") from None
    logger().info("nrllm.mcp.oauth_logged_in", server=settings.name)


def logout(settings: ServerSettings) -> bool:
    """Delete the server's stored tokens; whether there were any."""
    from nrllm_core.store import default_data_dir

    try:
        token_file(settings, default_data_dir()).unlink()
    except FileNotFoundError:
        return False
    logger().info("nrllm.mcp.oauth_logged_out", server=settings.name)
    return True


async def _login(
    settings: ServerSettings,
    environ: Mapping[str, str],
    show: Callable[[str], None],
    timeout: float,
    data_dir: Path,
) -> None:
    import httpx2
    from mcp.client.auth import OAuthClientProvider, OAuthFlowError, OAuthTokenError

    redirect = _Redirect()
    # Loopback only, on a port the system picks: nothing off this machine can send the
    # redirect, and no fixed port can be taken first by another program.
    server = await asyncio.start_server(redirect.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    redirect_uri = f"http://127.0.0.1:{port}{_CALLBACK_PATH}"
    record: dict[str, Any] = {"client": _configured_client(settings, redirect_uri)}
    storage = _Storage(settings, data_dir, environ, record)

    async def on_url(url: str) -> None:
        redirect.expect(url)
        show(url)

    async def on_redirect() -> Any:
        try:
            return await asyncio.wait_for(redirect.received, timeout)
        except TimeoutError:
            raise LoginFailed(f"no redirect came within {timeout:g} seconds") from None

    provider = OAuthClientProvider(
        server_url=settings.url or "",
        client_metadata=_client_metadata(settings, redirect_uri),
        storage=storage,
        redirect_handler=on_url,
        callback_handler=on_redirect,
    )
    headers = {"Accept": "application/json, text/event-stream"}
    for header, variable in settings.headers_env.items():
        value = environ.get(variable)
        if value is None:
            raise LoginFailed(f"header {header}: ${variable} is not set")
        headers[header] = value
    try:
        async with (
            server,
            httpx2.AsyncClient(
                headers=headers, timeout=httpx2.Timeout(settings.timeout_seconds), auth=provider
            ) as http,
        ):
            # Any request the server guards starts the flow: the handshake's first one.
            response = await http.post(settings.url or "", json=_INITIALIZE)
    except LoginFailed:
        raise
    except (OAuthFlowError, OAuthTokenError) as exc:
        # Their text can quote the authorization server's answer; only the kind is shown.
        raise LoginFailed(f"the authorization failed ({type(exc).__name__})") from None
    except Exception as exc:
        raise LoginFailed(f"the server could not be reached ({type(exc).__name__})") from None
    if response.status_code in (401, 403) or storage.record.get("tokens") is None:
        raise LoginFailed(f"the server refused the new token (HTTP {response.status_code})")
    # What a later run needs to refresh the token without discovering again.
    context = provider.context
    found: dict[str, Any] = {
        "metadata": context.oauth_metadata,
        "resource": context.protected_resource_metadata,
    }
    for key, value in found.items():
        if value is not None:
            storage.record[key] = value.model_dump(mode="json", exclude_none=True)
    storage.record["auth_server"] = context.auth_server_url
    storage.save()


_INITIALIZE: Final = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "nrllm", "version": "login"},
    },
}


@final
class _Redirect:
    """The loopback listener's one job: the redirect carrying this login's ``state``. Any
    other request (another path, a missing or wrong ``state``) is answered 400 and ignored,
    so a local program cannot end the login with a code of its own."""

    def __init__(self) -> None:
        self.received: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._state: str | None = None

    def expect(self, authorization_url: str) -> None:
        states = parse_qs(urlsplit(authorization_url).query).get("state", [])
        self._state = states[0] if states else None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
            writer.close()
            return
        status, page = self._take(head[:_REQUEST_BYTES])
        body = f"<!doctype html><title>nrllm</title><p>{page}</p>".encode()
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: text/html; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    def _take(self, head: bytes) -> tuple[str, str]:
        from mcp.shared.auth import AuthorizationCodeResult

        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
        target = urlsplit(parts[1]) if len(parts) == 3 and parts[0] == "GET" else None
        if target is None or target.path != _CALLBACK_PATH or self.received.done():
            return "404 Not Found", "Not found."
        query = {k: v[0] for k, v in parse_qs(target.query).items()}
        if self._state is None or query.get("state") != self._state:
            logger().warning("nrllm.mcp.oauth_redirect_refused", reason="state")
            return "400 Bad Request", "This redirect is not for the login under way."
        error = query.get("error")
        if error is not None:
            shown = error if _ERROR_CODE.fullmatch(error) else "an error"
            self.received.set_exception(LoginFailed(f"the authorization server answered {shown}"))
            return "200 OK", "The login failed. You can close this window."
        if not query.get("code"):
            self.received.set_exception(LoginFailed("the redirect carried no code"))
            return "400 Bad Request", "The login failed. You can close this window."
        self.received.set_result(
            AuthorizationCodeResult(code=query["code"], state=query["state"], iss=query.get("iss"))
        )
        return "200 OK", "Logged in. You can close this window."

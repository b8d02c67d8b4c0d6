"""An MCP server guarded by OAuth, with its own authorization server, written with the SDK's
server-side auth pieces: ``python oauth_server.py STATE_DIR PORT``.

The authorization server approves every request at once (no person to ask), registers
clients dynamically and knows one client registered beforehand, ``preregistered``. What it
does is steered by files in STATE_DIR, read on each request: ``access_seconds`` (the
lifetime of an access token a login's code buys, else an hour; a refreshed one lasts an
hour, so a loaded machine cannot let it expire before its first use), ``reject_refresh``
(every refresh token is refused), ``deny`` (authorization answers ``error=access_denied``).
It appends each grant it serves to STATE_DIR/grants (``authorization_code`` or
``refresh_token``).
"""

from __future__ import annotations

import math
import secrets
import sys
import time
from pathlib import Path
from typing import Any

from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken


class LoopbackClient(OAuthClientInformationFull):
    """A client registered beforehand for a loopback redirect on any port (RFC 8252 §7.3)."""

    def validate_redirect_uri(self, redirect_uri: Any) -> Any:
        if redirect_uri is None or not str(redirect_uri).startswith("http://127.0.0.1:"):
            return super().validate_redirect_uri(redirect_uri)
        return redirect_uri


class Provider:
    def __init__(self, state: Path) -> None:
        self.state = state
        self.clients: dict[str, OAuthClientInformationFull] = {
            "preregistered": LoopbackClient(
                client_id="preregistered",
                redirect_uris=["http://127.0.0.1/callback"],  # type: ignore[list-item]
                token_endpoint_auth_method="none",
                grant_types=["authorization_code", "refresh_token"],
            )
        }
        self.codes: dict[str, AuthorizationCode] = {}
        self.access: dict[str, AccessToken] = {}
        self.refresh: dict[str, RefreshToken] = {}

    def _grant(self, kind: str) -> None:
        with (self.state / "grants").open("a", encoding="utf-8") as log:
            log.write(kind + "\n")

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(
        self, client: OAuthClientInformationFull, params: AuthorizationParams
    ) -> str:
        if (self.state / "deny").exists():
            return construct_redirect_uri(
                str(params.redirect_uri), error="access_denied", state=params.state
            )
        code = secrets.token_urlsafe(16)
        assert client.client_id is not None
        self.codes[code] = AuthorizationCode(
            code=code,
            scopes=params.scopes or [],
            expires_at=time.time() + 300,
            client_id=client.client_id,
            code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource,
        )
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: str
    ) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        del self.codes[authorization_code.code]
        self._grant("authorization_code")
        path = self.state / "access_seconds"
        lifetime = int(path.read_text()) if path.exists() else 3600
        return self._issue(authorization_code.client_id, authorization_code.scopes, lifetime)

    async def load_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: str
    ) -> RefreshToken | None:
        if (self.state / "reject_refresh").exists():
            return None
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        del self.refresh[refresh_token.token]
        self._grant("refresh_token")
        return self._issue(refresh_token.client_id, scopes or refresh_token.scopes, 3600)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: Any) -> None:
        self.access.pop(token.token, None)

    def _issue(self, client_id: str, scopes: list[str], lifetime: int) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.access[access] = AccessToken(
            token=access,
            client_id=client_id,
            scopes=scopes,
            expires_at=math.ceil(time.time()) + lifetime,
        )
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id, scopes=scopes)
        return OAuthToken(
            access_token=access,
            token_type="Bearer",
            expires_in=lifetime,
            refresh_token=refresh,
            scope=" ".join(scopes) or None,
        )


def main() -> None:
    import uvicorn

    state, port = Path(sys.argv[1]), int(sys.argv[2])
    base = f"http://127.0.0.1:{port}"
    server = MCPServer(
        "guarded",
        auth_server_provider=Provider(state),
        auth=AuthSettings(
            issuer_url=base,  # type: ignore[arg-type]
            resource_server_url=f"{base}/mcp",  # type: ignore[arg-type]
            validate_token_resource=False,
            client_registration_options=ClientRegistrationOptions(
                enabled=True, valid_scopes=["tools"], default_scopes=["tools"]
            ),
            required_scopes=[],
        ),
    )

    @server.tool()
    def echo(text: str) -> str:
        """Echo the text back."""
        return text

    uvicorn.run(server.streamable_http_app(), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main()

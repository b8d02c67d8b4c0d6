"""``nrllm mcp serve`` over HTTP for many people: an OAuth 2.1 resource server.

The MCP authorization spec's part for a server that only accepts tokens: its Protected
Resource Metadata (RFC 9728) names the authorization server, every 401 points at it in
``WWW-Authenticate``, and each access token is either a JWT checked against the authorization
server's JWKS (signature, issuer, audience: this server's resource URL, expiry, scopes) or a
token the authorization server's introspection endpoint (RFC 7662) vouches for, its answer
checked for the same claims. Either way the token's subject is mapped to an nrllm actor
(``[mcp.serve.actors]``), put in the request's ASGI scope, where the call handler reads it:
each call is a run as that person, with that person's rights. A subject that is not mapped
is refused, never given a default actor.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, final
from urllib.parse import quote_plus, urlsplit

import attrs

from nrllm_core import Actor

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from nrllm_mcp._settings import ServeSettings

__all__ = [
    "ACTOR_KEY",
    "CLIENT_ID_ENV",
    "CLIENT_SECRET_ENV",
    "IntrospectionVerifier",
    "JwtVerifier",
    "Refusal",
    "TokenCheck",
    "Verified",
    "metadata_document",
    "metadata_url",
    "oauth_guard",
    "request_actor",
    "verifier",
]

# Where the guard puts the caller's actor in the ASGI scope (the SDK hands the handler the
# Starlette request of the message, whose ``scope`` is this one).
ACTOR_KEY: Final = "nrllm.actor"
WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"
# Asymmetric algorithms only: no ``none``, and no HMAC, whose key a JWKS would have to publish.
ALGORITHMS: Final = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
)
# A token is hostile input: one larger than any real access token is not parsed.
MAX_TOKEN_CHARS: Final = 8_192
# Clock skew between the authorization server and this host.
LEEWAY_SECONDS: Final = 30
# The introspection client's credentials: secrets, so never in nrllm.toml.
CLIENT_ID_ENV: Final = "NRLLM_MCP_INTROSPECTION_CLIENT_ID"
CLIENT_SECRET_ENV: Final = "NRLLM_MCP_INTROSPECTION_CLIENT_SECRET"
# An introspection answer is a few hundred bytes; a larger one is not read on.
MAX_ANSWER_BYTES: Final = 65_536
# The whole exchange, a slow trickle of bytes included: a request waits no longer.
INTROSPECTION_SECONDS: Final = 10.0
# A positive answer is reused this long (never past the token's expiry), so a person's
# burst of requests costs one introspection; a revoked token stops working within it.
CACHE_SECONDS: Final = 60.0
CACHE_ENTRIES: Final = 4_096
# Token checks that may wait at once (on the authorization server): their own threads, so a
# flood of unknown tokens never takes the threads the calls need.
CHECKS_AT_ONCE: Final = 8


class TokenCheck(Protocol):
    """How the guard checks a token: ``known`` answers at once from what was checked
    before (``None``: not known), ``verify`` checks it and may block."""

    def known(self, token: str) -> Verified | None: ...

    def verify(self, token: str) -> Verified: ...


class Refusal(Exception):
    """Why a request is refused: an HTTP status and an RFC 6750 error, with a fixed
    description (never a library's text, which may quote the token)."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description


@final
@attrs.frozen(kw_only=True)
class Verified:
    """What a valid access token says: whose it is, for which client, with which scopes."""

    subject: str
    issuer: str
    client_id: str
    scopes: tuple[str, ...]
    expires_at: int | None


def metadata_url(resource: str) -> str:
    """RFC 9728 §3.1: the well-known path inserted between the host and the resource's path."""
    parts = urlsplit(resource)
    path = "" if parts.path in ("", "/") else parts.path
    return f"{parts.scheme}://{parts.netloc}{WELL_KNOWN}{path}"


def metadata_document(settings: ServeSettings) -> dict[str, Any]:
    """The Protected Resource Metadata, checked by the SDK's model of it."""
    from mcp.shared.auth import ProtectedResourceMetadata

    document = ProtectedResourceMetadata.model_validate(
        {
            "resource": settings.resource,
            "authorization_servers": [settings.issuer],
            "scopes_supported": list(settings.required_scopes),
            "bearer_methods_supported": ["header"],
            "resource_name": "nrllm",
        }
    )
    shown: dict[str, Any] = document.model_dump(mode="json", exclude_none=True)
    # The configured spelling, not pydantic's: a client compares it with the URL it called.
    shown["resource"] = settings.resource
    shown["authorization_servers"] = [settings.issuer]
    return shown


@final
class JwtVerifier:
    """Checks an access token as a JWT against the issuer's JWKS (fetched, cached for five
    minutes, fetched again for an unknown key id at most every 30 seconds)."""

    __slots__ = ("_audience", "_issuer", "_jwks", "_required")

    def __init__(self, settings: ServeSettings) -> None:
        import jwt

        if settings.jwks_url is None or settings.issuer is None or settings.resource is None:
            raise ValueError('the verifier needs [mcp.serve] auth = "oauth" settings')
        self._jwks = jwt.PyJWKClient(
            settings.jwks_url, cache_jwk_set=True, lifespan=300, timeout=10
        )
        self._issuer = settings.issuer
        self._audience = settings.resource
        self._required = settings.required_scopes

    def known(self, token: str) -> Verified | None:
        """Nothing: a JWT is checked whole each time (its signature, against a cached key)."""
        return None

    def verify(self, token: str) -> Verified:
        """The token's claims, or :class:`Refusal`. Blocking: it may fetch the JWKS."""
        import jwt

        if len(token) > MAX_TOKEN_CHARS:
            raise Refusal(401, "invalid_token", "The access token is not valid.")
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
        except jwt.PyJWKClientConnectionError:
            _log().warning("nrllm.mcp.serve_jwks_unavailable")
            raise Refusal(
                503, "temporarily_unavailable", "The token cannot be checked now."
            ) from None
        except jwt.PyJWTError:
            raise Refusal(401, "invalid_token", "The access token is not valid.") from None
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(ALGORITHMS),
                audience=self._audience,
                issuer=self._issuer,
                leeway=LEEWAY_SECONDS,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.ExpiredSignatureError:
            raise Refusal(401, "invalid_token", "The access token has expired.") from None
        except jwt.PyJWTError:
            raise Refusal(401, "invalid_token", "The access token is not valid.") from None
        client = claims.get("client_id", claims.get("azp"))
        return _verified(claims, issuer=self._issuer, required=self._required, client=client)


@final
class IntrospectionVerifier:
    """Asks the authorization server about each token (RFC 7662), as a confidential client
    with HTTP Basic credentials from the environment, and checks its answer as a JWT's claims
    are checked: the endpoint's answer is hostile input too."""

    __slots__ = ("_audience", "_cache", "_client", "_issuer", "_lock", "_required", "_url")

    def __init__(self, settings: ServeSettings, environ: Mapping[str, str]) -> None:
        import httpx2

        from nrllm_mcp._settings import SettingsError

        if (
            settings.introspection_url is None
            or settings.issuer is None
            or settings.resource is None
        ):
            raise ValueError('the verifier needs [mcp.serve] auth = "oauth" settings')
        client_id, secret = environ.get(CLIENT_ID_ENV, ""), environ.get(CLIENT_SECRET_ENV, "")
        for name, value in ((CLIENT_ID_ENV, client_id), (CLIENT_SECRET_ENV, secret)):
            if not value:
                # Said at start: without it every request would be refused.
                raise SettingsError(
                    f"{name}: the environment variable must hold the introspection client's"
                    " credentials with mcp.serve.introspection_url"
                )
        self._url = settings.introspection_url
        self._issuer = settings.issuer
        self._audience = settings.resource
        self._required = settings.required_scopes
        # RFC 6749 §2.3.1: both are form-encoded before they are joined for Basic.
        self._client = httpx2.Client(
            auth=httpx2.BasicAuth(quote_plus(client_id), quote_plus(secret)),
            timeout=httpx2.Timeout(INTROSPECTION_SECONDS),
            follow_redirects=False,
        )
        # SHA-256 of a token to when its answer goes stale (monotonic) and what it said.
        self._cache: dict[bytes, tuple[float, Verified]] = {}
        self._lock = threading.Lock()

    def known(self, token: str) -> Verified | None:
        """The endpoint's answer for ``token`` while it is reused (see ``CACHE_SECONDS``);
        never blocks."""
        if len(token) > MAX_TOKEN_CHARS:
            return None
        with self._lock:
            cached = self._cache.get(hashlib.sha256(token.encode()).digest())
        return cached[1] if cached is not None and cached[0] > time.monotonic() else None

    def verify(self, token: str) -> Verified:
        """The token's claims as the endpoint vouches for them, or :class:`Refusal`.
        Blocking: it may ask the endpoint."""
        if len(token) > MAX_TOKEN_CHARS:
            raise Refusal(401, "invalid_token", "The access token is not valid.")
        known = self.known(token)
        if known is not None:
            return known
        key = hashlib.sha256(token.encode()).digest()
        claims = self._introspect(token)
        # RFC 7662 §2.2: only a JSON true means active, not "true" or 1.
        if claims.get("active") is not True:
            raise Refusal(401, "invalid_token", "The access token is not valid.")
        # ``iss`` is optional in an answer; one that names another issuer is not this one's.
        if "iss" in claims and claims["iss"] != self._issuer:
            raise Refusal(401, "invalid_token", "The access token is not valid.")
        # Required, unlike RFC 7662: without it a token for any resource would pass.
        audience = claims.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if self._audience not in audiences:
            raise Refusal(401, "invalid_token", "The access token is not valid.")
        expires = claims.get("exp")
        now = time.time()
        if type(expires) is not int:
            raise Refusal(401, "invalid_token", "The access token is not valid.")
        if expires + LEEWAY_SECONDS < now:
            raise Refusal(401, "invalid_token", "The access token has expired.")
        verified = _verified(
            claims, issuer=self._issuer, required=self._required, client=claims.get("client_id")
        )
        fresh = min(CACHE_SECONDS, expires - now)
        if fresh > 0:
            self._remember(key, time.monotonic() + fresh, verified)
        return verified

    def _introspect(self, token: str) -> Mapping[str, Any]:
        """The endpoint's answer as a JSON object; any other outcome refuses the request
        (fail closed) as one the token cannot be checked for now."""
        import httpx2

        unavailable = Refusal(503, "temporarily_unavailable", "The token cannot be checked now.")
        deadline = time.monotonic() + INTROSPECTION_SECONDS
        body = bytearray()
        try:
            with self._client.stream(
                "POST",
                self._url,
                data={"token": token, "token_type_hint": "access_token"},
                headers={"accept": "application/json"},
            ) as answer:
                if answer.status_code != 200:
                    # A 401 here is this server's credentials refused, not the person's token.
                    _log().warning(
                        "nrllm.mcp.serve_introspection_failed",
                        reason="status",
                        status=answer.status_code,
                    )
                    raise unavailable
                for chunk in answer.iter_bytes():
                    body += chunk
                    if len(body) > MAX_ANSWER_BYTES:
                        _log().warning("nrllm.mcp.serve_introspection_failed", reason="oversize")
                        raise unavailable
                    if time.monotonic() > deadline:
                        _log().warning("nrllm.mcp.serve_introspection_failed", reason="slow")
                        raise unavailable
        except httpx2.HTTPError as exc:
            # The class only: an exception's text may quote the request, and so the token.
            _log().warning(
                "nrllm.mcp.serve_introspection_failed",
                reason="unreachable",
                error=type(exc).__name__,
            )
            raise unavailable from None
        try:
            claims = json.loads(body)
        except (ValueError, RecursionError):
            claims = None
        if not isinstance(claims, dict):
            _log().warning("nrllm.mcp.serve_introspection_failed", reason="malformed")
            raise unavailable
        return claims

    def _remember(self, key: bytes, until: float, verified: Verified) -> None:
        with self._lock:
            if len(self._cache) >= CACHE_ENTRIES:
                now = time.monotonic()
                for stale in [k for k, (t, _) in self._cache.items() if t <= now]:
                    del self._cache[stale]
            if len(self._cache) >= CACHE_ENTRIES:
                # Still full of live answers: the oldest goes (dicts keep insertion order).
                del self._cache[next(iter(self._cache))]
            self._cache[key] = (until, verified)


def verifier(settings: ServeSettings, environ: Mapping[str, str]) -> TokenCheck:
    """The token check ``settings`` configure; raises :class:`SettingsError` now for what
    would otherwise refuse every request later."""
    if settings.introspection_url is not None:
        return IntrospectionVerifier(settings, environ)
    return JwtVerifier(settings)


def _verified(
    claims: Mapping[str, Any], *, issuer: str, required: Sequence[str], client: object
) -> Verified:
    """What checked claims say, the same for a JWT and an introspection answer: refused
    without a subject, or without every ``required`` scope; the client is the subject's
    own when the claims name none."""
    subject = claims.get("sub")
    if not isinstance(subject, str) or not subject:
        raise Refusal(401, "invalid_token", "The access token is not valid.")
    scopes = _scopes(claims)
    if not set(required) <= set(scopes):
        raise Refusal(403, "insufficient_scope", "The access token lacks a required scope.")
    expires = claims.get("exp")
    return Verified(
        subject=subject,
        issuer=issuer,
        client_id=client if isinstance(client, str) and client else subject,
        scopes=scopes,
        expires_at=expires if type(expires) is int else None,
    )


def _scopes(claims: Mapping[str, Any]) -> tuple[str, ...]:
    """RFC 9068's ``scope`` (space-separated), or the ``scp`` array some issuers send."""
    scope = claims.get("scope")
    if isinstance(scope, str):
        return tuple(scope.split())
    scp = claims.get("scp")
    if isinstance(scp, str):
        return tuple(scp.split())
    if isinstance(scp, list):
        return tuple(s for s in scp if isinstance(s, str))
    return ()


@final
class oauth_guard:
    """Serves the metadata to anyone; every other HTTP request needs a valid access token of
    a mapped subject, whose actor it carries on in the scope."""

    __slots__ = (
        "_actors",
        "_app",
        "_challenge",
        "_check",
        "_checks",
        "_metadata",
        "_paths",
        "_scopes",
    )

    def __init__(self, app: ASGIApp, *, settings: ServeSettings, check: TokenCheck) -> None:
        import anyio

        if settings.resource is None:
            raise ValueError('the guard needs [mcp.serve] auth = "oauth" settings')
        self._app = app
        self._check = check
        self._checks = anyio.CapacityLimiter(CHECKS_AT_ONCE)
        self._actors = {
            subject: Actor(id=a.name, admin=a.admin, permissions=frozenset(a.permissions))
            for subject, a in settings.actors.items()
        }
        self._scopes = " ".join(settings.required_scopes)
        self._metadata = json.dumps(metadata_document(settings)).encode()
        url = metadata_url(settings.resource)
        # The configured resource's metadata URL, never one built from the request's Host.
        self._challenge = f'resource_metadata="{url}"'
        self._paths = frozenset({WELL_KNOWN, urlsplit(url).path})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        if scope["path"] in self._paths and scope["method"] in ("GET", "HEAD"):
            await _respond(send, 200, self._metadata, [(b"access-control-allow-origin", b"*")])
            return
        token = _bearer(scope)
        if token is None:
            await self._refuse(send, None)
            return
        import anyio.to_thread

        try:
            # A token checked a moment ago is served at once, whatever waits on the endpoint.
            verified = self._check.known(token)
            if verified is None:
                verified = await anyio.to_thread.run_sync(
                    self._check.verify, token, limiter=self._checks
                )
        except Refusal as refusal:
            _log().info("nrllm.mcp.serve_token_refused", reason=refusal.error)
            await self._refuse(send, refusal)
            return
        except Exception as exc:
            # Fail closed; only the kind of failure is logged, never its text or the token.
            _log().warning("nrllm.mcp.serve_token_unchecked", error=type(exc).__name__)
            await self._refuse(
                send, Refusal(401, "invalid_token", "The access token is not valid.")
            )
            return
        actor = self._actors.get(verified.subject)
        if actor is None:
            _log().warning("nrllm.mcp.serve_subject_unmapped")
            await _respond(
                send,
                403,
                _error_body("access_denied", "This person has no nrllm actor on this server."),
            )
            return
        from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
        from mcp.server.auth.provider import AccessToken
        from starlette.authentication import AuthCredentials

        # The SDK binds a session to the (client, issuer, subject) that opened it: another
        # person's token cannot use it. The token itself is not kept.
        scope["user"] = AuthenticatedUser(
            AccessToken(
                token="",
                client_id=verified.client_id,
                scopes=list(verified.scopes),
                expires_at=verified.expires_at,
                resource=None,
                subject=verified.subject,
                claims={"iss": verified.issuer},
            )
        )
        scope["auth"] = AuthCredentials(list(verified.scopes))
        scope[ACTOR_KEY] = actor
        await self._app(scope, receive, send)

    async def _refuse(self, send: Send, refusal: Refusal | None) -> None:
        if refusal is None:
            # No credentials: RFC 6750 §3.1 says no error code, only where to get a token.
            challenge, status = f"Bearer {self._challenge}", 401
            body = _error_body("invalid_token", "An access token is required.")
        else:
            parts = [f'error="{refusal.error}"', f'error_description="{refusal.description}"']
            if refusal.error == "insufficient_scope":
                parts.append(f'scope="{self._scopes}"')
            challenge = f"Bearer {', '.join([*parts, self._challenge])}"
            status = refusal.status
            body = _error_body(refusal.error, refusal.description)
        await _respond(send, status, body, [(b"www-authenticate", challenge.encode())])


def request_actor(ctx: Any) -> Actor | None:
    """The actor the guard authenticated for the request of ``ctx`` (a handler's context);
    ``None`` over stdio or with the static token, where the configured ``[actor]`` acts."""
    scope = getattr(getattr(ctx, "request", None), "scope", None)
    actor = scope.get(ACTOR_KEY) if isinstance(scope, dict) else None
    return actor if isinstance(actor, Actor) else None


def _bearer(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            token = token.strip()
            return token if scheme.lower() == "bearer" and token else None
    return None


def _error_body(error: str, description: str) -> bytes:
    return json.dumps({"error": error, "error_description": description}).encode()


async def _respond(
    send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _log() -> Any:
    from nrllm_core.log import logger

    return logger()

"""``nrllm mcp serve --transport http`` as an OAuth 2.1 resource server: a JWT issuer made in
the test (its JWKS served on loopback), or an introspection endpoint (RFC 7662) made in the
test, the metadata, the challenges, and each call a run as the person the token names."""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote_plus

import attrs
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp.shared.auth import ProtectedResourceMetadata
from structlog.testing import capture_logs

from nrllm_mcp._serve_auth import (
    CLIENT_ID_ENV,
    CLIENT_SECRET_ENV,
    IntrospectionVerifier,
    Refusal,
)
from nrllm_mcp._settings import SettingsError, load_settings

from .conftest import free_port, serve_command, wait_for_port
from .test_serve import ACCEPT, INITIALIZE, TIMEOUT, runs_of, weather_in_rome

SCOPE = "nrllm:tools"


class Issuer:
    """An authorization server's signing side: an RSA key in a JWKS served on loopback, and
    an EC key nobody published."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.stranger = ec.generate_private_key(ec.SECP256R1())
        jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key()))
        self.jwks = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]})
        self.url = ""

    def token(self, resource: str, **claims: Any) -> str:
        now = int(time.time())
        body = {
            "iss": self.url,
            "aud": resource,
            "sub": "sub-ana",
            "iat": now,
            "exp": now + 300,
            "scope": f"openid {SCOPE}",
            "client_id": "desk-client",
            **claims,
        }
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": "k1"})


class JsonHandler(BaseHTTPRequestHandler):
    """A loopback endpoint's handler: answers JSON, logs nothing."""

    def reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def loopback(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """``handler`` served on a thread at a free loopback port: its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    made = Issuer()

    class Handler(JsonHandler):
        def do_GET(self) -> None:
            self.reply(200 if self.path == "/jwks.json" else 404, made.jwks.encode())

    with loopback(Handler) as url:
        made.url = url
        yield made


def serve_section(issuer: Issuer, resource: str) -> str:
    return (
        "[mcp.serve]\n"
        'auth = "oauth"\n'
        f'issuer = "{issuer.url}"\n'
        f'jwks_url = "{issuer.url}/jwks.json"\n'
        f'resource = "{resource}"\n'
        f'required_scopes = ["{SCOPE}"]\n'
        "[mcp.serve.actors]\n"
        '"sub-ana" = {name = "ana", permissions = []}\n'
        '"sub-bo" = {name = "bo"}\n'
    )


@contextlib.contextmanager
def serving(served: dict[str, str], port: int, section: str) -> Iterator[str]:
    """``nrllm mcp serve`` on ``port`` with this ``[mcp.serve]`` section: its resource URL."""
    resource = f"http://127.0.0.1:{port}/mcp"
    config = Path(served["NRLLM_CONFIG"])
    config.write_text(config.read_text() + section)
    process = subprocess.Popen(
        serve_command("--transport", "http", "--port", str(port)),
        env=served,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        endpoint = process.stdout.readline().strip().removeprefix("nrllm MCP endpoint: ")
        assert process.stdout.readline().startswith(f"OAuth resource: {resource}")
        wait_for_port(port, process)
        assert endpoint == resource
        yield resource
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
def oauth_serve(served: dict[str, str], issuer: Issuer) -> Iterator[tuple[str, Issuer]]:
    port = free_port()
    with serving(served, port, serve_section(issuer, f"http://127.0.0.1:{port}/mcp")) as resource:
        yield resource, issuer


def post(url: str, token: str | None) -> httpx2.Response:
    headers = dict(ACCEPT)
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return httpx2.post(url, json=INITIALIZE, headers=headers, timeout=10)


def metadata_url(resource: str) -> str:
    return resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")


def test_a_request_without_a_token_is_pointed_at_the_metadata(oauth_serve):
    resource, issuer = oauth_serve
    answer = post(resource, None)
    assert answer.status_code == 401
    assert answer.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{metadata_url(resource)}"'
    )
    for url in (
        metadata_url(resource),
        resource.replace("/mcp", "/.well-known/oauth-protected-resource"),
    ):
        document = httpx2.get(url, timeout=10)
        assert document.status_code == 200
        shown = document.json()
        ProtectedResourceMetadata.model_validate(shown)
        assert shown["resource"] == resource
        assert shown["authorization_servers"] == [issuer.url]
        assert shown["scopes_supported"] == [SCOPE]
        assert shown["bearer_methods_supported"] == ["header"]


def test_a_valid_token_of_a_mapped_subject_is_served(oauth_serve):
    resource, issuer = oauth_serve
    assert post(resource, issuer.token(resource)).status_code == 200


@pytest.mark.parametrize(
    ("claims", "status", "error"),
    [
        ({"exp": int(time.time()) - 600}, 401, "invalid_token"),
        ({"aud": "http://127.0.0.1:1/mcp"}, 401, "invalid_token"),
        ({"iss": "http://127.0.0.1:1"}, 401, "invalid_token"),
        ({"exp": None}, 401, "invalid_token"),
        ({"scope": "openid"}, 403, "insufficient_scope"),
    ],
    ids=["expired", "wrong-audience", "wrong-issuer", "no-expiry", "missing-scope"],
)
def test_a_token_that_does_not_hold_is_refused_with_a_challenge(oauth_serve, claims, status, error):
    resource, issuer = oauth_serve
    answer = post(resource, issuer.token(resource, **claims))
    assert answer.status_code == status
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith(f'Bearer error="{error}"')
    assert f'resource_metadata="{metadata_url(resource)}"' in challenge
    assert answer.json()["error"] == error


def test_a_token_signed_by_another_key_or_none_is_refused(oauth_serve):
    resource, issuer = oauth_serve
    now = int(time.time())
    claims = {
        "iss": issuer.url,
        "aud": resource,
        "sub": "sub-ana",
        "exp": now + 300,
        "scope": SCOPE,
    }
    forged = [
        jwt.encode(claims, issuer.stranger, algorithm="ES256", headers={"kid": "k1"}),
        jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"}),
        jwt.encode(
            claims, "a shared secret of enough length!", algorithm="HS256", headers={"kid": "k1"}
        ),
        "not.a.jwt",
        "x" * 10_000,
    ]
    for token in forged:
        answer = post(resource, token)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"].startswith('Bearer error="invalid_token"')


def test_a_session_is_bound_to_the_person_who_opened_it(oauth_serve):
    resource, issuer = oauth_serve
    opened = post(resource, issuer.token(resource))
    session = {"mcp-session-id": opened.headers["mcp-session-id"]}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

    def ping_as(subject: str) -> int:
        headers = {**ACCEPT, **session, "mcp-protocol-version": "2025-06-18"}
        headers["authorization"] = f"Bearer {issuer.token(resource, sub=subject)}"
        return httpx2.post(resource, json=ping, headers=headers, timeout=10).status_code

    assert ping_as("sub-bo") == 404
    assert ping_as("sub-ana") == 200


def test_an_unmapped_subject_is_refused_never_given_a_default_actor(oauth_serve):
    resource, issuer = oauth_serve
    answer = post(resource, issuer.token(resource, sub="sub-stranger"))
    assert answer.status_code == 403
    assert answer.json()["error"] == "access_denied"


def test_a_call_is_a_run_as_the_mapped_actor_and_runs_filters_by_it(oauth_serve, served):
    resource, issuer = oauth_serve
    token = issuer.token(resource)

    result = weather_in_rome(resource, token)
    assert [b.text for b in result.content] == ["Sunny in Rome."]
    ((info, _),) = runs_of(served)
    # Not the configured [actor] (alice): the person the token names.
    assert (info.kind.value, info.actor) == ("mcp", "ana")

    def runs(*options: str) -> list[Any]:
        done = subprocess.run(
            [*serve_command()[:3], "runs", "--json", *options],
            env=served,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert [r["actor"] for r in runs("--actor", "ana")] == ["ana"]
    assert runs("--actor", "alice") == []


def settings_error(serve: dict[str, Any]) -> str:
    with pytest.raises(SettingsError) as raised:
        load_settings({"serve": serve})
    return str(raised.value)


OAUTH: dict[str, Any] = {
    "auth": "oauth",
    "issuer": "https://auth.example.com",
    "jwks_url": "https://auth.example.com/jwks.json",
    "resource": "https://mcp.example.com/mcp",
    "actors": {"sub-1": {"name": "ana"}},
}


@pytest.mark.parametrize(
    ("serve", "message"),
    [
        ({"auth": "saml"}, "mcp.serve.auth: 'saml' is not accepted"),
        ({"issuer": "https://a.example"}, 'mcp.serve.issuer: only with auth = "oauth"'),
        ({**OAUTH, "jwks_url": None}, "mcp.serve: set exactly one of jwks_url"),
        (
            {**OAUTH, "introspection_url": "https://auth.example.com/introspect"},
            "mcp.serve: set exactly one of jwks_url (JWT access tokens) and introspection_url",
        ),
        (
            {**OAUTH, "jwks_url": None, "introspection_url": "http://auth.example.com/i"},
            "mcp.serve.introspection_url: expected an https://",
        ),
        ({"introspection_url": "https://a.example"}, "mcp.serve.introspection_url: only with"),
        (
            {**OAUTH, "resource": "http://mcp.example.com/mcp"},
            "mcp.serve.resource: expected an https://",
        ),
        ({**OAUTH, "actors": {}}, "mcp.serve.actors: required"),
        ({**OAUTH, "actors": {"s": {"name": ""}}}, "mcp.serve.actors.s.name: expected a non-empty"),
        (
            {**OAUTH, "actors": {"s": {"name": "a", "root": True}}},
            "mcp.serve.actors.s.root: unknown",
        ),
        ({**OAUTH, "required_scopes": ["a b"]}, "mcp.serve.required_scopes: expected an array"),
        ({**OAUTH, "jwks_uri": "https://a"}, "mcp.serve.jwks_uri: unknown key"),
    ],
)
def test_serve_settings_name_the_key_that_is_wrong(serve: dict[str, Any], message: str) -> None:
    assert settings_error({k: v for k, v in serve.items() if v is not None}).startswith(message)


def test_serve_settings_read_the_actors() -> None:
    serve = load_settings({"serve": {**OAUTH, "required_scopes": [SCOPE]}}).serve
    assert (serve.auth, serve.required_scopes) == ("oauth", (SCOPE,))
    assert serve.actors["sub-1"].name == "ana"
    assert load_settings({}).serve.auth == "token"


INTROSPECTING: dict[str, Any] = {k: v for k, v in OAUTH.items() if k != "jwks_url"}


def test_serve_settings_read_the_introspection_url() -> None:
    url = "https://auth.example.com/introspect"
    serve = load_settings({"serve": {**INTROSPECTING, "introspection_url": url}}).serve
    assert (serve.introspection_url, serve.jwks_url) == (url, None)
    loopback = {**INTROSPECTING, "introspection_url": "http://127.0.0.1:9/i"}
    assert load_settings({"serve": loopback}).serve.introspection_url == "http://127.0.0.1:9/i"


class Introspection:
    """An authorization server's introspection endpoint (RFC 7662), served on loopback: it
    answers for the tokens it issued, ``{"active": false}`` for any other, and 401 to a client
    without its credentials."""

    client_id = "nrllm-tools"
    # Characters RFC 6749 §2.3.1 has the client form-encode before HTTP Basic.
    secret = "s3cret:+/ &=%"

    def __init__(self) -> None:
        self.answers: dict[str, bytes] = {}
        self.asked: list[str] = []
        self.url = ""
        self.issuer = "http://127.0.0.1:1/realms/team"

    def token(self, resource: str, **claims: Any) -> str:
        """A new token the endpoint says is active with these claims (``None``: left out)."""
        now = int(time.time())
        body = {
            "active": True,
            "iss": self.issuer,
            "aud": resource,
            "sub": "sub-ana",
            "exp": now + 300,
            "scope": f"openid {SCOPE}",
            "client_id": "desk-client",
            "token_type": "Bearer",
            **claims,
        }
        return self.answering(json.dumps({k: v for k, v in body.items() if v is not None}))

    def answering(self, raw: str) -> str:
        """A new token the endpoint answers ``raw`` for, whatever it is."""
        token = secrets.token_urlsafe(24)
        self.answers[token] = raw.encode()
        return token

    def credentials_hold(self, header: str) -> bool:
        scheme, _, encoded = header.partition(" ")
        if scheme != "Basic":
            return False
        client_id, _, secret = base64.b64decode(encoded).decode().partition(":")
        return (unquote_plus(client_id), unquote_plus(secret)) == (self.client_id, self.secret)


@pytest.fixture
def introspection() -> Iterator[Introspection]:
    made = Introspection()

    class Handler(JsonHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            form = parse_qs(self.rfile.read(length).decode())
            if not made.credentials_hold(self.headers.get("authorization", "")):
                status, body = 401, b'{"error": "invalid_client"}'
            elif self.path != "/introspect" or form.get("token_type_hint") != ["access_token"]:
                status, body = 400, b'{"error": "invalid_request"}'
            else:
                (token,) = form["token"]
                made.asked.append(token)
                status, body = 200, made.answers.get(token, b'{"active": false}')
            self.reply(status, body)

    with loopback(Handler) as url:
        made.url = f"{url}/introspect"
        yield made


def introspection_section(introspection: Introspection, resource: str) -> str:
    return (
        "[mcp.serve]\n"
        'auth = "oauth"\n'
        f'issuer = "{introspection.issuer}"\n'
        f'introspection_url = "{introspection.url}"\n'
        f'resource = "{resource}"\n'
        f'required_scopes = ["{SCOPE}"]\n'
        "[mcp.serve.actors]\n"
        '"sub-ana" = {name = "ana", permissions = []}\n'
    )


def with_credentials(env: dict[str, str], secret: str = Introspection.secret) -> dict[str, str]:
    return {**env, CLIENT_ID_ENV: Introspection.client_id, CLIENT_SECRET_ENV: secret}


def test_an_introspected_token_is_a_call_as_the_mapped_actor_asked_about_once(
    served, introspection
):
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    token = introspection.token(resource)

    env = with_credentials(served)
    with serving(env, port, introspection_section(introspection, resource)):
        result = weather_in_rome(resource, token)
    assert [b.text for b in result.content] == ["Sunny in Rome."]
    ((info, _),) = runs_of(served)
    assert (info.kind.value, info.actor) == ("mcp", "ana")
    # Every request of the session carried the token; the endpoint was asked once.
    assert introspection.asked == [token]


def test_an_introspection_answer_that_does_not_hold_is_refused_with_a_challenge(
    served, introspection
):
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    now = int(time.time())
    refused = {
        "inactive": (introspection.token(resource, active=False), 401, "invalid_token"),
        "active-as-text": (introspection.token(resource, active="true"), 401, "invalid_token"),
        "unknown": ("never-issued", 401, "invalid_token"),
        "expired": (introspection.token(resource, exp=now - 600), 401, "invalid_token"),
        "no-expiry": (introspection.token(resource, exp=None), 401, "invalid_token"),
        "wrong-audience": (
            introspection.token(resource, aud=["http://127.0.0.1:1/mcp"]),
            401,
            "invalid_token",
        ),
        "no-audience": (introspection.token(resource, aud=None), 401, "invalid_token"),
        "wrong-issuer": (
            introspection.token(resource, iss="http://127.0.0.1:2"),
            401,
            "invalid_token",
        ),
        "no-subject": (introspection.token(resource, sub=None), 401, "invalid_token"),
        "subject-not-text": (introspection.token(resource, sub=7), 401, "invalid_token"),
        "missing-scope": (introspection.token(resource, scope="openid"), 403, "insufficient_scope"),
        "not-an-object": (introspection.answering("[true]"), 503, "temporarily_unavailable"),
        "not-json": (introspection.answering("active"), 503, "temporarily_unavailable"),
        "oversize": (
            introspection.answering(json.dumps({"active": True, "x": "y" * 70_000})),
            503,
            "temporarily_unavailable",
        ),
    }
    served_alike = [
        introspection.token(resource, aud=["http://127.0.0.1:1/mcp", resource]),
        # ``iss`` is optional in an answer: the endpoint is the issuer's own.
        introspection.token(resource, iss=None),
    ]
    unmapped = introspection.token(resource, sub="sub-stranger")
    with serving(with_credentials(served), port, introspection_section(introspection, resource)):
        for case, (token, status, error) in refused.items():
            answer = post(resource, token)
            assert answer.status_code == status, case
            challenge = answer.headers["www-authenticate"]
            assert challenge.startswith(f'Bearer error="{error}"'), case
            assert f'resource_metadata="{metadata_url(resource)}"' in challenge, case
            assert answer.json()["error"] == error, case
        for token in served_alike:
            assert post(resource, token).status_code == 200
        answer = post(resource, unmapped)
        assert (answer.status_code, answer.json()["error"]) == (403, "access_denied")


def test_introspection_with_refused_credentials_fails_closed(served, introspection):
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    token = introspection.token(resource)
    env = with_credentials(served, secret="not-the-secret")
    with serving(env, port, introspection_section(introspection, resource)):
        answer = post(resource, token)
    assert answer.status_code == 503
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="temporarily_unavailable"')
    assert f'resource_metadata="{metadata_url(resource)}"' in challenge
    assert introspection.asked == []


def test_introspection_credentials_missing_stop_the_start(served, introspection):
    config = Path(served["NRLLM_CONFIG"])
    resource = f"http://127.0.0.1:{free_port()}/mcp"
    config.write_text(config.read_text() + introspection_section(introspection, resource))
    env = {**served, CLIENT_ID_ENV: Introspection.client_id}
    done = subprocess.run(
        serve_command("--transport", "http", "--port", "0"),
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 2
    assert f"invalid configuration: {CLIENT_SECRET_ENV}: the environment variable" in done.stderr
    assert "nrllm MCP endpoint" not in done.stdout


def introspection_settings(introspection: Introspection, resource: str) -> Any:
    return load_settings(
        {
            "serve": {
                **INTROSPECTING,
                "issuer": introspection.issuer,
                "introspection_url": introspection.url,
                "resource": resource,
                "required_scopes": [SCOPE],
            }
        }
    ).serve


def test_an_introspection_endpoint_that_is_down_refuses_and_logs_no_token(introspection):
    resource = "https://mcp.example.com/mcp"
    settings = introspection_settings(introspection, resource)
    # Nothing listens there: the port was free a moment ago.
    down = attrs.evolve(settings, introspection_url=f"http://127.0.0.1:{free_port()}/introspect")
    verifier = IntrospectionVerifier(down, with_credentials({}))
    token = introspection.token(resource)
    with capture_logs() as logs, pytest.raises(Refusal) as raised:
        verifier.verify(token)
    assert (raised.value.status, raised.value.error) == (503, "temporarily_unavailable")
    assert [entry["event"] for entry in logs] == ["nrllm.mcp.serve_introspection_failed"]
    assert logs[0]["reason"] == "unreachable"
    assert token not in repr(logs)


def test_an_introspection_answer_is_reused_until_a_minute_or_the_expiry(introspection):
    resource = "https://mcp.example.com/mcp"
    verifier = IntrospectionVerifier(
        introspection_settings(introspection, resource), with_credentials({})
    )
    lasting = introspection.token(resource)
    assert verifier.known(lasting) is None
    assert verifier.verify(lasting) == verifier.verify(lasting) == verifier.known(lasting)
    assert introspection.asked == [lasting]
    # Expiring in a second: asked again once it has, and still served within the leeway.
    brief = introspection.token(resource, exp=int(time.time()) + 1)
    verifier.verify(brief)
    time.sleep(2.1)
    assert verifier.verify(brief).subject == "sub-ana"
    assert introspection.asked == [lasting, brief, brief]
    # Past its expiry yet within the leeway: served, never remembered.
    late = introspection.token(resource, exp=int(time.time()) - 5)
    assert verifier.verify(late) == verifier.verify(late)
    assert introspection.asked.count(late) == 2
    # A refusal is not remembered: each try asks.
    inactive = introspection.token(resource, active=False)
    for _ in range(2):
        with pytest.raises(Refusal):
            verifier.verify(inactive)
    assert introspection.asked.count(inactive) == 2
    assert verifier.known(inactive) is None


def test_a_known_token_is_served_while_unknown_ones_wait_on_the_endpoint():
    """In process, at the guard: tokens the endpoint is slow about wait on their own
    threads, and a token checked a moment ago is served at once."""
    import anyio

    from nrllm_mcp._serve_auth import CHECKS_AT_ONCE, Verified, oauth_guard

    settings = load_settings(
        {"serve": {**INTROSPECTING, "introspection_url": "http://127.0.0.1:9/i"}}
    )
    released = threading.Event()
    ana = Verified(
        subject="sub-1", issuer=OAUTH["issuer"], client_id="c", scopes=(), expires_at=None
    )

    class SlowEndpoint:
        """Knows ``good``; any other token waits until released, then is refused."""

        def __init__(self) -> None:
            self.waiting = 0

        def known(self, token: str) -> Verified | None:
            return ana if token == "good" else None

        def verify(self, token: str) -> Verified:
            self.waiting += 1
            released.wait(10)
            raise Refusal(401, "invalid_token", "The access token is not valid.")

    served: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        served.append(scope["nrllm.actor"].id)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    check = SlowEndpoint()
    guard = oauth_guard(app, settings=settings.serve, check=check)

    async def request(token: str) -> int:
        sent: list[Any] = []

        async def receive() -> Any:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: Any) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/mcp",
            "headers": [(b"authorization", f"Bearer {token}".encode())],
        }
        await guard(scope, receive, send)
        return int(sent[0]["status"])

    async def main() -> tuple[int, float, int]:
        async with anyio.create_task_group() as group:
            for n in range(3 * CHECKS_AT_ONCE):
                group.start_soon(request, f"junk-{n}")
            await anyio.sleep(0.2)
            started = time.perf_counter()
            with anyio.fail_after(5):
                status = await request("good")
            seconds = time.perf_counter() - started
            waiting = check.waiting
            released.set()
        return status, seconds, waiting

    try:
        status, seconds, waiting = anyio.run(main)
    finally:
        released.set()
    assert status == 200
    assert served == ["ana"]
    assert seconds < 1.0
    # The unknown tokens took no more threads than their own limit.
    assert waiting == CHECKS_AT_ONCE

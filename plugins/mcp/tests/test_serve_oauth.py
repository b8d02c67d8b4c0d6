"""``nrllm mcp serve --transport http`` as an OAuth 2.1 resource server: a JWT issuer made in
the test (its JWKS served on loopback), the metadata, the challenges, and each call a run as
the person the token names."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import httpx2
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import ProtectedResourceMetadata

from nrllm_mcp._settings import SettingsError, load_settings

from .conftest import free_port, serve_command, wait_for_port
from .test_serve import ACCEPT, INITIALIZE, TIMEOUT, runs_of

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


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    made = Issuer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = made.jwks.encode()
            self.send_response(200 if self.path == "/jwks.json" else 404)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    made.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield made
    finally:
        server.shutdown()
        server.server_close()


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


@pytest.fixture
def oauth_serve(served: dict[str, str], issuer: Issuer) -> Iterator[tuple[str, Issuer]]:
    port = free_port()
    resource = f"http://127.0.0.1:{port}/mcp"
    config = Path(served["NRLLM_CONFIG"])
    config.write_text(config.read_text() + serve_section(issuer, resource))
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
        yield resource, issuer
    finally:
        process.terminate()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


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

    async def body():
        client = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=30)
        async with (
            client,
            streamable_http_client(resource, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            return await session.call_tool("weather", {"city": "Rome"})

    async def bounded():
        with anyio.fail_after(TIMEOUT):
            return await body()

    result = anyio.run(bounded)
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
        ({**OAUTH, "jwks_url": None}, "mcp.serve.jwks_url: required"),
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
        ({**OAUTH, "introspection_url": "https://a"}, "mcp.serve.introspection_url: unknown key"),
    ],
)
def test_serve_settings_name_the_key_that_is_wrong(serve: dict[str, Any], message: str) -> None:
    assert settings_error({k: v for k, v in serve.items() if v is not None}).startswith(message)


def test_serve_settings_read_the_actors() -> None:
    serve = load_settings({"serve": {**OAUTH, "required_scopes": [SCOPE]}}).serve
    assert (serve.auth, serve.required_scopes) == ("oauth", (SCOPE,))
    assert serve.actors["sub-1"].name == "ana"
    assert load_settings({}).serve.auth == "token"

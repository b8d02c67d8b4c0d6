"""OAuth for remote servers: ``nrllm mcp login`` against an authorization server and a guarded
MCP server written with the SDK's server-side auth, the token a run's requests carry, its
refresh, and a run that needs a person to log in (the server withheld, never a browser)."""

from __future__ import annotations

import json
import queue
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from structlog.testing import capture_logs

from nrllm_core import Actor, ToolContext, invoke, make_plugin_manager
from nrllm_core.sealing import read_sealed
from nrllm_mcp._oauth import LoginFailed, login, token_file
from nrllm_mcp._settings import ServerSettings, SettingsError, load_settings

from .conftest import free_port, wait_for_port
from .test_pins import nrllm

SERVER = Path(__file__).parent / "oauth_server.py"
# Long enough for a login on a loaded machine to use its token, short enough to wait out.
ACCESS_SECONDS = 3
CONTEXT = ToolContext(run_id="r", call_id="c", actor=Actor(id="tester"))
NOT_LOGGED_IN = "not logged in: run nrllm mcp login guarded"


@pytest.fixture
def guarded(state: Path) -> Iterator[str]:
    """The guarded MCP server and its authorization server on loopback; the MCP URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), str(state), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        from nrllm_mcp._client import close_all

        # Before the server stops: it would wait for an open listen stream to end.
        close_all()
        process.terminate()
        process.wait(10)


@pytest.fixture
def server(configure, guarded: str) -> ServerSettings:
    configure({"guarded": {"url": guarded, "auth": "oauth", "timeout_seconds": 10}})
    return ServerSettings(name="guarded", url=guarded, auth="oauth", timeout_seconds=10)


def log_in(settings: ServerSettings, **browser: Any) -> None:
    """``login``, with an HTTP client in the browser's place: it opens the authorization URL
    and follows the authorization server's redirect to the loopback listener."""
    shown: queue.Queue[str] = queue.Queue()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            login(settings, {}, shown.put, timeout=browser.pop("timeout", 20))
        except BaseException as exc:
            failure.append(exc)
            shown.put("")

    thread = threading.Thread(target=run)
    thread.start()
    url = shown.get(timeout=30)
    if url and browser.get("follow", True):
        answer = httpx2.get(url, follow_redirects=True, timeout=10)
        assert answer.status_code == browser.get("status", 200), answer.text
    thread.join(30)
    if failure:
        raise failure[0]


def stored(settings: ServerSettings, home: Path) -> dict[str, Any]:
    plain = read_sealed(
        token_file(settings, home), f"nrllm-mcp-oauth\x00guarded\x00{settings.url}", data_dir=home
    )
    assert plain is not None
    record: dict[str, Any] = json.loads(plain)
    return record


def grants(state: Path) -> list[str]:
    path = state / "grants"
    return path.read_text(encoding="utf-8").split() if path.exists() else []


def reason(name: str = "guarded") -> str | None:
    result = nrllm("mcp", "servers", "--json")
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.stdout) if r["name"] == name)
    value: str | None = row["reason"]
    return value


def test_login_stores_the_tokens_sealed_and_a_run_calls_with_them(server, home, state):
    with capture_logs() as logs:
        log_in(server)
        outcome = invoke(make_plugin_manager(), "guarded__echo", {"text": "hi"}, context=CONTEXT)

    assert outcome.content == "hi"
    path = token_file(server, home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    record = stored(server, home)
    token = record["tokens"]["access_token"]
    raw = path.read_bytes()
    assert token.encode() not in raw
    assert record["tokens"]["refresh_token"].encode() not in raw
    # Registered dynamically, and what a later refresh needs was kept.
    assert record["client"]["client_id"]
    assert record["metadata"]["token_endpoint"]
    assert grants(state) == ["authorization_code"]
    assert token not in repr(logs)
    assert [e["event"] for e in logs if e["event"].startswith("nrllm.mcp.oauth")] == [
        "nrllm.mcp.oauth_logged_in"
    ]


def test_an_expired_access_token_is_refreshed_and_the_new_one_stored(server, home, state):
    (state / "access_seconds").write_text(str(ACCESS_SECONDS), encoding="utf-8")
    log_in(server)
    first = stored(server, home)["tokens"]
    time.sleep(ACCESS_SECONDS + 1.2)

    outcome = invoke(make_plugin_manager(), "guarded__echo", {"text": "later"}, context=CONTEXT)

    assert outcome.content == "later"
    assert grants(state) == ["authorization_code", "refresh_token"]
    assert stored(server, home)["tokens"]["refresh_token"] != first["refresh_token"]


def test_a_refused_refresh_withholds_only_this_server_with_a_safe_reason(server, home, state):
    (state / "access_seconds").write_text(str(ACCESS_SECONDS), encoding="utf-8")
    log_in(server)
    refresh_token = stored(server, home)["tokens"]["refresh_token"]
    (state / "reject_refresh").touch()
    time.sleep(ACCESS_SECONDS + 1.2)

    began = time.monotonic()
    with capture_logs() as logs:
        tools = make_plugin_manager().catalog().tools
    assert not any(name.startswith("guarded__") for name in tools)
    # At once, not after the start timeout: no run waits for a person.
    assert time.monotonic() - began < 8
    assert "nrllm.mcp.oauth_login_needed" in [e["event"] for e in logs]
    assert refresh_token not in repr(logs)
    assert reason() == NOT_LOGGED_IN


def test_a_server_never_logged_in_to_is_withheld_with_the_reason(server):
    assert not any(n.startswith("guarded__") for n in make_plugin_manager().catalog().tools)
    assert reason() == NOT_LOGGED_IN


def test_a_token_file_moved_to_another_server_does_not_open(configure, guarded, server, home):
    log_in(server)
    other = ServerSettings(name="other", url=guarded, auth="oauth")
    token_file(server, home).rename(token_file(other, home))
    configure({"other": {"url": guarded, "auth": "oauth", "timeout_seconds": 10}})

    assert reason("other") == "not logged in: run nrllm mcp login other"


def test_logout_deletes_the_tokens(server, home):
    log_in(server)

    result = nrllm("mcp", "logout", "guarded")
    assert result.exit_code == 0, result.output
    assert "logged out of guarded" in result.stdout
    assert not token_file(server, home).exists()
    assert "not logged in" in nrllm("mcp", "logout", "guarded").stdout
    assert reason() == NOT_LOGGED_IN


def test_a_client_registered_beforehand_logs_in_without_registering(configure, guarded, home):
    configure({"guarded": {"url": guarded, "auth": "oauth", "client_id": "preregistered"}})
    settings = ServerSettings(name="guarded", url=guarded, auth="oauth", client_id="preregistered")
    log_in(settings)

    assert stored(settings, home)["client"]["client_id"] == "preregistered"
    assert (
        invoke(make_plugin_manager(), "guarded__echo", {"text": "x"}, context=CONTEXT).content
        == "x"
    )


def test_an_error_redirect_fails_the_login_clearly(server, state, home):
    (state / "deny").touch()
    with pytest.raises(LoginFailed, match="the authorization server answered access_denied"):
        log_in(server)
    assert not token_file(server, home).exists()


def test_a_redirect_without_the_logins_state_is_refused_and_the_login_waits(server, home):
    shown: queue.Queue[str] = queue.Queue()
    failure: list[BaseException] = []
    thread = threading.Thread(
        target=lambda: _capture(failure, lambda: login(server, {}, shown.put, timeout=20))
    )
    thread.start()
    url = shown.get(timeout=30)
    # Where the authorization server would send the browser, with another state and code.
    location = httpx2.get(url, follow_redirects=False, timeout=10).headers["location"]
    forged = location.split("?")[0] + "?code=attacker&state=forged"
    assert httpx2.get(forged, timeout=10).status_code == 400
    assert thread.is_alive()
    assert httpx2.get(location, timeout=10).status_code == 200
    thread.join(30)
    assert not failure
    assert token_file(server, home).exists()


def _capture(failure: list[BaseException], work: Any) -> None:
    try:
        work()
    except BaseException as exc:
        failure.append(exc)


def test_a_login_nobody_completes_times_out(server):
    with pytest.raises(LoginFailed, match="no redirect came within 1 seconds"):
        log_in(server, follow=False, timeout=1)


def test_the_cli_login_and_logout_need_an_oauth_server(configure, state):
    configure({"plain": {"url": "http://127.0.0.1:9/mcp"}})
    for command in ("login", "logout"):
        result = nrllm("mcp", command, "plain")
        assert result.exit_code == 2
        assert 'does not use OAuth (auth = "oauth")' in result.output
    assert nrllm("mcp", "login", "nosuch").exit_code == 2


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"command": "x", "auth": "oauth"}, "auth: OAuth is for a url (HTTP) server only"),
        ({"url": "http://h/mcp", "auth": "basic"}, "auth: 'basic' is not accepted"),
        ({"url": "http://h/mcp", "client_id": "c"}, 'client_id: only with auth = "oauth"'),
        ({"url": "http://h/mcp", "scopes": ["a"]}, 'scopes: only with auth = "oauth"'),
        ({"url": "http://h/mcp", "auth": "oauth", "client_id": " "}, "expected a non-empty"),
        ({"url": "http://h/mcp", "auth": "oauth", "scopes": ["a b"]}, "OAuth scope names"),
        ({"url": "http://h/mcp", "auth": "oauth", "scopes": "a"}, "OAuth scope names"),
    ],
)
def test_the_oauth_settings_are_checked(raw, message):
    with pytest.raises(SettingsError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_settings({"servers": {"s": raw}})


def test_the_oauth_settings_are_read():
    raw = {"url": "https://h/mcp", "auth": "oauth", "client_id": "c", "scopes": ["read", "x:y"]}
    settings = load_settings({"servers": {"s": raw}}).servers["s"]
    assert (settings.auth, settings.client_id, settings.scopes) == ("oauth", "c", ("read", "x:y"))

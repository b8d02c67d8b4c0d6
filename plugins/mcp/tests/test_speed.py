"""How servers start and how long their sessions live: at once, each bounded by its own start
timeout, kept by the host across runs and calls, closed when idle or when the host goes."""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nrllm_core import Actor, ToolContext, invoke, make_plugin_manager
from nrllm_mcp._settings import SettingsError, load_settings

from .conftest import READ_ONLY, stdio_server
from .test_round_trip import Model

CONTEXT = ToolContext(run_id="r", call_id="c", actor=Actor(id="tester"))


def server_state(tmp_path: Path, name: str, delay: float = 0.0) -> Path:
    folder = tmp_path / f"state-{name}"
    folder.mkdir()
    if delay:
        (folder / "start_delay").write_text(str(delay), encoding="utf-8")
    return folder


def starts(folder: Path) -> int:
    path = folder / "starts"
    return len(path.read_text(encoding="utf-8").split()) if path.exists() else 0


def test_servers_start_at_once_not_one_after_another(configure, tmp_path):
    folders = {name: server_state(tmp_path, name, delay=2.0) for name in ("a", "b", "c")}
    configure({name: stdio_server(f, read_only_tools=READ_ONLY) for name, f in folders.items()})
    began = time.monotonic()
    catalog = make_plugin_manager().catalog()
    took = time.monotonic() - began
    assert {"a__echo", "b__echo", "c__echo"} <= set(catalog.tools)
    # One after another, the delays alone would take 6 s; together, one delay and the
    # interpreters' start (about 2.5 s on two loaded cores).
    assert took < 6.0


def test_a_server_past_its_start_timeout_costs_only_its_own_tools(configure, tmp_path):
    slow, fine = server_state(tmp_path, "slow"), server_state(tmp_path, "fine")
    servers = {
        "slow": stdio_server(slow, read_only_tools=READ_ONLY),
        "fine": stdio_server(fine, read_only_tools=READ_ONLY),
    }
    configure(servers)
    # Pinned on first use while it still starts in time.
    assert "slow__echo" in make_plugin_manager().catalog().tools
    from nrllm_mcp._client import close_all

    close_all()
    servers["slow"]["start_timeout_seconds"] = 1
    configure(servers)
    (slow / "start_delay").write_text("60", encoding="utf-8")
    began = time.monotonic()
    catalog = make_plugin_manager().catalog()
    took = time.monotonic() - began
    assert took < 8
    assert "fine__echo" in catalog.tools
    assert "slow__echo" not in catalog.tools
    withheld = catalog.withheld["slow__echo"]
    assert (withheld.reason, withheld.detail) == (
        "serverUnavailable",
        "the server did not start in time",
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("start_timeout_seconds", 0),
        ("start_timeout_seconds", 601),
        ("start_timeout_seconds", True),
        ("start_timeout_seconds", "5"),
        ("timeout_seconds", -1),
        ("idle_seconds", 0),
        ("idle_seconds", 86_401),
        ("idle_seconds", False),
    ],
)
def test_seconds_are_positive_numbers(key, value):
    server = {"command": "x", key: value}
    with pytest.raises(SettingsError, match=rf"mcp\.servers\.s\.{key}: expected a number"):
        load_settings({"servers": {"s": server}})


def test_the_call_of_a_host_reuses_the_session_its_catalog_opened(configure, tmp_path):
    folder = server_state(tmp_path, "demo")
    configure({"demo": stdio_server(folder, read_only_tools=READ_ONLY)})
    pm = make_plugin_manager()
    for text in ("one", "two"):
        assert invoke(pm, "demo__echo", {"text": text}, context=CONTEXT).content == text
    assert starts(folder) == 1


def pids(folder: Path) -> list[int]:
    return [int(line) for line in (folder / "starts").read_text(encoding="utf-8").split()]


def gone(pid: int, seconds: float = 15.0) -> bool:
    """Whether the process ``pid`` ends (and is reaped) within ``seconds``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def model() -> Iterator[Model]:
    served = Model()
    thread = threading.Thread(target=served.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    thread.join()


def test_a_host_keeps_its_sessions_across_runs_and_calls(configure, tmp_path, model, home):
    from nrllm_core import AsyncHost, Host

    folder = server_state(tmp_path, "demo")
    configure({"demo": stdio_server(folder, read_only_tools=READ_ONLY)}, model.provider("local"))
    host = Host.from_config(data_dir=home)
    try:
        for _ in range(2):
            model.script("demo__echo", {"text": "hi"})
            outcome = host.run("go", provider="llm")
            assert (outcome.status, outcome.final_content) == ("completed", "done")
        assert host.invoke("demo__echo", {"text": "direct"}).content == "direct"
        import anyio

        wrapped = AsyncHost(host)
        answer = anyio.run(lambda: wrapped.invoke("demo__echo", {"text": "async"}))
        assert answer.content == "async"
        assert (folder / "calls").read_text(encoding="utf-8").split() == ["echo"] * 4
        # Started once, for the catalog, and kept.
        assert starts(folder) == 1
    finally:
        host.store.close()


def test_an_idle_session_is_closed_and_opened_again_on_next_use(configure, tmp_path):
    folder = server_state(tmp_path, "demo")
    configure({"demo": stdio_server(folder, read_only_tools=READ_ONLY, idle_seconds=0.5)})
    pm = make_plugin_manager()
    assert invoke(pm, "demo__echo", {"text": "one"}, context=CONTEXT).content == "one"
    [first] = pids(folder)
    assert gone(first)
    assert invoke(pm, "demo__echo", {"text": "two"}, context=CONTEXT).content == "two"
    assert starts(folder) == 2


def test_the_sessions_close_when_their_host_goes(configure, tmp_path, home):
    from nrllm_core import Host
    from nrllm_mcp._connection import wait_closed

    folder = server_state(tmp_path, "demo")
    configure({"demo": stdio_server(folder, read_only_tools=READ_ONLY)})
    host = Host.from_config(data_dir=home)
    assert host.invoke("demo__echo", {"text": "hi"}).content == "hi"
    [pid] = pids(folder)
    host.store.close()
    del host
    gc.collect()
    wait_closed()
    assert gone(pid)


LATEST = "2026-07-28"
HANDSHAKE_REVISIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


def test_the_sdks_newest_revision_is_spoken_over_stdio(tmp_path):
    from nrllm_mcp._connection import Connection
    from nrllm_mcp._settings import load_settings

    folder = server_state(tmp_path, "demo")
    settings = load_settings({"servers": {"demo": stdio_server(folder)}}).servers["demo"]
    connection = Connection(settings, os.environ)
    try:
        assert {t.name for t in connection.open()} >= {"echo"}
        assert connection.revision == LATEST
    finally:
        connection.close()
    assert connection.revision is None


def test_the_sdks_newest_revision_is_spoken_over_streamable_http(http_server):
    from nrllm_mcp._connection import Connection
    from nrllm_mcp._settings import load_settings

    settings = load_settings({"servers": {"web": {"url": http_server}}}).servers["web"]
    connection = Connection(settings, os.environ)
    try:
        assert {t.name for t in connection.open()} >= {"echo"}
        assert connection.revision == LATEST
        assert connection.call("echo", {"text": "hi"}).content[0].text == "hi"
    finally:
        connection.close()


@pytest.mark.parametrize("revision", HANDSHAKE_REVISIONS)
def test_a_server_of_an_older_revision_still_works(configure, tmp_path, revision):
    folder = server_state(tmp_path, "old")
    (folder / "revision").write_text(revision, encoding="utf-8")
    configure({"old": stdio_server(folder, read_only_tools=READ_ONLY)})
    pm = make_plugin_manager()
    assert invoke(pm, "old__echo", {"text": "hi"}, context=CONTEXT).content == "hi"
    from nrllm_mcp._client import connection_for
    from nrllm_mcp._settings import load_settings

    server = load_settings(
        {"servers": {"old": stdio_server(folder, read_only_tools=READ_ONLY)}}
    ).servers["old"]
    assert connection_for(server, os.environ).revision == revision

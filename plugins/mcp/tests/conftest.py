"""Fixtures: a real SDK server over stdio and streamable HTTP, the configuration that names
it, and the pin store on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nrllm_core.testing import postgres_schema

SERVER = Path(__file__).parent / "mcp_server.py"
READ_ONLY = [
    "echo",
    "audience",
    "image",
    "rows",
    "hang",
    "broken",
    "environment",
    "grow",
    "chatty",
    "sample",
    "ask",
    "roots",
    "delete_all",
]


def toml_value(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


@pytest.fixture(autouse=True)
def _closed_connections() -> Iterator[None]:
    yield
    from nrllm_mcp._client import close_all

    close_all()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("NRLLM_HOME", str(folder))
    monkeypatch.setenv("NRLLM_LOAD_PLUGINS", "mcp")
    return folder


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """What the test server lists and where it logs its calls."""
    folder = tmp_path / "server-state"
    folder.mkdir()
    return folder


def stdio_server(state: Path, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER), str(state), "stdio"], **extra}


@pytest.fixture
def configure(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Path]:
    """Write nrllm.toml with these servers (name to settings) and point $NRLLM_CONFIG at it."""

    def write(servers: dict[str, dict[str, Any]], extra: str = "") -> Path:
        lines = [extra]
        for name, settings in servers.items():
            lines.append(f"[mcp.servers.{name}]")
            lines += [f"{key} = {toml_value(value)}" for key, value in settings.items()]
        path = tmp_path / "nrllm.toml"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        monkeypatch.setenv("NRLLM_CONFIG", str(path))
        return path

    return write


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def wait_for_port(port: int, process: subprocess.Popen[bytes], seconds: float = 20.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("the server process exited")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


@pytest.fixture
def http_server(state: Path) -> Iterator[str]:
    """The test server over streamable HTTP on loopback; its URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), str(state), "http", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture
def served(tmp_path: Path) -> dict[str, str]:
    """The environment of an ``nrllm mcp serve`` child whose host has ``served_plugin``
    installed (a dist-info on its path), its own data folder and configuration."""
    site = tmp_path / "site"
    info = site / "served_plugin-0.0.1.dist-info"
    info.mkdir(parents=True)
    (site / "served_plugin.py").write_text(
        (Path(__file__).parent / "served_plugin.py").read_text(encoding="utf-8"), encoding="utf-8"
    )
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: served_plugin\nVersion: 0.0.1\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[nrllm]\nserved_plugin = served_plugin\n", encoding="utf-8"
    )
    home = tmp_path / "served-home"
    home.mkdir()
    config = tmp_path / "served.toml"
    config.write_text('[actor]\nid = "alice"\n', encoding="utf-8")
    import os

    return {
        "PATH": os.environ.get("PATH", ""),
        # The caller's own path after the plugin's: a child of a work tree imports its code.
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        "NRLLM_HOME": str(home),
        "NRLLM_CONFIG": str(config),
        "NRLLM_LOAD_PLUGINS": "served_plugin,mcp",
    }


def serve_command(*options: str) -> list[str]:
    return [sys.executable, "-m", "nrllm_core", "mcp", "serve", *options]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, home: Path) -> Iterator[str | None]:
    if request.param == "sqlite":
        yield None
        return
    with postgres_schema("nrllm_mcp_test") as url:
        yield url

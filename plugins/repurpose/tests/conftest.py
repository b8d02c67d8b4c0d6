"""Fixtures: the job database on SQLite and PostgreSQL, and a loopback page server."""

from __future__ import annotations

import http.server
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from nrllm_core.testing import postgres_schema

ARTICLE = b"""<!doctype html><html><head><title>Tides</title></head><body>
<nav>Home | About</nav>
<article><h1>How tides work</h1>
<p>Tides are the rise and fall of sea levels caused by the gravity of the moon and the sun.
Most coasts see two high tides and two low tides every lunar day.</p>
<p>Spring tides happen at new and full moon, when sun and moon pull in a line; neap tides
happen at the quarter moons, when they pull at right angles.</p>
<p>Harbours publish tide tables so that ships can plan when to enter shallow water.</p>
</article><footer>Contact</footer></body></html>"""


@attrs.frozen(kw_only=True)
class Backend:
    """Where the jobs live: ``url`` ``None`` is the embedded SQLite file in ``data_dir``."""

    name: str
    url: str | None
    data_dir: Path

    def open(self) -> Any:
        from nrllm_repurpose._store import JobStore

        return JobStore.open(self.url, data_dir=self.data_dir)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The nrllm data folder, where the embedded database and the artifact files go."""
    folder = tmp_path / "home"
    folder.mkdir()
    monkeypatch.setenv("NRLLM_HOME", str(folder))
    return folder


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, home: Path) -> Iterator[Backend]:
    """Each database test runs on both; PostgreSQL gets a fresh schema, dropped afterwards."""
    if request.param == "sqlite":
        yield Backend(name="sqlite", url=None, data_dir=home)
        return
    with postgres_schema("nrllm_repurpose_test") as url:
        yield Backend(name="postgresql", url=url, data_dir=home)


@attrs.define
class PageServer:
    """A loopback HTTP server: every path answers with the article; hits are counted."""

    base: str
    hits: Counter[str]


@pytest.fixture
def page_server() -> Iterator[PageServer]:
    hits: Counter[str] = Counter()
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                hits[self.path] += 1
            if self.path.startswith("/missing"):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(ARTICLE)))
            self.end_headers()
            self.wfile.write(ARTICLE)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield PageServer(base=f"http://127.0.0.1:{server.server_address[1]}", hits=hits)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()

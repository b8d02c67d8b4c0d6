"""Parsing a fetched source in a child process bounded in CPU time, address space and text."""

from __future__ import annotations

import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

import nrllm_repurpose
from nrllm_core import load_config, make_plugin_manager
from nrllm_core.net import FetchResult, fetch_public
from nrllm_repurpose import _ingest
from nrllm_repurpose._ingest import IngestionFailed, ingest
from nrllm_repurpose._parse import ParseLimits
from nrllm_repurpose._records import JobStatus
from nrllm_repurpose._settings import SettingsError, load_settings
from nrllm_repurpose._store import JobStore
from nrllm_repurpose._worker import Worker


def shared_stream_pdf(pages: int, operators: bytes) -> bytes:
    """A PDF whose pages all draw one compressed content stream: small file, long parse."""
    stream = zlib.compress(b"BT /F1 12 Tf 72 720 Td\n" + operators + b"ET\n", 9)
    first_page = 5
    kids = " ".join(f"{first_page + i} 0 R" for i in range(pages))
    bodies = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 3 0 R >> >> /Contents 4 0 R >>"
    )
    bodies += [page] * pages
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(bodies, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(bodies) + 1,
        xref,
    )
    return bytes(out)


def slow_pdf() -> bytes:
    """Forty pages of twenty thousand text operators each: about twenty seconds of pypdf, from
    a file of 7 KB (the shape of the 11 KB, 82 s PDF the review found)."""
    return shared_stream_pdf(40, b"(tide) Tj\n" * 20_000)


def serve_pdf(monkeypatch: pytest.MonkeyPatch, body: bytes) -> None:
    """``*.pdf`` answers with ``body``; any other URL is fetched for real."""

    def fetch(url: str, **kwargs: Any) -> FetchResult:
        if url.endswith(".pdf"):
            return FetchResult(url=url, status=200, content_type="application/pdf", body=body)
        return fetch_public(url, **kwargs)

    monkeypatch.setattr(_ingest, "fetch_public", fetch)


def run_two_jobs(home: Path, tmp_path: Path, page_server: Any, **limits: int) -> tuple[Any, Any]:
    """A PDF job, then a page job, through one worker; both jobs as stored afterwards."""
    script = tmp_path / "writer.toml"
    script.write_text('[[turns]]\ncontent = "A FAQ."\n', encoding="utf-8")
    config = load_config(
        data={
            "providers": {"writer": {"kind": "scripted", "script": str(script)}},
            "repurpose": {"provider": "writer", "allow_hosts": ["127.0.0.1"], **limits},
        }
    )
    with JobStore.open(None, data_dir=home) as store:
        job = {"owner": "editor", "formats": ("faq",)}
        pdf = store.create_job(source_type="pdf_url", source_url="https://x.example/d.pdf", **job)
        page = store.create_job(source_type="url", source_url=f"{page_server.base}/next", **job)
        worker = Worker(
            store=store,
            pm=make_plugin_manager(plugins=[nrllm_repurpose], load_entry_points=False),
            load_config=lambda: config,
            data_dir=home,
            environ={},
        )
        assert worker.run(once=True, concurrency=1) == 2
        return store.job(pdf), store.job(page)


def test_a_pdf_over_the_cpu_limit_fails_the_job_and_the_next_job_runs(
    home, page_server, tmp_path, monkeypatch
):
    body = slow_pdf()
    assert len(body) < 11_000
    serve_pdf(monkeypatch, body)
    stopped, after = run_two_jobs(home, tmp_path, page_server, parse_cpu_seconds=1)

    assert (stopped.status, stopped.message) == (
        JobStatus.FAILED,
        "Parsing stopped: CPU time limit of 1 s reached",
    )
    assert (after.status, after.message) == (JobStatus.DONE, None)


def test_a_pdf_over_the_memory_limit_fails_the_job_and_the_next_job_runs(
    home, page_server, tmp_path, monkeypatch
):
    # One string of 70 MB, under pypdf's own 75 MB cap on a stream's output.
    serve_pdf(monkeypatch, shared_stream_pdf(1, b"(" + b"a" * 70_000_000 + b") Tj\n"))
    stopped, after = run_two_jobs(home, tmp_path, page_server, parse_memory_mib=128)

    assert (stopped.status, stopped.message) == (
        JobStatus.FAILED,
        "Parsing stopped: memory limit of 128 MiB reached",
    )
    assert (after.status, after.message) == (JobStatus.DONE, None)


def test_text_beyond_two_mib_stops_the_parse(monkeypatch):
    # Three pages of 800,000 characters each: 2.4 MB of text.
    serve_pdf(monkeypatch, shared_stream_pdf(3, b"(" + b"a" * 800_000 + b") Tj\n"))
    with pytest.raises(IngestionFailed) as stopped:
        ingest("https://example.com/d.pdf", "pdf_url")
    assert str(stopped.value) == "Parsing stopped: text limit of 2 MiB reached"


def test_a_pdf_under_every_limit_is_read_in_the_child(monkeypatch):
    serve_pdf(monkeypatch, shared_stream_pdf(2, b"(Tides follow the moon.) Tj\n"))
    text = ingest(
        "https://example.com/d.pdf", "pdf_url", limits=ParseLimits(cpu_seconds=5, memory_mib=256)
    )
    assert text == "Tides follow the moon.\n\nTides follow the moon."


def test_the_defaults_are_twenty_seconds_and_512_mib():
    settings = load_settings({})
    assert (settings.parse_cpu_seconds, settings.parse_memory_mib) == (20, 512)
    assert ParseLimits() == ParseLimits(cpu_seconds=20, memory_mib=512)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("parse_cpu_seconds", 0, "expected an integer of 1 or more"),
        ("parse_cpu_seconds", 2.5, "expected an integer, got a number"),
        ("parse_cpu_seconds", True, "expected an integer, got a boolean"),
        ("parse_memory_mib", 64, "expected an integer of 128 or more"),
        ("parse_memory_mib", "512", "expected an integer, got a string"),
    ],
)
def test_the_limits_are_checked(key, value, problem):
    with pytest.raises(SettingsError) as refused:
        load_settings({key: value})
    assert str(refused.value) == f"repurpose.{key}: {problem}"


def test_a_child_that_blocks_is_stopped_by_the_wall_clock(monkeypatch):
    from nrllm_repurpose import _parse

    seen: dict[str, Any] = {}

    def blocked(command: list[str], **kwargs: Any) -> Any:
        seen.update(kwargs)
        raise subprocess.TimeoutExpired(command, kwargs["timeout"])

    serve_pdf(monkeypatch, b"%PDF-1.7")
    monkeypatch.setattr(_parse.subprocess, "run", blocked)
    with pytest.raises(IngestionFailed) as stopped:
        ingest("https://example.com/d.pdf", "pdf_url", limits=ParseLimits(cpu_seconds=3))
    assert str(stopped.value) == "Parsing stopped: time limit of 16 s reached"
    assert seen["timeout"] == 16
    # The child gets the import path and nothing else of the worker's environment.
    assert list(seen["env"]) == ["PYTHONPATH"]

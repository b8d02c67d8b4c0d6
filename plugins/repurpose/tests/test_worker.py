"""The job store and the worker: claims, leases, the gate, fetching and generation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import nrllm_repurpose
from nrllm_core import hookimpl, load_config, make_plugin_manager
from nrllm_repurpose import _worker
from nrllm_repurpose._generate import Generator, GeneratorRegistry
from nrllm_repurpose._records import ArtifactStatus, JobStatus
from nrllm_repurpose._registry import build_registry
from nrllm_repurpose._store import WORKER_LOST, JobStore, LeaseLost
from nrllm_repurpose._worker import CRASHED, Worker

FAQ = "## What causes tides?\n\nThe moon and the sun."
HANDOUT = "# Tides\n\n- Two high tides a day\n- Spring and neap tides \u2014 \u201cin a line\u201d"
DIAGRAM = "```mermaid\nflowchart LR\n  Moon --> Tides\n  Sun --> Tides\n```"
SCRIPT = "**Ana:** Welcome!\n**Ben:** Today: tides."


def write_script(path: Path, *answers: str) -> Path:
    path.write_text(
        "".join(f"[[turns]]\ncontent = {json.dumps(a)}\n\n" for a in answers), encoding="utf-8"
    )
    return path


def host_config(
    tmp_path: Path, answers: tuple[str, ...], store: str | None = None, **repurpose: Any
) -> Any:
    """A host with the scripted provider ``writer``; ``store`` is the shared database URL."""
    script = write_script(tmp_path / "writer.toml", *answers)
    data: dict[str, Any] = {
        "providers": {
            "writer": {
                "kind": "scripted",
                "script": str(script),
                "trust_zone": repurpose.pop("zone", "externalGlobal"),
            }
        },
        "repurpose": {"provider": "writer", "allow_hosts": ["127.0.0.1"], **repurpose},
    }
    if store is not None:
        data["store"] = {"url": store}
        data["repurpose"]["store_url"] = store
    return load_config(data=data)


def worker_for(store: JobStore, config: Any, home: Path, *plugins: object) -> Worker:
    return Worker(
        store=store,
        pm=make_plugin_manager(plugins=[nrllm_repurpose, *plugins], load_entry_points=False),
        load_config=lambda: config,
        data_dir=home,
        environ={},
    )


def queue(store: JobStore, url: str, *formats: str, source_type: str = "url") -> int:
    return store.create_job(
        owner="editor", source_type=source_type, source_url=url, formats=formats
    )


# -- claims and leases -----------------------------------------------------------------------------


def test_each_queued_job_is_claimed_once_oldest_first(backend):
    with backend.open() as store:
        first = queue(store, "https://example.com/1", "faq")
        second = queue(store, "https://example.com/2", "faq")
        a = store.claim("a", lease_seconds=60)
        b = store.claim("b", lease_seconds=60)
        assert (a.uid, b.uid) == (first, second)
        assert store.claim("c", lease_seconds=60) is None
        assert a.attempt == 1
        assert store.job(first).status is JobStatus.INGESTING


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_an_expired_lease_is_claimed_again_once_then_the_job_fails(backend):
    clock = Clock()
    with JobStore.open(backend.url, data_dir=backend.data_dir, clock=clock) as store:
        uid = queue(store, "https://example.com/", "faq")
        first = store.claim("first", lease_seconds=10)
        clock.now += timedelta(seconds=5)
        store.advance(first, JobStatus.ANALYZING, lease_seconds=10)
        clock.now += timedelta(seconds=9)
        # Renewed five seconds in, the lease still holds.
        assert store.claim("second", lease_seconds=10) is None
        clock.now += timedelta(seconds=2)
        second = store.claim("second", lease_seconds=10)
        assert (second.uid, second.attempt) == (uid, 2)
        with pytest.raises(LeaseLost):
            store.advance(first, JobStatus.GENERATING, lease_seconds=10)
        clock.now += timedelta(seconds=11)
        assert store.claim("third", lease_seconds=10) is None
        job = store.job(uid)
        assert (job.status, job.message, job.attempt) == (JobStatus.FAILED, WORKER_LOST, 2)
        with pytest.raises(LeaseLost):
            store.finish(second, JobStatus.DONE, None)


def test_a_finished_job_is_never_claimed_again(backend):
    with backend.open() as store:
        uid = queue(store, "https://example.com/", "faq")
        claim = store.claim("w", lease_seconds=1)
        store.finish(claim, JobStatus.DONE, None)
        assert store.claim("w2", lease_seconds=1) is None
        assert store.job(uid).status is JobStatus.DONE


def test_a_job_that_outlasts_its_lease_keeps_it_while_the_worker_lives(
    backend, page_server, tmp_path, monkeypatch
):
    config = host_config(tmp_path, (FAQ,), store=backend.url, lease_seconds=1)
    intruders: list[object] = []

    with backend.open() as store:

        def slow_prepare(text: str) -> str:
            # Two and a half leases with no write of the worker's own: only a heartbeat holds it.
            until = time.monotonic() + 2.5
            while time.monotonic() < until:
                intruders.append(store.claim("intruder", lease_seconds=1))
                time.sleep(0.2)
            return text

        monkeypatch.setattr(_worker, "_prepare", slow_prepare)
        uid = queue(store, f"{page_server.base}/slow", "faq")
        worker_for(store, config, backend.data_dir).run(once=True, concurrency=1)
        job = store.job(uid)

    assert len(intruders) >= 10
    assert intruders == [None] * len(intruders)
    assert (job.status, job.attempt) == (JobStatus.DONE, 1)


HOLDER = """
import sys, time
from pathlib import Path
from nrllm_repurpose._store import JobStore
from nrllm_repurpose._worker import _heartbeat

with JobStore.open(sys.argv[1] or None, data_dir=Path(sys.argv[2])) as store:
    claim = store.claim("doomed", lease_seconds=1)
    with _heartbeat(store, claim, 1):
        print(claim.uid, flush=True)
        time.sleep(120)
"""


def test_a_worker_process_that_dies_loses_its_lease(backend):
    with backend.open() as store:
        uid = queue(store, "https://example.com/", "faq")
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, backend.url or "", str(backend.data_dir)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert holder.stdout is not None
            assert holder.stdout.readline().strip() == str(uid)
            # Alive in another process, the holder keeps the job past two leases.
            for _ in range(10):
                assert store.claim("intruder", lease_seconds=60) is None
                time.sleep(0.2)
        finally:
            holder.kill()
            holder.communicate(timeout=30)
        claimed = None
        deadline = time.monotonic() + 5
        while claimed is None and time.monotonic() < deadline:
            claimed = store.claim("intruder", lease_seconds=60)
            time.sleep(0.1)
        assert claimed is not None
        assert (claimed.uid, claimed.attempt) == (uid, 2)


def test_the_heartbeat_renews_nothing_but_the_lease_and_stops_on_a_lost_claim(backend):
    clock = Clock()
    with JobStore.open(backend.url, data_dir=backend.data_dir, clock=clock) as store:
        uid = queue(store, "https://example.com/", "faq")
        claim = store.claim("w", lease_seconds=10)
        before = store.job(uid)
        clock.now += timedelta(seconds=9)
        store.renew(claim, lease_seconds=10)
        clock.now += timedelta(seconds=9)
        # Renewed at second nine, the lease holds at eighteen; nothing else moved.
        assert store.claim("other", lease_seconds=10) is None
        assert store.job(uid) == before
        store.finish(claim, JobStatus.DONE, None)
        with pytest.raises(LeaseLost):
            store.renew(claim, lease_seconds=10)


WORKER_CONFIG = """
[providers.writer]
kind = "scripted"
script = "writer.toml"

[repurpose]
provider = "writer"
allow_hosts = ["127.0.0.1"]
{store}
"""


def test_four_worker_processes_never_process_one_job_twice(backend, page_server, tmp_path):
    store_lines = ""
    if backend.url is not None:
        store_lines = f'store_url = "{backend.url}"\n\n[store]\nurl = "{backend.url}"\n'
    config = tmp_path / "nrllm.toml"
    config.write_text(WORKER_CONFIG.format(store=store_lines), encoding="utf-8")
    write_script(tmp_path / "writer.toml", FAQ)
    with backend.open() as store:
        uids = [queue(store, f"{page_server.base}/page/{i}", "faq") for i in range(16)]
    env = {
        **os.environ,
        "NRLLM_HOME": str(backend.data_dir),
        "NRLLM_LOAD_PLUGINS": "repurpose",
    }
    command = [sys.executable, "-m", "nrllm_core", "--config", str(config)]
    workers = [
        subprocess.Popen(
            [*command, "repurpose", "worker", "--once", "--concurrency", "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    outputs = [w.communicate(timeout=120) for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0, 0], outputs
    processed = sum(int(out.split()[1]) for out, _ in outputs)
    assert processed == len(uids)
    assert sorted(page_server.hits.values()) == [1] * len(uids)
    with backend.open() as store:
        assert {store.job(uid).status for uid in uids} == {JobStatus.DONE}
        assert all(len(store.artifacts(uid)) == 1 for uid in uids)


# -- processing a job ------------------------------------------------------------------------------


def test_a_job_runs_through_fetch_and_generation(backend, page_server, tmp_path):
    config = host_config(tmp_path, (FAQ, HANDOUT, DIAGRAM, SCRIPT), store=backend.url)
    with backend.open() as store:
        uid = queue(
            store, f"{page_server.base}/article?t=1", "faq", "handout", "schaubild", "podcast"
        )
        processed = worker_for(store, config, backend.data_dir).run(once=True, concurrency=1)
        job = store.job(uid)
        artifacts = {a.format: a for a in store.artifacts(uid)}
    assert processed == 1
    assert job.status is JobStatus.PARTIALLY_DONE
    assert job.message == "1 of 4 formats failed; each failed artifact shows its error"
    assert list(artifacts) == ["faq", "handout", "schaubild", "podcast"]
    assert artifacts["faq"].content == FAQ + "\n"
    assert artifacts["faq"].status is ArtifactStatus.DONE
    pdf = Path(artifacts["handout"].file_path)
    assert pdf.read_bytes().startswith(b"%PDF")
    assert pdf.parent == backend.data_dir / "repurpose" / f"job-{uid}"
    assert artifacts["schaubild"].content.startswith("```mermaid\nflowchart LR\n")
    podcast = artifacts["podcast"]
    assert podcast.status is ArtifactStatus.FAILED
    assert podcast.error.startswith("No speech provider is configured")
    assert podcast.content == SCRIPT + "\n"


def test_the_provider_zone_must_permit_the_source_class(home, page_server, tmp_path):
    config = host_config(tmp_path, (FAQ,), source_data_class="sourceCode")
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, f"{page_server.base}/secret", "faq")
        worker_for(store, config, home).run(once=True, concurrency=1)
        job = store.job(uid)
    assert job.status is JobStatus.FAILED
    assert job.message == (
        'The provider "writer" is in the trust zone externalGlobal, which does not permit '
        "sourceCode data; nothing was fetched or generated"
    )
    assert page_server.hits == {}


def test_a_local_provider_may_see_any_class(home, page_server, tmp_path):
    config = host_config(tmp_path, (FAQ,), source_data_class="secretAdjacent", zone="local")
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, f"{page_server.base}/a", "faq")
        worker_for(store, config, home).run(once=True, concurrency=1)
        assert store.job(uid).status is JobStatus.DONE


@pytest.mark.parametrize(
    ("path", "allow", "message"),
    [
        ("/missing?token=s3cret", True, "URL returned HTTP 404: {base}/missing"),
        (
            "/page?token=s3cret",
            False,
            "URL host resolves to an address that is not public (loopback): {base}/page",
        ),
    ],
)
def test_a_fetch_failure_fails_the_job_naming_the_redacted_url(
    home, page_server, tmp_path, path, allow, message
):
    config = host_config(tmp_path, (FAQ,), allow_hosts=["127.0.0.1"] if allow else [])
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, page_server.base + path, "faq")
        worker_for(store, config, home).run(once=True, concurrency=1)
        job = store.job(uid)
    assert job.status is JobStatus.FAILED
    assert job.message == message.format(base=page_server.base)
    assert "s3cret" not in job.message


def test_a_pdf_source_is_read_with_its_text(home, tmp_path, monkeypatch):
    from fpdf import FPDF

    from nrllm_core.net import FetchResult
    from nrllm_repurpose import _ingest

    document = FPDF()
    document.add_page()
    document.set_font("helvetica", size=12)
    document.cell(text="Tides follow the moon.")
    body = bytes(document.output())
    seen: dict[str, Any] = {}

    def fake_fetch(url: str, **kwargs: Any) -> FetchResult:
        seen.update(kwargs)
        return FetchResult(url=url, status=200, content_type="application/pdf", body=body)

    monkeypatch.setattr(_ingest, "fetch_public", fake_fetch)
    assert _ingest.ingest("https://example.com/d.pdf", "pdf_url") == "Tides follow the moon."
    assert (seen["max_bytes"], seen["timeout"]) == (50 * 1024 * 1024, 120.0)
    assert seen["accept"] == "application/pdf"

    def damaged(url: str, **kwargs: Any) -> FetchResult:
        return FetchResult(url=url, status=200, content_type=None, body=b"not a pdf at all")

    monkeypatch.setattr(_ingest, "fetch_public", damaged)
    with pytest.raises(_ingest.IngestionFailed) as refused:
        _ingest.ingest("https://example.com/d.pdf?k=1", "pdf_url")
    assert str(refused.value) == (
        "PDF could not be parsed (possibly encrypted or damaged): https://example.com/d.pdf"
    )


def test_when_every_format_fails_the_job_fails(home, page_server, tmp_path):
    config = host_config(tmp_path, ("", "no diagram here"))
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, f"{page_server.base}/a", "faq", "schaubild")
        worker_for(store, config, home).run(once=True, concurrency=1)
        job = store.job(uid)
        errors = [a.error for a in store.artifacts(uid)]
    assert (job.status, job.message) == (
        JobStatus.FAILED,
        "All 2 formats failed; each artifact shows its error",
    )
    assert errors == [
        "The provider returned an empty answer",
        "The provider's answer holds no Mermaid diagram",
    ]


def test_a_crash_stores_a_fixed_message_and_logs_the_details(
    home, page_server, tmp_path, monkeypatch
):
    from structlog.testing import capture_logs

    def explode(text: str) -> str:
        raise RuntimeError("password=hunter2")

    monkeypatch.setattr(_worker, "_prepare", explode)
    config = host_config(tmp_path, (FAQ,))
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, f"{page_server.base}/a", "faq")
        with capture_logs() as logs:
            worker_for(store, config, home).run(once=True, concurrency=1)
        job = store.job(uid)
    assert (job.status, job.message) == (JobStatus.FAILED, CRASHED)
    assert any(entry["event"] == "nrllm.repurpose.job_crashed" for entry in logs)


class Speech:
    suffix = ".wav"

    def synthesize(self, script: str) -> bytes:
        return b"RIFF" + script.encode()


class SpeechPlugin:
    @hookimpl(optionalhook=True)
    def nrllm_repurpose_generators(self, registry: GeneratorRegistry) -> None:
        registry.register_speech("voice", Speech())


def test_a_configured_speech_synthesizer_makes_the_podcast_audio(home, page_server, tmp_path):
    config = host_config(tmp_path, (SCRIPT,), speech_provider="voice")
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, f"{page_server.base}/a", "podcast")
        worker_for(store, config, home, SpeechPlugin()).run(once=True, concurrency=1)
        (artifact,) = store.artifacts(uid)
        assert store.job(uid).status is JobStatus.DONE
    assert Path(artifact.file_path).read_bytes() == b"RIFF" + (SCRIPT + "\n").encode()


def test_a_format_two_plugins_register_is_withheld_from_both():
    class Extra:
        @hookimpl(optionalhook=True)
        def nrllm_repurpose_generators(self, registry: GeneratorRegistry) -> None:
            registry.register(Generator(format="faq", instruction="Other FAQ."))
            registry.register(Generator(format="poem", instruction="Write a poem."))

    pm = make_plugin_manager(plugins=[nrllm_repurpose, Extra()], load_entry_points=False)
    registry = build_registry(pm)
    assert "faq" not in registry.generators
    assert registry.generators["poem"].instruction == "Write a poem."
    assert "handout" in registry.generators
    # Building twice reuses the specification added the first time.
    assert set(build_registry(pm).generators) == set(registry.generators)


def test_a_worker_without_usable_settings_claims_nothing(home, tmp_path):
    config = load_config(data={"repurpose": {"store_url": "sqlite:///elsewhere.db"}})
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, "https://example.com/", "faq")
        assert worker_for(store, config, home).run(once=True, concurrency=2) == 0
        assert store.job(uid).status is JobStatus.QUEUED


def test_a_long_running_worker_stops_when_asked(home, page_server, tmp_path):
    config = host_config(tmp_path, (FAQ,), poll_seconds=0.05)
    stop = threading.Event()
    with JobStore.open(None, data_dir=home) as store:
        uid = queue(store, f"{page_server.base}/a", "faq")
        runner = worker_for(store, config, home)
        thread = threading.Thread(target=lambda: runner.run(once=False, concurrency=1, stop=stop))
        thread.start()
        for _ in range(200):
            if store.job(uid).status is JobStatus.DONE:
                break
            stop.wait(0.05)
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert store.job(uid).status is JobStatus.DONE

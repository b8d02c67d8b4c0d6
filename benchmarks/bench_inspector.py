"""The inspector's runs API over 10,000 stored runs: a filtered page, on SQLite and PostgreSQL.

The runs are written straight through the store (start, a model step, one to three tool
steps, the end), each at its own time over the last 30 days: 6 actors, 4 providers, three
kinds, one run in ten failed, one in a hundred calling a rare tool. Each query is a GET of
``/api/runs`` through the inspector's ASGI app, in process: parsing and checking the query, the
store's query on its indexes, the JSON of a page of 50. Figures are medians of 30 requests,
beside the targets (150 ms on SQLite, 200 ms on PostgreSQL, for every query). PostgreSQL is
measured when ``NRLLM_TEST_POSTGRES_URL`` is set, in a scratch schema dropped afterwards.

    python benchmarks/bench_inspector.py
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from nrllm_core._host import Host
from nrllm_core._payloads import AuditRecord, StepKind
from nrllm_core.inspector import create_app
from nrllm_core.store import RunKind, RunStatus, Store
from nrllm_core.testing import postgres_schema

RUNS: Final = 10_000
REPEATS: Final = 30
TARGETS_MS: Final = {"sqlite": 150.0, "postgresql": 200.0}
TOKEN: Final = "bench-token"
ACTORS: Final = ("ana", "bo", "chen", "dee", "eli", "fay")
PROVIDERS: Final = ("openai", "anthropic", "ollama", "bedrock")
TOOLS: Final = ("search", "fetch", "read_records", "write_note", "send_mail")
START: Final = datetime(2026, 11, 1, tzinfo=UTC)


def seed(store_at: Any) -> None:
    """``RUNS`` runs through the store's writes, the clock set to each run's own times."""
    now = [START]
    store = store_at(lambda: now[0])
    try:
        for n in range(RUNS):
            run_id = f"run-{n:05d}"
            now[0] = START + timedelta(seconds=n * 259)  # 30 days over 10,000 runs
            kind = (RunKind.RUN, RunKind.RUN, RunKind.INVOKE, RunKind.MCP)[n % 4]
            store.start_run(
                run_id,
                kind=kind,
                provider=PROVIDERS[n % len(PROVIDERS)],
                actor=ACTORS[n % len(ACTORS)],
            )
            tools = [TOOLS[(n + i) % len(TOOLS)] for i in range(1 + n % 3)]
            if n % 100 == 7:
                tools.append("rare_tool")
            steps: list[tuple[StepKind, dict[str, object]]] = [
                (StepKind.LLM, {"prompt_tokens": 900, "completion_tokens": 80})
            ]
            steps += [(StepKind.TOOL, {"tool_name": t, "tool_is_error": False}) for t in tools]
            for sequence, (step_kind, fields) in enumerate(steps, start=1):
                store.record_step(
                    AuditRecord(
                        run_id=run_id,
                        sequence=sequence,
                        kind=step_kind,
                        round=1,
                        duration_ms=12.5,
                        payload={"kind": step_kind.value, "round": 1, **fields},
                    ),
                    # As a run writes the steps that guard nothing: with its next write.
                    deferred=sequence < len(steps),
                )
            now[0] += timedelta(seconds=20)
            store.finish_run(run_id, RunStatus.FAILED if n % 10 == 3 else RunStatus.COMPLETED)
    finally:
        store.close()


QUERIES: Final = {
    "newest page": "",
    "status=failed": "status=failed",
    "actor": "actor=chen",
    "provider+kind": "provider=ollama&kind=invoke",
    "tool (1 run in 4)": "tool=send_mail",
    "rare tool (1 in 100)": "tool=rare_tool",
    "time range (a week)": "after=2026-11-10T00:00:00Z&before=2026-11-17T00:00:00Z",
    "actor+status+tool": "actor=ana&status=completed&tool=search",
}


def measure(host: Host) -> dict[str, float]:
    from starlette.testclient import TestClient

    figures: dict[str, float] = {}
    with TestClient(create_app(host, token=TOKEN), base_url="http://127.0.0.1") as client:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        for name, query in QUERIES.items():
            figures[name] = _median_ms(client, f"/api/runs?limit=50&{query}")
        # Page 40 of the newest: the cursor of the page before, as the page's "Next" sends it.
        url = "/api/runs?limit=50"
        for _ in range(39):
            cursor = client.get(url).json()["next"]
            url = f"/api/runs?limit=50&cursor={cursor}"
        figures["page 40 by cursor"] = _median_ms(client, url)
    return figures


def _median_ms(client: Any, url: str) -> float:
    first = client.get(url)
    assert first.status_code == 200, first.text
    assert first.json()["runs"], url
    times = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        response = client.get(url)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return statistics.median(times)


def host_on(folder: Path, url: str | None) -> Host:
    store = f'[store]\nurl = "{url}"\n' if url else ""
    config = folder / "nrllm.toml"
    config.write_text(f'[actor]\nid = "bench"\n{store}', encoding="utf-8")
    return Host.from_config(config, load_entry_points=False, data_dir=folder / "data", environ={})


def analyze(url: str) -> None:
    """PostgreSQL's statistics, as autovacuum gathers them within a minute of a bulk load.

    Read before, on tables that were empty a moment ago, the planner takes every filter to keep
    one row: "actor+status+tool" then probes the tool's steps once per run of the actor and
    takes about a second (967 ms measured); analysed, a hash join, about 1 ms.
    """
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("ANALYZE runs"))
            connection.execute(text("ANALYZE run_steps"))
    finally:
        engine.dispose()


def report(backend: str, folder: Path, url: str | None) -> bool:
    started = time.perf_counter()
    seed(lambda clock: Store.open(url, data_dir=folder / "data", environ={}, clock=clock))
    print(f"  {backend}: {RUNS} runs stored in {time.perf_counter() - started:.1f} s")
    if url is not None:
        analyze(url)
    host = host_on(folder, url)
    try:
        figures = measure(host)
    finally:
        host.store.close()
    target = TARGETS_MS[backend]
    met = True
    for name, ms in figures.items():
        ok = ms <= target
        met &= ok
        verdict = "met" if ok else "MISSED"
        print(f"  {backend:<10}  {name:<22} {ms:7.1f} ms  (target {target:.0f}: {verdict})")
    return met


def main() -> int:
    print(f"runs API, a page of 50 of {RUNS} stored runs, median of {REPEATS} requests")
    met = True
    with tempfile.TemporaryDirectory() as directory:
        met &= report("sqlite", Path(directory), None)
    base = os.environ.get("NRLLM_TEST_POSTGRES_URL")
    if not base:
        print("  postgresql  skipped: set NRLLM_TEST_POSTGRES_URL to measure it")
    else:
        with tempfile.TemporaryDirectory() as directory, postgres_schema("nrllm_bench") as url:
            met &= report("postgresql", Path(directory), url)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())

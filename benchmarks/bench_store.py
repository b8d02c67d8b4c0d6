"""Persisted audit steps per second, at each privacy level, on SQLite and PostgreSQL.

Each step is a tool step with a small table artifact, recorded through a ``RunRecorder`` whose
audit view is the privacy filter and whose only audit sink is the store: filter, encode, chain,
insert and commit, one transaction per step, as a run does it. Then ``Store.verify`` checks
every chain written, in steps checked per second. Every figure is the median of several
repeats. PostgreSQL is measured when ``NRLLM_TEST_POSTGRES_URL`` is set, in a scratch schema
that is dropped afterwards.

    python benchmarks/bench_store.py
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from nrllm_core import RunRecorder, RunStep, StepKind, ToolArtifact, make_plugin_manager
from nrllm_core._privacy import PrivacyLevel, audit_view_for
from nrllm_core.store import Store, StoreAuditSink

STEPS: Final = 1_000
REPEATS: Final = 5
TARGET_METADATA_SQLITE: Final = 2_000


def step(n: int) -> RunStep:
    table = ToolArtifact.table(
        ["uid", "title", "owner"],
        [[str(i), f"Page {i}", f"editor{i}@example.org"] for i in range(5)],
        label="pages",
    )
    return RunStep(
        kind=StepKind.TOOL,
        round=1,
        duration_ms=1.25,
        fields={
            "tool_call_id": f"call-{n}",
            "tool_name": "read_records",
            "tool_arguments": {"table": "pages", "limit": 5},
            "tool_result": "5 rows of pages: uid, title, owner",
            "tool_is_error": False,
        },
        tool_artifacts=(table,),
    )


def verified_per_second(store: Store) -> float:
    """Steps whose chain ``verify`` checks per second, over every run the store holds."""
    steps = sum(run.steps for run in store.list_runs())
    rates = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        if store.verify().broken:
            raise RuntimeError("a chain does not hold")
        rates.append(steps / (time.perf_counter() - started))
    return statistics.median(rates)


def steps_per_second(store: Store, level: PrivacyLevel) -> float:
    pm = make_plugin_manager(plugins=[StoreAuditSink(store)], load_entry_points=False)
    steps = [step(n) for n in range(STEPS)]
    rates = []
    for _ in range(REPEATS):
        run_id = uuid.uuid4().hex
        store.start_run(run_id)
        recorder = RunRecorder(pm, run_id, audit_view=audit_view_for(level))
        started = time.perf_counter()
        for item in steps:
            if not recorder.record(item):
                raise RuntimeError("a step was not persisted")
        rates.append(STEPS / (time.perf_counter() - started))
    return statistics.median(rates)


@contextmanager
def sqlite_store() -> Iterator[Store]:
    with tempfile.TemporaryDirectory() as directory:
        store = Store.open(None, data_dir=Path(directory))
        try:
            yield store
        finally:
            store.close()


@contextmanager
def postgres_store(base: str) -> Iterator[Store]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"nrllm_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(make_url(base).set(drivername="postgresql+psycopg"))
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    store = Store.open(url.render_as_string(hide_password=False))
    try:
        yield store
    finally:
        store.close()
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()


def main() -> None:
    print(f"persisted steps/s: {STEPS} tool steps with a 5x3 table, median of {REPEATS}")
    with sqlite_store() as store:
        for level in PrivacyLevel:
            rate = steps_per_second(store, level)
            note = ""
            if level is PrivacyLevel.METADATA:
                met = "met" if rate >= TARGET_METADATA_SQLITE else "MISSED"
                note = f"  (target {TARGET_METADATA_SQLITE}: {met})"
            print(f"  sqlite      {level.value:<9} {rate:8.0f}{note}")
        print(f"  sqlite      verify    {verified_per_second(store):8.0f}  (steps checked/s)")
    base = os.environ.get("NRLLM_TEST_POSTGRES_URL")
    if not base:
        print("  postgresql  skipped: set NRLLM_TEST_POSTGRES_URL to measure it")
        return
    with postgres_store(base) as store:
        for level in PrivacyLevel:
            print(f"  postgresql  {level.value:<9} {steps_per_second(store, level):8.0f}")
        print(f"  postgresql  verify    {verified_per_second(store):8.0f}  (steps checked/s)")


if __name__ == "__main__":
    main()

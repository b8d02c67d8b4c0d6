"""Committed audit steps per second, ``AsyncStore`` beside ``Store``, in one process.

Two workloads, each on one database: one run recording its steps one after another (each step
chained, inserted and committed before the next), and 100 runs recording at once, as tasks of
one event loop for ``AsyncStore`` and as a pool of threads for ``Store``. Every figure is the
median of several rounds. SQLite always; PostgreSQL when ``NRLLM_TEST_POSTGRES_URL`` is set,
in a scratch schema that is dropped afterwards.

    python benchmarks/bench_async_store.py
"""

from __future__ import annotations

import functools
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import anyio

from nrllm_core import AuditRecord, StepKind
from nrllm_core.store import AsyncStore, Store

SEQUENTIAL_STEPS: Final = 1_000
RUNS: Final = 100
STEPS_PER_RUN: Final = 10
THREADS: Final = 16
ROUNDS: Final = 5


def record(run_id: str, sequence: int) -> AuditRecord:
    return AuditRecord(
        run_id=run_id,
        sequence=sequence,
        kind=StepKind.TOOL,
        round=1,
        duration_ms=1.25,
        payload={
            "kind": "tool",
            "round": 1,
            "tool_name": "read_records",
            "tool_outcome": "ok",
            "prompt_tokens": 120,
        },
    )


def median_rate(measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(ROUNDS))


def sync_sequential(store: Store) -> float:
    run_id = uuid.uuid4().hex
    store.start_run(run_id)
    started = time.perf_counter()
    for sequence in range(1, SEQUENTIAL_STEPS + 1):
        store.record_step(record(run_id, sequence))
    return SEQUENTIAL_STEPS / (time.perf_counter() - started)


def sync_concurrent(store: Store) -> float:
    def run(run_id: str) -> None:
        store.start_run(run_id)
        for sequence in range(1, STEPS_PER_RUN + 1):
            store.record_step(record(run_id, sequence))

    run_ids = [uuid.uuid4().hex for _ in range(RUNS)]
    started = time.perf_counter()
    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(run, run_ids))
    return RUNS * STEPS_PER_RUN / (time.perf_counter() - started)


async def async_sequential(astore: AsyncStore) -> float:
    run_id = uuid.uuid4().hex
    await astore.start_run(run_id)
    started = time.perf_counter()
    for sequence in range(1, SEQUENTIAL_STEPS + 1):
        await astore.record_step(record(run_id, sequence))
    return SEQUENTIAL_STEPS / (time.perf_counter() - started)


async def async_concurrent(astore: AsyncStore) -> float:
    async def run(run_id: str) -> None:
        await astore.start_run(run_id)
        for sequence in range(1, STEPS_PER_RUN + 1):
            await astore.record_step(record(run_id, sequence))

    started = time.perf_counter()
    async with anyio.create_task_group() as runs:
        for _ in range(RUNS):
            runs.start_soon(run, uuid.uuid4().hex)
    return RUNS * STEPS_PER_RUN / (time.perf_counter() - started)


async def async_rates(store: Store) -> tuple[float, float]:
    astore = AsyncStore.for_store(store)
    try:
        sequential = [await async_sequential(astore) for _ in range(ROUNDS)]
        concurrent = [await async_concurrent(astore) for _ in range(ROUNDS)]
    finally:
        await astore.close()
    return statistics.median(sequential), statistics.median(concurrent)


def databases() -> Iterator[tuple[str, str | None, Path]]:
    with tempfile.TemporaryDirectory() as scratch:
        yield "SQLite", None, Path(scratch)
        if os.environ.get("NRLLM_TEST_POSTGRES_URL"):
            from nrllm_core.testing import postgres_schema

            with postgres_schema("nrllm_bench") as url:
                yield "PostgreSQL", url, Path(scratch)


def main() -> None:
    print(
        f"committed steps per second, medians of {ROUNDS} rounds: one run of "
        f"{SEQUENTIAL_STEPS:,} steps; {RUNS} runs x {STEPS_PER_RUN} steps at once "
        f"(Store: {THREADS} threads, AsyncStore: {RUNS} tasks on one loop)"
    )
    print(f"{'database':<11} {'workload':<18} {'Store':>8} {'AsyncStore':>11} {'async/sync':>11}")
    for name, url, data_dir in databases():
        store = Store.open(url, data_dir=data_dir)
        try:
            sync = (
                median_rate(functools.partial(sync_sequential, store)),
                median_rate(functools.partial(sync_concurrent, store)),
            )
            awaited = anyio.run(async_rates, store)
            if store.verify().broken:
                raise RuntimeError("a chain does not hold")
        finally:
            store.close()
        for workload, sync_rate, async_rate in zip(
            ("one run", f"{RUNS} runs at once"), sync, awaited, strict=True
        ):
            print(
                f"{name:<11} {workload:<18} {sync_rate:>8,.0f} {async_rate:>11,.0f} "
                f"{async_rate / sync_rate:>10.2f}x"
            )


if __name__ == "__main__":
    main()

"""AsyncHost figures, side by side with the sync Host in one process.

1. One persisted one-tool run (gate, a model turn calling an ``async def`` tool, the final
   turn, every step committed) through ``AsyncHost`` on SQLite: median ms per run.
2. 100 runs at once, each calling a tool that waits 20 ms: through ``AsyncHost`` on one event
   loop, and through the sync ``Host`` with a thread per run (what an async application had to
   do before), on SQLite and, when ``NRLLM_TEST_POSTGRES_URL`` is set, on PostgreSQL: runs/s,
   median over the repeats, the two taking turns.

    python benchmarks/bench_async.py [--repeats N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread

from nrllm_core import AsyncHost, DataClass, ToolRegistry, ToolResult, hookimpl, tool
from nrllm_core._host import Host
from nrllm_core._manager import make_plugin_manager

RUNS_AT_ONCE: Final = 100


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def quick(n: int) -> ToolResult:
    """Answer at once."""
    return ToolResult.text(f"done {n}")


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def wait_async(n: int) -> ToolResult:
    """Wait 20 ms on the event loop."""
    await anyio.sleep(0.02)
    return ToolResult.text(f"done {n}")


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
def wait_sync(n: int) -> ToolResult:
    """Wait 20 ms (blocking)."""
    time.sleep(0.02)
    return ToolResult.text(f"done {n}")


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        for t in (quick, wait_async, wait_sync):
            registry.register(t)


def make_host(folder: Path, name: str, tool_name: str, url: str | None) -> Host:
    # The scripted model answers by the run's own turn: every run plays these two turns.
    turn = {"tool_calls": [{"name": tool_name, "arguments": {"n": 1}}]}
    script = folder / f"{name}.json"
    script.write_text(json.dumps({"turns": [turn, {"content": "done"}]}))
    store = {"url": url} if url else {}
    return Host.from_config(
        data={
            "providers": {"m": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "m"},
            "store": store,
        },
        pm=make_plugin_manager(plugins=[Tools()], load_entry_points=False),
        data_dir=folder / name,
    )


def one_run_ms(folder: Path, repeats: int) -> float:
    runs = 200
    host = make_host(folder, "one", "quick", None)
    async_host = AsyncHost(host)
    times = []

    async def measure() -> None:
        for _ in range(20):
            await async_host.run("go")
        for _ in range(repeats):
            started = time.perf_counter()
            for _ in range(runs):
                await async_host.run("go")
            times.append((time.perf_counter() - started) / runs * 1000)

    try:
        anyio.run(measure)
    finally:
        host.store.close()
    return statistics.median(times)


def at_once(folder: Path, backend: str, url: str | None, repeats: int) -> tuple[float, float]:
    """(AsyncHost runs/s, thread-per-run Host runs/s) for 100 runs at once."""
    async_host = AsyncHost(make_host(folder, f"{backend}-async", "wait_async", url))
    sync_host = make_host(folder, f"{backend}-sync", "wait_sync", url)
    async_rates, thread_rates = [], []

    async def async_batch() -> float:
        started = time.perf_counter()
        async with anyio.create_task_group() as group:
            for _ in range(RUNS_AT_ONCE):
                group.start_soon(async_host.run, "go")
        return RUNS_AT_ONCE / (time.perf_counter() - started)

    def thread_batch() -> float:
        threads = [
            threading.Thread(target=sync_host.run, args=("go",)) for _ in range(RUNS_AT_ONCE)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return RUNS_AT_ONCE / (time.perf_counter() - started)

    try:
        anyio.run(async_batch)  # warm up both
        thread_batch()
        for _ in range(repeats):
            async_rates.append(anyio.run(async_batch))
            thread_rates.append(thread_batch())
    finally:
        async_host.host.store.close()
        sync_host.store.close()
    return statistics.median(async_rates), statistics.median(thread_rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    repeats = parser.parse_args().repeats
    backends: dict[str, str | None] = {"sqlite": None}
    if os.environ.get("NRLLM_TEST_POSTGRES_URL"):
        backends["postgresql"] = os.environ["NRLLM_TEST_POSTGRES_URL"]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        one = one_run_ms(folder, repeats)
        print(f"one persisted one-tool run through AsyncHost on SQLite: {one:.2f} ms per run")
        for backend, url in backends.items():
            if url is not None:
                from nrllm_core.testing import postgres_schema

                with postgres_schema("bench_async") as schema_url:
                    rates = at_once(folder, backend, schema_url, repeats)
            else:
                rates = at_once(folder, backend, url, repeats)
            print(
                f"{RUNS_AT_ONCE} runs at once with a 20 ms tool on {backend}: "
                f"AsyncHost {rates[0]:.0f} runs/s, a thread per run {rates[1]:.0f} runs/s"
            )


if __name__ == "__main__":
    main()

"""Runs per second on one PostgreSQL store: one process beside two.

Each worker process drives ``AsyncHost`` on one event loop, 100 runs at once (one call of a tool
that waits 20 ms, then the answer, every step persisted at ``metadata``), for a fixed time from
a start instant shared by all workers, and prints how many runs it completed. The store and the
data folder (its keys) are shared, as when a team runs nrllm in several processes. Rounds of one
worker and of two workers alternate; the figure is the median ratio of two workers' runs/s to
one's. It needs ``NRLLM_TEST_POSTGRES_URL`` and a quiet machine with at least two cores.

    python benchmarks/bench_processes.py [--rounds N] [--seconds S]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

import anyio

from nrllm_core import AsyncHost, DataClass, RunStatus, ToolRegistry, ToolResult, hookimpl, tool
from nrllm_core._host import Host
from nrllm_core._manager import make_plugin_manager

RUNS_AT_ONCE: Final = 100
TARGET: Final = 1.6
START_DELAY: Final = 3.0


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def wait(term: str) -> ToolResult:
    """Look a term up, waiting 20 ms on the event loop."""
    await anyio.sleep(0.02)
    return ToolResult.text(f"{term}: found")


class _Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(wait)


def _host(folder: Path, url: str) -> Host:
    script = folder / "script.json"
    return Host.from_config(
        data={
            "providers": {"model": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "model"},
            "actor": {"id": "bench"},
            "privacy": {"level": "metadata"},
            "store": {"url": url},
        },
        pm=make_plugin_manager(plugins=[_Tools()], load_entry_points=False),
        data_dir=folder / "home",
        environ={},
    )


def worker(folder: Path, url: str, start: float, seconds: float) -> None:
    """Run batches of runs at once from ``start`` until ``seconds`` have passed; print the
    number of runs completed by then and the time they took."""
    ahost = AsyncHost(_host(folder, url))
    done = 0

    async def one() -> None:
        nonlocal done
        outcome = await ahost.run("look up pluggy")
        if outcome.status is not RunStatus.COMPLETED:
            raise RuntimeError(f"a run did not complete: {outcome.error}")
        done += 1

    async def drive() -> float:
        await anyio.sleep(max(0.0, start - time.time()))
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            async with anyio.create_task_group() as group:
                for _ in range(RUNS_AT_ONCE):
                    group.start_soon(one)
        return time.perf_counter() - began

    try:
        elapsed = anyio.run(drive)
    finally:
        ahost.host.store.close()
    print(json.dumps({"runs": done, "seconds": elapsed}))


def _round(folder: Path, url: str, processes: int, seconds: float) -> float:
    """Runs per second of ``processes`` workers started together."""
    start = time.time() + START_DELAY
    command = [sys.executable, __file__, "--worker", str(folder), url, str(start), str(seconds)]
    children = [
        subprocess.Popen(command, stdout=subprocess.PIPE, text=True) for _ in range(processes)
    ]
    total = 0.0
    for child in children:
        out, _ = child.communicate()
        sys.stdout.write("".join(out.splitlines(keepends=True)[:-1]))
        if child.returncode != 0:
            raise RuntimeError(f"a worker failed with exit status {child.returncode}")
        # The result is the worker's last line: a structlog event may come before it.
        figures = json.loads(out.splitlines()[-1])
        total += figures["runs"] / figures["seconds"]
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--worker", nargs=4, metavar=("FOLDER", "URL", "START", "SECONDS"))
    args = parser.parse_args()
    if args.worker:
        folder, url, start, seconds = args.worker
        worker(Path(folder), url, float(start), float(seconds))
        return
    base = os.environ.get("NRLLM_TEST_POSTGRES_URL")
    if not base:
        print("two processes on PostgreSQL: set NRLLM_TEST_POSTGRES_URL to measure it")
        return
    from nrllm_core.testing import postgres_schema

    with tempfile.TemporaryDirectory() as directory, postgres_schema("bench_processes") as url:
        folder = Path(directory)
        (folder / "script.json").write_text(
            json.dumps(
                {
                    "turns": [
                        {"tool_calls": [{"name": "wait", "arguments": {"term": "pluggy"}}]},
                        {"content": "pluggy: found"},
                    ]
                }
            ),
            encoding="utf-8",
        )
        # One host first, so the schema and the keys exist before workers race to make them.
        _host(folder, url).store.close()
        ratios = []
        one_rates, two_rates = [], []
        for turn in range(args.rounds):
            sizes = (1, 2) if turn % 2 == 0 else (2, 1)
            rates = {size: _round(folder, url, size, args.seconds) for size in sizes}
            one_rates.append(rates[1])
            two_rates.append(rates[2])
            ratios.append(rates[2] / rates[1])
    ratio = statistics.median(ratios)
    print(
        f"{RUNS_AT_ONCE} runs at once per process on one PostgreSQL store, "
        f"{args.seconds:.0f} s rounds, median of {args.rounds}:"
    )
    print(f"  one process:   {statistics.median(one_rates):7.1f} runs/s")
    print(f"  two processes: {statistics.median(two_rates):7.1f} runs/s")
    verdict = "met" if ratio >= TARGET else "MISSED"
    print(f"  two / one: {ratio:.2f}x (target >= {TARGET}x on a quiet machine: {verdict})")


if __name__ == "__main__":
    main()

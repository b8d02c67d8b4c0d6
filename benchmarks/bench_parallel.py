"""One model turn with 8 calls of a tool that waits 100 ms, side by side in one process.

nrllm through ``Host`` (sync driver) and ``AsyncHost`` (async driver), each with a sync tool
(``time.sleep``) and an ``async def`` tool (``anyio.sleep``), persisted on SQLite; then
pydantic-ai (in the ``bench`` extra) with the same turn from a ``FunctionModel``. The figure
is the median wall time per turn (the whole run: gate, both model turns, 8 calls, every step
committed) over the repeats, the frameworks taking turns repeat by repeat.

    python benchmarks/bench_parallel.py [--repeats N]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.to_thread

from nrllm_core import AsyncHost, DataClass, ToolRegistry, ToolResult, hookimpl, tool
from nrllm_core._host import Host
from nrllm_core._manager import make_plugin_manager

CALLS: Final = 8
WAIT: Final = 0.1


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
def wait_sync(n: int) -> ToolResult:
    """Wait 100 ms (blocking)."""
    time.sleep(WAIT)
    return ToolResult.text(f"done {n}")


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def wait_async(n: int) -> ToolResult:
    """Wait 100 ms (on the event loop)."""
    await anyio.sleep(WAIT)
    return ToolResult.text(f"done {n}")


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(wait_sync)
        registry.register(wait_async)


def _host(folder: Path, tool_name: str, repeats: int) -> Host:
    turn = {
        "tool_calls": [{"name": tool_name, "arguments": {"n": n}} for n in range(CALLS)],
    }
    script = folder / f"{tool_name}.json"
    # The scripted model answers by the run's own turn: every run plays these two turns.
    script.write_text(json.dumps({"turns": [turn, {"content": "all done"}]}))
    return Host.from_config(
        data={
            "providers": {"m": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "m"},
            "store": {"url": f"sqlite:///{folder / (tool_name + '.db')}"},
        },
        pm=make_plugin_manager(plugins=[Tools()], load_entry_points=False),
        data_dir=folder,
    )


def _pydantic_ai(asynchronous: bool) -> Callable[[], Any]:
    from pydantic_ai import Agent, ModelMessage, ModelResponse, TextPart, Tool, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[ToolCallPart("wait", {"n": n}, tool_call_id=f"c{n}") for n in range(CALLS)]
            )
        return ModelResponse(parts=[TextPart("all done")])

    async def wait_async(n: int) -> str:
        await anyio.sleep(WAIT)
        return f"done {n}"

    def wait_sync(n: int) -> str:
        time.sleep(WAIT)
        return f"done {n}"

    wait = Tool(wait_async if asynchronous else wait_sync, takes_ctx=False, name="wait")
    agent = Agent(FunctionModel(model), tools=[wait])
    return lambda: agent.run("go")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=9)
    repeats = parser.parse_args().repeats
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        hosts = {name: _host(folder, name, repeats) for name in ("wait_sync", "wait_async")}
        cases: dict[str, Callable[[], Any]] = {}
        for name, host in hosts.items():
            kind = "sync tool" if name == "wait_sync" else "async tool"
            # The sync host from a worker thread, as an async application would call it.
            cases[f"nrllm Host, {kind}"] = functools.partial(
                anyio.to_thread.run_sync, host.run, "go"
            )
            cases[f"nrllm AsyncHost, {kind}"] = functools.partial(AsyncHost(host).run, "go")
        try:
            cases["pydantic-ai, sync tool"] = _pydantic_ai(asynchronous=False)
            cases["pydantic-ai, async tool"] = _pydantic_ai(asynchronous=True)
        except ImportError:
            print("pydantic-ai is not installed (pip install -e '.[bench]'): nrllm only")
        times: dict[str, list[float]] = {name: [] for name in cases}

        async def measure() -> None:
            for _ in range(repeats):
                for name, case in cases.items():
                    started = time.perf_counter()
                    await case()
                    times[name].append((time.perf_counter() - started) * 1000)

        anyio.run(measure)
        for host in hosts.values():
            host.store.close()
    print(f"{CALLS} calls of a {WAIT * 1000:.0f} ms tool in one turn, median of {repeats}:")
    for name, values in times.items():
        print(f"  {name:<28} {statistics.median(values):7.1f} ms per turn")
    print("bench_peers.py measures the AsyncHost figure against pydantic-ai's as a ratio")


if __name__ == "__main__":
    main()

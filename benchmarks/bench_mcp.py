"""MCP servers under nrllm: how long their tools take to be had, and what a call costs.

Five stdio servers written with the SDK's ``MCPServer`` (mcp 1's FastMCP), each sleeping
before it serves (0.2 s to 1.0 s, one delay per server). Printed, as wall-clock medians
(the servers wait, so CPU time would not show what a user waits for):

- the slowest server's own start: its process started and listed by a bare SDK
  ``ClientSession``, alone;
- the five started at once through bare SDK sessions (an anyio task group): the floor on a
  machine whose cores the five interpreters' starts share;
- the catalog build (what ``nrllm tools`` waits for) of all five, and a first ``invoke`` on
  a fresh plugin manager (the build and the call), each as a multiple of that start
  (target: at most 1.3 times);
- one call through a kept session (``invoke``: the seam, the argument check, the result
  shaping) beside the same call through a bare SDK ``ClientSession.call_tool``;
- the first call after the session was closed as idle (``idle_seconds``), beside the
  server's own start.

    python benchmarks/bench_mcp.py [--repeats N] [--calls N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import anyio

DELAYS: Final = (0.2, 0.4, 0.6, 0.8, 1.0)

SERVER: Final = '''
import sys
import time

time.sleep(float(sys.argv[1]))

from mcp.server.mcpserver import MCPServer

server = MCPServer("bench")


@server.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return text


server.run()
'''


def _server_args(script: Path, delay: float) -> list[str]:
    return [str(script), str(delay)]


async def _own_start(script: Path, delay: float) -> float:
    """One server's start, alone: its process, the handshake and the tool list."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=_server_args(script, delay))
    began = time.perf_counter()
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        took = time.perf_counter() - began
    return took


async def _all_at_once(script: Path) -> float:
    """Every server started at once through bare SDK sessions: the floor on this machine,
    where the interpreters' starts share its cores."""
    began = time.perf_counter()
    async with anyio.create_task_group() as group:
        for delay in DELAYS:
            group.start_soon(_own_start, script, delay)
    return time.perf_counter() - began


async def _direct_calls(script: Path, calls: int) -> float:
    """The median of ``calls`` calls through one open bare SDK session."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=_server_args(script, 0.0))
    times = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(calls):
            began = time.perf_counter()
            await session.call_tool("echo", {"text": "hi"})
            times.append(time.perf_counter() - began)
    return statistics.median(times)


def _configure(folder: Path, script: Path, delays: tuple[float, ...], **extra: Any) -> None:
    lines = []
    for n, delay in enumerate(delays):
        lines.append(f"[mcp.servers.s{n}]")
        lines.append(f"command = {json.dumps(sys.executable)}")
        lines.append(f"args = {json.dumps(_server_args(script, delay))}")
        lines.append('read_only_tools = ["echo"]')
        lines += [f"{key} = {json.dumps(value)}" for key, value in extra.items()]
    path = folder / "nrllm.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.environ["NRLLM_CONFIG"] = str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--calls", type=int, default=200)
    options = parser.parse_args()

    from nrllm_core import Actor, ToolContext, invoke, make_plugin_manager
    from nrllm_mcp._client import close_all

    context = ToolContext(run_id="r", call_id="c", actor=Actor(id="bench"))
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        script = folder / "server.py"
        script.write_text(SERVER, encoding="utf-8")
        (folder / "home").mkdir()
        os.environ["NRLLM_HOME"] = str(folder / "home")
        os.environ["NRLLM_LOAD_PLUGINS"] = "mcp"
        _configure(folder, script, DELAYS)
        # Pinned on first use and the pin store migrated: not part of any figure.
        make_plugin_manager().catalog()
        close_all()

        slowest = max(DELAYS)

        def build() -> float:
            pm = make_plugin_manager()
            began = time.perf_counter()
            tools = pm.catalog().tools
            took = time.perf_counter() - began
            assert len([n for n in tools if n.endswith("__echo")]) == len(DELAYS)
            close_all()
            return took

        def first_invoke() -> float:
            pm = make_plugin_manager()
            began = time.perf_counter()
            answer = invoke(pm, "s4__echo", {"text": "hi"}, context=context)
            took = time.perf_counter() - began
            assert answer.content == "hi"
            close_all()
            return took

        # The cases take turns, repeat by repeat: the machine's load moves them alike.
        rounds: dict[str, list[float]] = {"own": [], "floor": [], "built": [], "first": []}
        for _ in range(options.repeats):
            rounds["own"].append(anyio.run(_own_start, script, slowest))
            rounds["floor"].append(anyio.run(_all_at_once, script))
            rounds["built"].append(build())
            rounds["first"].append(first_invoke())
        own, floor, built, first = (statistics.median(rounds[k]) for k in rounds)

        _configure(folder, script, (0.0,))
        pm = make_plugin_manager()
        invoke(pm, "s0__echo", {"text": "hi"}, context=context)
        times = []
        for _ in range(options.calls):
            began = time.perf_counter()
            invoke(pm, "s0__echo", {"text": "hi"}, context=context)
            times.append(time.perf_counter() - began)
        kept = statistics.median(times)
        close_all()
        direct = anyio.run(_direct_calls, script, options.calls)

        _configure(folder, script, (0.0,), idle_seconds=0.5)
        idle_pm = make_plugin_manager()
        invoke(idle_pm, "s0__echo", {"text": "hi"}, context=context)
        starts, reopens = [], []
        for _ in range(options.repeats):
            starts.append(anyio.run(_own_start, script, 0.0))
            # The session is closed as idle, then the next call opens it again.
            time.sleep(1.5)
            began = time.perf_counter()
            answer = invoke(idle_pm, "s0__echo", {"text": "hi"}, context=context)
            reopens.append(time.perf_counter() - began)
            assert answer.content == "hi"
        zero_start, reopened = statistics.median(starts), statistics.median(reopens)
        close_all()

    print(f"servers: {len(DELAYS)}, start delays {', '.join(f'{d:g}' for d in DELAYS)} s")
    print(f"slowest server's own start (bare SDK session, listed): {own * 1000:.0f} ms")
    print(f"all five at once, bare SDK sessions: {floor * 1000:.0f} ms ({floor / own:.2f}x)")
    print(f"catalog build, all five: {built * 1000:.0f} ms ({built / own:.2f}x; target <= 1.3x)")
    print(
        f"first invoke, fresh manager: {first * 1000:.0f} ms ({first / own:.2f}x; target <= 1.3x)"
    )
    print(f"one call, kept session (invoke): {kept * 1000:.2f} ms")
    print(f"one call, bare SDK ClientSession.call_tool: {direct * 1000:.2f} ms")
    print(f"first call after the idle close: {reopened * 1000:.0f} ms")
    print(f"  the same server's own start (no delay): {zero_start * 1000:.0f} ms")


if __name__ == "__main__":
    main()

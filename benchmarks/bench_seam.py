"""Figures for the invoke seam, measured in one process; run with ``make bench``.

Every figure is the median of several repeats, so one slow repeat (a GC pause, another process
on the machine) does not move it.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from typing import Any, Final

import nrllm_core
from nrllm_core import (
    Actor,
    AuditRecord,
    ToolArtifact,
    ToolContext,
    ToolResult,
    TraceEvent,
    WirePayload,
    hookimpl,
)
from nrllm_core._json import dumps

REPEATS: Final = 7
IMPORT_RUNS: Final = 7
# Just under the artifact budget, so the table is kept and the full encode is measured.
TABLE_TARGET_BYTES: Final = 49_000
BIG_CONTENT_CHARS: Final = 100_000_000


def echo(text: str) -> ToolResult:
    """Return the text unchanged."""
    return ToolResult.text(text)


class NoOpSinks:
    """One implementation of each sink that does nothing, so only the seam is measured."""

    @hookimpl
    def nrllm_wire(self, payload: WirePayload) -> None:
        pass

    @hookimpl
    def nrllm_trace(self, event: TraceEvent) -> None:
        pass

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        pass


async def aecho(text: str) -> ToolResult:
    """Return the text unchanged, from a coroutine."""
    return ToolResult.text(text)


class EchoPlugin:
    @hookimpl
    def nrllm_register_tools(self, registry: nrllm_core.ToolRegistry) -> None:
        registry.register(nrllm_core.tool(group="content")(echo))
        registry.register(nrllm_core.tool(group="content")(aecho))


def per_call(function: Callable[[], object], number: int) -> float:
    """Median seconds per call over ``REPEATS`` runs of ``number`` calls."""
    runs = timeit.Timer(function).repeat(repeat=REPEATS, number=number)
    return statistics.median(runs) / number


def seam_overhead() -> tuple[float, float]:
    """(seconds per call through ``invoke``, seconds per bare call of the function)."""
    pm = nrllm_core.make_plugin_manager(
        plugins=[EchoPlugin(), NoOpSinks()], load_entry_points=False
    )
    context = ToolContext(run_id="bench", call_id="call_bench", actor=Actor(id="bench"))
    arguments = {"text": "hello"}
    wire = nrllm_core.invoke(pm, "echo", arguments, context=context)
    if wire.is_error or wire.content != "hello":
        raise RuntimeError(f"the seam did not run the tool: {wire.content!r}")
    seam = per_call(lambda: nrllm_core.invoke(pm, "echo", arguments, context=context), 20_000)
    bare = per_call(lambda: echo(**arguments), 200_000)
    return seam, bare


def async_seam_overhead() -> tuple[float, float]:
    """(seconds per ``await ainvoke`` of an ``async def`` tool, per bare ``await`` of it), on
    one event loop."""
    import anyio

    pm = nrllm_core.make_plugin_manager(
        plugins=[EchoPlugin(), NoOpSinks()], load_entry_points=False
    )
    context = ToolContext(run_id="bench", call_id="call_bench", actor=Actor(id="bench"))
    arguments = {"text": "hello"}

    async def seam() -> None:
        await nrllm_core.ainvoke(pm, "aecho", arguments, context=context)

    async def bare() -> None:
        await aecho(**arguments)

    async def median(body: Callable[[], Any], number: int) -> float:
        runs = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            for _ in range(number):
                await body()
            runs.append((time.perf_counter() - started) / number)
        return statistics.median(runs)

    async def both() -> tuple[float, float]:
        wire = await nrllm_core.ainvoke(pm, "aecho", arguments, context=context)
        if wire.is_error or wire.content != "hello":
            raise RuntimeError(f"the async seam did not run the tool: {wire.content!r}")
        return await median(seam, 20_000), await median(bare, 200_000)

    return anyio.run(both)


def table_artifact() -> ToolArtifact:
    """A TABLE artifact whose canonical encoding is just under ``TABLE_TARGET_BYTES``."""
    columns = ["uid", "title", "slug", "updated"]
    rows: list[list[str]] = []
    size = 0
    while True:
        row = [str(len(rows)), f"Page title {len(rows)}", f"/page-{len(rows)}", "2025-01-01"]
        row_size = len(dumps(row)) + 1
        if size + row_size > TABLE_TARGET_BYTES:
            break
        rows.append(row)
        size += row_size
    return ToolArtifact.table(columns, rows, label="Pages")


def table_bounding() -> tuple[int, float, float]:
    """(encoded bytes, seconds for ``bound_artifacts``, seconds for one canonical encode)."""
    artifacts = (table_artifact(),)
    encoded = len(dumps([a.to_dict() for a in artifacts]))
    if nrllm_core.bound_artifacts(artifacts) != artifacts:
        raise RuntimeError("the table was not kept, so its bounding would not be measured")
    bound = per_call(lambda: nrllm_core.bound_artifacts(artifacts), 200)
    encode = per_call(lambda: dumps([a.to_dict() for a in artifacts]), 200)
    return encoded, bound, encode


def big_content() -> float:
    """Seconds for ``bound_content`` of a 100 MB string."""
    text = "x" * BIG_CONTENT_CHARS
    if len(nrllm_core.bound_content(text).encode()) > nrllm_core.CONTENT_MAX_BYTES:
        raise RuntimeError("the content was not bounded")
    return per_call(lambda: nrllm_core.bound_content(text), 20)


def import_time(code: str) -> float:
    """Median wall seconds of ``python -c CODE`` in a fresh interpreter.

    Bytecode is written by a first, untimed run and read by the timed ones, as for an
    installed package, even where ``PYTHONDONTWRITEBYTECODE`` is set (it is on CI machines).
    """
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    times = []
    for _ in range(IMPORT_RUNS):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=env)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def langchain_invoke() -> float | None:
    """Seconds per call of the same trivial tool through langchain-core's ``tool.invoke``."""
    try:
        from langchain_core.tools import tool as langchain_tool
    except ImportError:
        return None

    def text_echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    lc_echo = langchain_tool(text_echo)
    arguments = {"text": "hello"}
    if lc_echo.invoke(arguments) != "hello":
        raise RuntimeError("langchain-core did not run the tool")
    return per_call(lambda: lc_echo.invoke(arguments), 2_000)


def row(figure: str, value: str, target: str, met: bool | None) -> list[str]:
    verdict = {True: "met", False: "MISSED", None: ""}[met]
    return [figure, value, target, verdict]


def main() -> None:
    seam, bare = seam_overhead()
    overhead_us = (seam - bare) * 1e6
    aseam, abare = async_seam_overhead()
    async_us = (aseam - abare) * 1e6
    table_bytes, bound, encode = table_bounding()
    ratio = bound / encode
    content_ms = big_content() * 1e3
    import_core = import_time("import nrllm_core")
    import_empty = import_time("pass")
    langchain = langchain_invoke()

    rows = [
        row("seam: invoke() per call", f"{seam * 1e6:.1f} µs", "", None),
        row("bare call of the tool function", f"{bare * 1e6:.2f} µs", "", None),
        row("seam overhead (difference)", f"{overhead_us:.1f} µs", "", None),
        row("async seam: await ainvoke(), async tool", f"{aseam * 1e6:.1f} µs", "", None),
        row("bare await of the tool coroutine", f"{abare * 1e6:.2f} µs", "", None),
        row("async seam overhead (difference)", f"{async_us:.1f} µs", "", None),
        row(f"bound_artifacts, {table_bytes} B table", f"{bound * 1e6:.1f} µs", "", None),
        row("one canonical encode of it", f"{encode * 1e6:.1f} µs", "", None),
        row("bound_artifacts / encode", f"{ratio:.2f}x", "<= 1.5x", ratio <= 1.5),
        row("bound_content, 100 MB string", f"{content_ms:.3f} ms", "<= 5 ms", content_ms <= 5),
        row("python -c 'import nrllm_core'", f"{import_core * 1e3:.0f} ms", "", None),
        row("python -c 'pass' (baseline)", f"{import_empty * 1e3:.0f} ms", "", None),
        row(
            "langchain-core tool.invoke per call",
            "not installed" if langchain is None else f"{langchain * 1e6:.1f} µs",
            "",
            None,
        ),
    ]
    print(f"Python {sys.version.split()[0]}, medians of {REPEATS} repeats\n")
    print_table(["figure", "median", "target", ""], rows)


def print_table(header: list[str], rows: list[list[str]]) -> None:
    table: list[list[Any]] = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for index, cells in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()

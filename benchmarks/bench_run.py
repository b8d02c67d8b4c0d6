"""One scripted run with one tool call, end to end through ``Host``, persisted on SQLite.

Each run: the gate, a model turn that calls a read-only tool, the tool through the seam, a
final model turn, every step persisted at the ``metadata`` privacy level in the embedded SQLite
store (six committed transactions for its eight steps, as in production). The figure is the
median over repeats of the mean time per run. ``--profile`` prints where the time goes (cProfile).

The same run is then measured with the nrllm-otel plugin on the OpenTelemetry SDK (every span
through a processor to an exporter that drops it, metrics aggregated in memory), the two hosts
taking turns repeat by repeat in this one process, and the difference printed.

    python benchmarks/bench_run.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

from nrllm_core import (
    DataClass,
    RunStatus,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
    tool,
)
from nrllm_core._host import Host
from nrllm_otel import OtelSink

RUNS: Final = 200
REPEATS: Final = 7
# The overhead is a ratio of two noisy medians: many short turns each.
OTEL_TURNS: Final = 60
OTEL_BATCH: Final = 40
WARMUP: Final = 20


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
def lookup(term: str) -> ToolResult:
    """Look a term up."""
    return ToolResult.text(f"{term}: found")


class _Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(lookup)


class _Dropped(SpanExporter):
    """The no-op exporter: the SDK does all its work, the spans go nowhere."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def build_host(folder: Path, *, otel: bool = False) -> Host:
    script = folder / "script.json"
    turns = [
        {"tool_calls": [{"name": "lookup", "arguments": {"term": "pluggy"}}]},
        {"content": "pluggy: found"},
    ]
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    pm = make_plugin_manager(plugins=[_Tools()], load_entry_points=False)
    if otel:
        tracer_provider = TracerProvider()
        tracer_provider.add_span_processor(SimpleSpanProcessor(_Dropped()))
        meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
        pm.register(OtelSink(tracer_provider=tracer_provider, meter_provider=meters), name="otel")
    return Host.from_config(
        data={
            "providers": {"model": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "model"},
            "actor": {"id": "bench"},
            "privacy": {"level": "metadata"},
        },
        pm=pm,
        data_dir=folder / "home",
        environ={},
    )


def run_many(host: Host, count: int) -> None:
    for _ in range(count):
        outcome = host.run("look up pluggy")
        if outcome.status is not RunStatus.COMPLETED:
            raise RuntimeError(f"the run did not complete: {outcome.error}")


def ms_per_run(host: Host) -> tuple[float, list[float]]:
    run_many(host, WARMUP)
    means = []
    for _ in range(REPEATS):
        started = time.perf_counter()
        run_many(host, RUNS)
        means.append((time.perf_counter() - started) * 1000 / RUNS)
    return statistics.median(means), means


def otel_overhead(plain: Host, traced: Host) -> tuple[float, float]:
    """The median ms per run without and with the plugin, the hosts taking turns in short
    batches (which goes first alternating too), so that a drift of the machine's speed falls
    on both alike."""
    run_many(plain, WARMUP)
    run_many(traced, WARMUP)
    without: list[float] = []
    with_otel: list[float] = []
    pairs = ((plain, without), (traced, with_otel))
    for turn in range(OTEL_TURNS):
        for host, means in pairs if turn % 2 == 0 else pairs[::-1]:
            started = time.perf_counter()
            run_many(host, OTEL_BATCH)
            means.append((time.perf_counter() - started) * 1000 / OTEL_BATCH)
    return statistics.median(without), statistics.median(with_otel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="print a cProfile breakdown")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        host = build_host(Path(directory))
        try:
            median, means = ms_per_run(host)
            print(
                f"scripted run, one tool call, persisted (metadata, SQLite): {RUNS} runs x "
                f"{REPEATS} repeats"
            )
            print(f"  per run: median {median:.3f} ms")
            print(f"  repeats: {', '.join(f'{m:.3f}' for m in sorted(means))} ms")
            steps = host.store.get_run(host.runs()[0].run_id)
            print(f"  steps persisted per run: {len(steps.steps) if steps else 0}")
            if args.profile:
                profiler = cProfile.Profile()
                profiler.enable()
                run_many(host, RUNS)
                profiler.disable()
                stats = pstats.Stats(profiler).sort_stats("cumulative")
                stats.print_stats(40)
            # Two new hosts, so neither store holds the runs measured above.
            (Path(directory) / "plain").mkdir()
            (Path(directory) / "otel").mkdir()
            plain = build_host(Path(directory) / "plain")
            traced = build_host(Path(directory) / "otel", otel=True)
            try:
                without, with_otel = otel_overhead(plain, traced)
            finally:
                plain.store.close()
                traced.store.close()
            overhead = with_otel / without - 1
            print("the same run with nrllm-otel (SDK, spans to a no-op exporter), side by side:")
            print(f"  without the plugin: median {without:.3f} ms per run")
            print(f"  with the plugin:    median {with_otel:.3f} ms per run")
            print(f"  overhead: {overhead:+.1%} (bench_peers.py compares it with pydantic-ai's)")
        finally:
            host.store.close()


if __name__ == "__main__":
    main()

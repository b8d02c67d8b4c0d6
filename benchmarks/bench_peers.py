"""nrllm beside the frameworks a user would pick instead, measured in one process.

Every figure is a ratio of two costs measured side by side: the cases take turns batch by batch
(the order reversed every other turn, so a drift of the machine's speed falls on both alike),
and each side's figure is the median of its batches. Costs are CPU time of the whole process
(all threads: ``time.process_time``), except where the figure is a latency (8 calls of a 100 ms
tool: wall time) or an import (the child processes' CPU time).

Each batch pays for collecting its own garbage and no one else's: before it starts, untimed,
the collector runs and what survives is frozen (``gc.freeze``); the batch's time ends after
one more collection, which then walks only what the batch left. Without this a full
collection walks every object of the process, all four frameworks' modules included (about
0.1 s here), and falls on whichever batch happens to trigger it.

The work is the same for each framework: one model turn that calls one tool, then the answer,
from a fake model in the same process. nrllm persists every step of its runs (SQLite at the
``metadata`` privacy level); the peers keep theirs in memory, with their tracing off (nrllm's
own OpenTelemetry plugin is measured on its own line). The peers come from the ``bench`` extra:
openai-agents, pydantic-ai and llm.

    python benchmarks/bench_peers.py [--turns N] [--only seam]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Final, NamedTuple

import anyio

import nrllm_core
from nrllm_core import (
    Actor,
    AsyncHost,
    AuditRecord,
    DataClass,
    RunStatus,
    ToolContext,
    ToolRegistry,
    ToolResult,
    TraceEvent,
    WirePayload,
    hookimpl,
    make_plugin_manager,
    tool,
)
from nrllm_core._host import Host

RUNS_AT_ONCE: Final = 100
TOOL_WAIT: Final = 0.02
SLOW_WAIT: Final = 0.1
SLOW_CALLS: Final = 8
PROMPT: Final = "look up pluggy"
ANSWER: Final = "pluggy: found"
# A coroutine function measured: one run, one call, or one batch of runs at once.
Job = Callable[[], Coroutine[Any, Any, object]]


# -- the measuring -------------------------------------------------------------------------


def _settle() -> None:
    """Collect what earlier batches left, and keep every survivor out of later collections."""
    gc.collect()
    gc.freeze()


def alternate(
    cases: dict[str, Callable[[], object]], *, turns: int, batch: int, clock: Callable[[], float]
) -> dict[str, float]:
    """The median cost per call of each case, the cases taking turns batch by batch."""
    for case in cases.values():
        case()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    for turn in range(turns):
        for name in order if turn % 2 == 0 else order[::-1]:
            case = cases[name]
            _settle()
            started = clock()
            for _ in range(batch):
                case()
            gc.collect()
            samples[name].append((clock() - started) / batch)
    return {name: statistics.median(values) for name, values in samples.items()}


async def aalternate(
    cases: dict[str, Job],
    *,
    turns: int,
    batch: int,
    clock: Callable[[], float],
) -> dict[str, float]:
    """``alternate`` for coroutines, all on the running event loop."""
    for case in cases.values():
        await case()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    order = list(cases)
    for turn in range(turns):
        for name in order if turn % 2 == 0 else order[::-1]:
            case = cases[name]
            _settle()
            started = clock()
            for _ in range(batch):
                await case()
            gc.collect()
            samples[name].append((clock() - started) / batch)
    return {name: statistics.median(values) for name, values in samples.items()}


CPU: Final = time.process_time
WALL: Final = time.perf_counter


# -- nrllm ---------------------------------------------------------------------------------


def echo(text: str) -> ToolResult:
    """Return the text unchanged."""
    return ToolResult.text(text)


async def aecho(text: str) -> ToolResult:
    """Return the text unchanged, from a coroutine."""
    return ToolResult.text(text)


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
def lookup(term: str) -> ToolResult:
    """Look a term up."""
    return ToolResult.text(f"{term}: found")


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def quick(term: str) -> ToolResult:
    """Look a term up, from a coroutine."""
    return ToolResult.text(f"{term}: found")


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def alookup(term: str) -> ToolResult:
    """Look a term up, waiting 20 ms on the event loop."""
    await anyio.sleep(TOOL_WAIT)
    return ToolResult.text(f"{term}: found")


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def slow(n: int) -> ToolResult:
    """Wait 100 ms on the event loop."""
    await anyio.sleep(SLOW_WAIT)
    return ToolResult.text(f"done {n}")


class _Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(nrllm_core.tool(group="content")(echo))
        registry.register(nrllm_core.tool(group="content")(aecho))
        for declared in (lookup, quick, alookup, slow):
            registry.register(declared)


class _NoOpSinks:
    """One sink of each kind that does nothing, so only the seam is measured."""

    @hookimpl
    def nrllm_wire(self, payload: WirePayload) -> None:
        pass

    @hookimpl
    def nrllm_trace(self, event: TraceEvent) -> None:
        pass

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        pass


def _script(folder: Path, name: str, calls: list[dict[str, Any]], answer: str) -> Path:
    path = folder / f"{name}.json"
    turns = [{"tool_calls": calls}, {"content": answer}]
    path.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return path


def nrllm_host(
    folder: Path,
    tool_name: str,
    *,
    store_url: str | None = None,
    calls: int = 1,
    plugins: Sequence[object] = (),
) -> Host:
    """A host whose scripted model calls ``tool_name`` (``calls`` times at once) then answers."""
    name = f"{tool_name}-{len(list(folder.iterdir()))}"
    arguments = [{"term": "pluggy"}] if calls == 1 else [{"n": n} for n in range(calls)]
    script = _script(
        folder,
        name,
        [{"name": tool_name, "arguments": a} for a in arguments],
        ANSWER,
    )
    data: dict[str, Any] = {
        "providers": {"model": {"kind": "scripted", "script": str(script)}},
        "defaults": {"provider": "model"},
        "actor": {"id": "bench"},
        "privacy": {"level": "metadata"},
    }
    if store_url is not None:
        data["store"] = {"url": store_url}
    return Host.from_config(
        data=data,
        pm=make_plugin_manager(plugins=[_Tools(), *plugins], load_entry_points=False),
        data_dir=folder / name,
        environ={},
    )


def _completed(outcome: Any) -> None:
    if outcome.status is not RunStatus.COMPLETED:
        raise RuntimeError(f"the nrllm run did not complete: {outcome.error}")


def nrllm_run(ahost: AsyncHost) -> Job:
    """One run through ``ahost``, checked to complete."""

    async def run() -> object:
        outcome = await ahost.run(PROMPT)
        _completed(outcome)
        return outcome

    return run


# -- the peers -------------------------------------------------------------------------------


def _llm_execute() -> Callable[[], object]:
    """llm's ``Response.execute_tool_call`` of the same echo tool."""
    import llm
    from llm.models import Prompt, Response, ToolCall

    class Fake(llm.Model):  # type: ignore[misc,unused-ignore]
        model_id = "fake"
        supports_tools = True

        def execute(self, prompt: Any, stream: Any, response: Any, conversation: Any) -> Any:
            yield ANSWER

    def text_echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    model = Fake()
    prompt = Prompt(PROMPT, model=model, tools=[text_echo])  # type: ignore[no-untyped-call,unused-ignore]
    response = Response(prompt, model, stream=False)

    def call() -> object:
        result = response.execute_tool_call(
            ToolCall(name="text_echo", arguments={"text": "hello"}, tool_call_id="c1")
        )
        if result.output != "hello":
            raise RuntimeError("llm did not run the tool")
        return result

    return call


def _agents_invoke() -> Job:
    """openai-agents' ``FunctionTool.on_invoke_tool`` of the same async echo tool."""
    from agents import function_tool
    from agents.tool_context import ToolContext as AgentsToolContext

    async def text_echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    function = function_tool(text_echo)
    context = AgentsToolContext(
        context=None,
        tool_name="text_echo",
        tool_call_id="c1",
        tool_arguments='{"text": "hello"}',
    )

    async def call() -> object:
        result = await function.on_invoke_tool(context, '{"text": "hello"}')
        if result != "hello":
            raise RuntimeError(f"openai-agents did not run the tool: {result!r}")
        return result

    return call


def _agents_run(wait: float) -> Job:
    """openai-agents' ``Runner.run`` of one tool call then the answer, in memory, untraced."""
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)

    class FakeModel(Model):  # type: ignore[misc,unused-ignore]
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            items = args[1] if len(args) > 1 else kwargs["input"]
            answered = any(
                isinstance(item, dict) and item.get("type") == "function_call_output"
                for item in items
            )
            if not answered:
                call = ResponseFunctionToolCall(
                    type="function_call",
                    call_id="c1",
                    name="lookup",
                    arguments='{"term": "pluggy"}',
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            message = ResponseOutputMessage(
                id="m1",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=ANSWER, annotations=[])],
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    async def lookup(term: str) -> str:
        """Look a term up."""
        if wait:
            await anyio.sleep(wait)
        return f"{term}: found"

    agent = Agent(
        name="bench",
        model=FakeModel(),
        tools=[function_tool(lookup)],
        model_settings=ModelSettings(),
    )

    async def run() -> object:
        result = await Runner.run(agent, PROMPT)
        if result.final_output != ANSWER:
            raise RuntimeError(f"openai-agents did not answer: {result.final_output!r}")
        return result

    return run


def _pydantic_ai(*, calls: int, wait: float, instrument: Any = None) -> Job:
    """pydantic-ai's ``Agent.run`` from a ``FunctionModel``: ``calls`` tool calls, the answer."""
    from pydantic_ai import Agent, ModelMessage, ModelResponse, TextPart, Tool, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("lookup", {"term": "pluggy"}, tool_call_id=f"c{n}")
                    for n in range(calls)
                ]
            )
        return ModelResponse(parts=[TextPart(ANSWER)])

    async def lookup(term: str) -> str:
        if wait:
            await anyio.sleep(wait)
        return f"{term}: found"

    agent = Agent(
        FunctionModel(model),
        tools=[Tool(lookup, takes_ctx=False, name="lookup")],
        capabilities=[] if instrument is None else [instrument],
    )

    async def run() -> object:
        result = await agent.run(PROMPT)
        if result.output != ANSWER:
            raise RuntimeError(f"pydantic-ai did not answer: {result.output!r}")
        return result

    return run


# -- the figures -----------------------------------------------------------------------------


class Figure(NamedTuple):
    """One line of the table: the ratio nrllm / peer, its target, and the two costs."""

    name: str
    ratio: float
    target: str
    met: bool
    detail: str


def seam_sync(turns: int) -> Figure:
    pm = make_plugin_manager(plugins=[_Tools(), _NoOpSinks()], load_entry_points=False)
    context = ToolContext(run_id="bench", call_id="c1", actor=Actor(id="bench"))
    arguments = {"text": "hello"}

    def through_seam() -> object:
        return nrllm_core.invoke(pm, "echo", arguments, context=context)

    costs = alternate(
        {
            "nrllm": through_seam,
            "llm": _llm_execute(),
            "bare": lambda: echo(**arguments),
        },
        turns=turns,
        batch=5_000,
        clock=CPU,
    )
    nrllm, peer = costs["nrllm"] - costs["bare"], costs["llm"] - costs["bare"]
    ratio = nrllm / peer
    return Figure(
        "seam overhead, sync, vs llm's execute_tool_call",
        ratio,
        "<= 1.2x",
        ratio <= 1.2,
        f"{nrllm * 1e6:.1f} µs vs {peer * 1e6:.1f} µs",
    )


def seam_async(turns: int) -> Figure:
    pm = make_plugin_manager(plugins=[_Tools(), _NoOpSinks()], load_entry_points=False)
    context = ToolContext(run_id="bench", call_id="c1", actor=Actor(id="bench"))
    arguments = {"text": "hello"}

    async def through_seam() -> object:
        return await nrllm_core.ainvoke(pm, "aecho", arguments, context=context)

    async def bare() -> object:
        return await aecho(**arguments)

    async def measure() -> dict[str, float]:
        return await aalternate(
            {"nrllm": through_seam, "openai-agents": _agents_invoke(), "bare": bare},
            turns=turns,
            batch=5_000,
            clock=CPU,
        )

    costs = anyio.run(measure)
    nrllm, peer = costs["nrllm"] - costs["bare"], costs["openai-agents"] - costs["bare"]
    ratio = nrllm / peer
    return Figure(
        "seam overhead, async tool, vs openai-agents' on_invoke_tool",
        ratio,
        "<= 2x",
        ratio <= 2,
        f"{nrllm * 1e6:.1f} µs vs {peer * 1e6:.1f} µs",
    )


def one_run(folder: Path, turns: int) -> list[Figure]:
    host = nrllm_host(folder, "lookup")
    ahost = AsyncHost(nrllm_host(folder, "quick"))
    agents = _agents_run(0)
    try:

        async def sync_run() -> object:
            outcome = host.run(PROMPT)
            _completed(outcome)
            return outcome

        async def measure() -> dict[str, float]:
            return await aalternate(
                {"Host": sync_run, "AsyncHost": nrllm_run(ahost), "openai-agents": agents},
                turns=turns,
                batch=40,
                clock=CPU,
            )

        costs = anyio.run(measure)
    finally:
        host.store.close()
        ahost.host.store.close()
    peer = costs["openai-agents"]
    figures = []
    for name in ("Host", "AsyncHost"):
        ratio = costs[name] / peer
        figures.append(
            Figure(
                f"one persisted {name} run (SQLite, metadata) vs openai-agents in memory",
                ratio,
                "<= 0.8x",
                ratio <= 0.8,
                f"{costs[name] * 1e3:.2f} ms vs {peer * 1e3:.2f} ms CPU",
            )
        )
    return figures


async def _at_once(run: Job) -> None:
    async with anyio.create_task_group() as group:
        for _ in range(RUNS_AT_ONCE):
            group.start_soon(run)


def runs_at_once(folder: Path, turns: int) -> list[Figure]:
    stores: dict[str, str | None] = {"SQLite": None}
    postgres = os.environ.get("NRLLM_TEST_POSTGRES_URL")
    with ExitStack() as stack:
        if postgres:
            from nrllm_core.testing import postgres_schema

            stores["PostgreSQL"] = stack.enter_context(postgres_schema("bench_peers"))
        hosts = {
            name: AsyncHost(nrllm_host(folder, "alookup", store_url=url))
            for name, url in stores.items()
        }
        for ahost in hosts.values():
            stack.callback(ahost.host.store.close)
        agents = _agents_run(TOOL_WAIT)

        def batch_of(run: Job) -> Job:
            return lambda: _at_once(run)

        cases: dict[str, Job] = {name: batch_of(nrllm_run(ahost)) for name, ahost in hosts.items()}
        cases["openai-agents"] = batch_of(agents)

        async def measure(clock: Callable[[], float]) -> dict[str, float]:
            return await aalternate(cases, turns=turns, batch=1, clock=clock)

        cpu = anyio.run(measure, CPU)
        # PostgreSQL's own CPU is another process's: the wall clock counts it too.
        wall = anyio.run(measure, WALL)
    rate = {name: RUNS_AT_ONCE / seconds for name, seconds in cpu.items()}
    wall_rate = {name: RUNS_AT_ONCE / seconds for name, seconds in wall.items()}
    # The target holds by wall clock and per CPU second: the lesser of the two is the figure.
    ratio = min(
        rate["SQLite"] / rate["openai-agents"], wall_rate["SQLite"] / wall_rate["openai-agents"]
    )
    figures = [
        Figure(
            f"{RUNS_AT_ONCE} runs at once, one event loop, SQLite, vs openai-agents in memory",
            ratio,
            ">= 1.5x",
            ratio >= 1.5,
            f"{rate['SQLite']:.0f} vs {rate['openai-agents']:.0f} runs per CPU second; "
            f"wall: {wall_rate['SQLite']:.0f} vs {wall_rate['openai-agents']:.0f} runs/s",
        )
    ]
    if "PostgreSQL" in rate:
        # By wall clock: the server's CPU is another process's, which the CPU time leaves out.
        ratio = wall_rate["PostgreSQL"] / wall_rate["SQLite"]
        figures.append(
            Figure(
                "the same on PostgreSQL, vs SQLite, by wall clock",
                ratio,
                ">= 0.8x",
                ratio >= 0.8,
                f"{rate['PostgreSQL']:.0f} vs {rate['SQLite']:.0f} runs per CPU second; "
                f"wall: {wall_rate['PostgreSQL']:.0f} vs {wall_rate['SQLite']:.0f} runs/s",
            )
        )
    return figures


def slow_calls(folder: Path, turns: int) -> Figure:
    ahost = AsyncHost(nrllm_host(folder, "slow", calls=SLOW_CALLS))
    try:

        async def measure() -> dict[str, float]:
            return await aalternate(
                {
                    "nrllm": nrllm_run(ahost),
                    "pydantic-ai": _pydantic_ai(calls=SLOW_CALLS, wait=SLOW_WAIT),
                },
                turns=turns,
                batch=1,
                clock=WALL,
            )

        costs = anyio.run(measure)
    finally:
        ahost.host.store.close()
    ratio = costs["nrllm"] / costs["pydantic-ai"]
    return Figure(
        f"{SLOW_CALLS} calls of a 100 ms tool in one turn (wall) vs pydantic-ai",
        ratio,
        "<= 1.1x",
        ratio <= 1.1,
        f"{costs['nrllm'] * 1e3:.1f} ms vs {costs['pydantic-ai'] * 1e3:.1f} ms",
    )


@contextmanager
def _otel_providers() -> Iterator[tuple[Any, Any]]:
    """The SDK's tracer and meter providers, spans through a processor to an exporter that
    drops them, metrics aggregated in memory: the SDK does all its work, nothing leaves."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class Dropped(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    try:
        yield tracer_provider, meter_provider
    finally:
        tracer_provider.shutdown()
        meter_provider.shutdown()


def otel(folder: Path, turns: int) -> Figure:
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentationSettings

    from nrllm_otel import OtelSink

    with _otel_providers() as (tracer_provider, meter_provider):
        plain = AsyncHost(nrllm_host(folder, "quick"))
        sink = OtelSink(tracer_provider=tracer_provider, meter_provider=meter_provider)
        traced = AsyncHost(nrllm_host(folder, "quick", plugins=[sink]))
        settings = InstrumentationSettings(
            tracer_provider=tracer_provider,
            meter_provider=meter_provider,
            include_content=False,
        )
        try:

            async def measure() -> dict[str, float]:
                return await aalternate(
                    {
                        "nrllm": nrllm_run(plain),
                        "nrllm + nrllm-otel": nrllm_run(traced),
                        "pydantic-ai": _pydantic_ai(calls=1, wait=0),
                        "pydantic-ai instrumented": _pydantic_ai(
                            calls=1, wait=0, instrument=Instrumentation(settings=settings)
                        ),
                    },
                    turns=turns,
                    batch=40,
                    clock=CPU,
                )

            costs = anyio.run(measure)
        finally:
            plain.host.store.close()
            traced.host.store.close()
    ours = costs["nrllm + nrllm-otel"] - costs["nrllm"]
    theirs = costs["pydantic-ai instrumented"] - costs["pydantic-ai"]
    ratio = ours / theirs
    return Figure(
        "nrllm-otel's added CPU per run vs pydantic-ai's instrumentation's",
        ratio,
        "<= 0.75x",
        ratio <= 0.75,
        f"+{ours * 1e3:.3f} ms vs +{theirs * 1e3:.3f} ms",
    )


def _child_cpu(code: str, env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def imports(turns: int) -> Figure:
    # Bytecode is written by the first, untimed runs, as for an installed package.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    codes = {"nrllm": "import nrllm_core", "llm": "import llm", "bare": "pass"}
    for code in codes.values():
        _child_cpu(code, env)
    samples: dict[str, list[float]] = {name: [] for name in codes}
    order = list(codes)
    for turn in range(turns):
        for name in order if turn % 2 == 0 else order[::-1]:
            samples[name].append(_child_cpu(codes[name], env))
    cost = {name: statistics.median(values) for name, values in samples.items()}
    nrllm, peer = cost["nrllm"] - cost["bare"], cost["llm"] - cost["bare"]
    ratio = nrllm / peer
    return Figure(
        "import nrllm_core vs import llm (CPU of a fresh interpreter, less a bare one)",
        ratio,
        "<= 0.5x",
        ratio <= 0.5,
        f"{nrllm * 1e3:.0f} ms vs {peer * 1e3:.0f} ms",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=15, help="batches per case (default 15)")
    parser.add_argument(
        "--only", choices=["seam"], help="measure only these lines (seam: the two seam lines)"
    )
    arguments = parser.parse_args()
    turns = arguments.turns
    started = time.perf_counter()
    figures: list[Figure] = [seam_sync(turns), seam_async(turns)]
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        if arguments.only is None:
            figures.extend(_after_the_seam(folder, turns))
    print(
        f"nrllm beside its peers: CPU time of the process (all threads), medians of {turns} "
        "alternating batches; ratios are nrllm / peer"
    )
    rows = [
        [f.name, f"{f.ratio:.2f}x", f.target, "met" if f.met else "MISSED", f.detail]
        for f in figures
    ]
    _print_table(["figure", "ratio", "target", "", "nrllm vs peer"], rows)
    print(f"({time.perf_counter() - started:.0f} s)")


def _after_the_seam(folder: Path, turns: int) -> list[Figure]:
    """Every figure but the two seam lines: runs, runs at once, slow calls, OTel, imports."""
    figures = one_run(folder, turns)
    figures.extend(runs_at_once(folder, max(5, turns // 2)))
    figures.append(slow_calls(folder, max(5, turns // 2)))
    figures.append(otel(folder, turns))
    figures.append(imports(turns))
    return figures


def _print_table(header: list[str], rows: list[list[str]]) -> None:
    table = [header, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for index, cells in enumerate(table):
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()

"""AsyncHost on an event loop (asyncio and trio): async tools and hooks, task cancellation,
streaming, many runs."""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

import anyio
import pytest

from nrllm_core import (
    AsyncHost,
    DataClass,
    Finished,
    Host,
    Suspended,
    TextDelta,
    Tool,
    ToolAnswered,
    ToolCallStarted,
    ToolContext,
    ToolResult,
    _run_flow,
    hookimpl,
    tool,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """AsyncHost runs on either of anyio's backends."""
    return str(request.param)


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def shout(text: str) -> ToolResult:
    """Answer the text in capitals, after a wait on the event loop."""
    await anyio.sleep(0)
    return ToolResult.text(text.upper())


def calls(*ids: str, name: str = "shout") -> dict[str, Any]:
    return {"tool_calls": [{"id": i, "name": name, "arguments": {"text": i}} for i in ids]}


def test_an_async_def_tool_is_a_tool_whose_execute_is_a_coroutine_function():
    import inspect

    assert inspect.iscoroutinefunction(shout.execute)
    assert shout.parameters["properties"] == {"text": {"type": "string"}}
    assert shout.description.startswith("Answer the text in capitals")


async def test_async_host_runs_an_async_tool_on_its_own_loop(tools_plugin, nrllm):
    loop_thread = threading.get_ident()
    ran: list[int] = []
    seen: list[int] = []

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    async def shout(text: str) -> ToolResult:
        """Answer the text in capitals, after a wait on the event loop."""
        await anyio.sleep(0)
        ran.append(threading.get_ident())
        return ToolResult.text(text.upper())

    nrllm.load(tools_plugin(shout))

    class Watch:
        @hookimpl
        def nrllm_wire(self, payload: Any) -> None:
            seen.append(threading.get_ident())

    nrllm.pm.register(Watch())
    script = nrllm.scripted([calls("a", "b"), {"content": "done"}])
    outcome = await AsyncHost(nrllm.host).run("go", provider=script)

    assert (outcome.status, outcome.final_content) == ("completed", "done")
    assert [w.content for w in nrllm.sinks.wire] == ["A", "B"]
    # The tool runs on the event loop's thread: no worker thread was lent to it. The sinks
    # are told with the steps they go with, in the worker thread of the run's store work.
    assert ran == [loop_thread, loop_thread]
    assert len(seen) == 2
    assert loop_thread not in seen


async def test_a_hook_that_returns_an_awaitable_is_awaited(tools_plugin, nrllm):
    class Remote:
        @hookimpl(tryfirst=True)
        def nrllm_execute_tool(self, tool: Tool, arguments: Any, context: ToolContext) -> Any:
            async def far_away() -> ToolResult:
                return ToolResult.text(f"remote {arguments['text']}")

            return far_away()

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    def echo(text: str) -> ToolResult:
        """Echo."""
        return ToolResult.text(text)

    nrllm.load(tools_plugin(echo))
    nrllm.pm.register(Remote())

    sync_wire = nrllm.host.invoke("echo", {"text": "x"})
    async_wire = await AsyncHost(nrllm.host).invoke("echo", {"text": "y"})

    assert (sync_wire.content, async_wire.content) == ("remote x", "remote y")


async def test_cancelling_the_task_settles_the_run_cancelled_and_stops_its_calls(
    tools_plugin, nrllm
):
    entered = anyio.Event()
    finished: list[str] = []

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    async def forever(text: str) -> ToolResult:
        """Never ends by itself."""
        entered.set()
        await anyio.sleep(3600)
        finished.append(text)
        return ToolResult.text("never")

    nrllm.load(tools_plugin(forever))
    script = nrllm.scripted([calls("a", "b", name="forever"), {"content": "never"}])
    host = AsyncHost(nrllm.host)

    async with anyio.create_task_group() as group:

        async def run() -> None:
            await host.run("go", provider=script)
            pytest.fail("the cancelled run returned")

        group.start_soon(run)
        await entered.wait()
        group.cancel_scope.cancel()

    assert finished == []
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("cancelled", "cancelled")
    stored = nrllm.host.store.get_run(info.run_id)
    tools = [s.payload for s in stored.steps if s.kind == "tool"]
    assert [t["tool_outcome"] for t in tools] == ["error", "error"]
    assert stored.steps[-1].kind == "finish"
    assert nrllm.host.store.verify(info.run_id).broken == ()


# From a task on the run's event loop, or from a thread that is not the loop's.
@pytest.mark.parametrize("where", ["task", "thread"])
async def test_async_host_cancel_from_another_task_or_thread(tools_plugin, nrllm, where):
    entered = threading.Event()

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    async def forever(text: str) -> ToolResult:
        """Never ends by itself."""
        entered.set()
        await anyio.sleep(3600)
        return ToolResult.text("never")

    nrllm.load(tools_plugin(forever))
    script = nrllm.scripted([calls("a", name="forever"), {"content": "never"}])
    host = AsyncHost(nrllm.host)
    outcomes: list[Any] = []
    answered: list[bool] = []

    def cancel() -> None:
        (info,) = nrllm.host.runs("running")
        answered.append(host.cancel(info.run_id))

    async with anyio.create_task_group() as group:

        async def run() -> None:
            with anyio.fail_after(10):
                outcomes.append(await host.run("go", provider=script))

        group.start_soon(run)
        await anyio.to_thread.run_sync(entered.wait)
        if where == "task":
            cancel()
        else:
            other = threading.Thread(target=cancel)
            other.start()
            await anyio.to_thread.run_sync(other.join)

    assert answered == [True]
    (outcome,) = outcomes
    assert (outcome.status, outcome.termination_reason) == ("cancelled", "cancelled")


def test_host_stream_yields_the_text_the_calls_their_answers_and_the_end(tools_plugin, nrllm):
    nrllm.load(tools_plugin(shout))
    script = nrllm.scripted([calls("a"), {"content": "all done"}])

    events = list(nrllm.host.stream("go", provider=script))

    assert [type(e) for e in events] == [ToolCallStarted, ToolAnswered, TextDelta, Finished]
    started, answered, text, finished = events
    assert (started.call_id, started.name) == ("a", "shout")
    assert (answered.payload.call_id, answered.payload.content) == ("a", "A")
    assert text.text == "all done"
    assert finished.outcome.status == "completed"
    assert finished.outcome.final_content == "all done"


async def test_async_host_stream_ends_with_the_suspension_of_a_write(tools_plugin, nrllm):
    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT, requires_approval=True)
    def write(text: str) -> ToolResult:
        """Writes."""
        return ToolResult.text("written")

    nrllm.load(tools_plugin(write))
    script = nrllm.scripted([calls("w", name="write"), {"content": "ok"}])

    events = [e async for e in AsyncHost(nrllm.host).stream("go", provider=script)]

    assert [type(e) for e in events] == [Suspended]
    assert events[0].outcome.status == "awaiting_approval"
    assert [p.name for p in events[0].outcome.pending] == ["write"]


def test_stream_raises_a_bad_prompt_to_the_caller_before_anything_runs(nrllm):
    with pytest.raises(ValueError, match="the prompt is empty"):
        nrllm.host.stream("  ")
    assert nrllm.host.runs() == []


async def test_a_hundred_runs_on_one_loop_all_complete_with_intact_audits(tools_plugin, nrllm):
    nrllm.load(tools_plugin(shout))
    script = nrllm.scripted([calls("a"), {"content": "done"}] * 100)
    host = AsyncHost(nrllm.host)
    outcomes: list[Any] = []

    async with anyio.create_task_group() as group:
        for _ in range(100):

            async def one() -> None:
                outcomes.append(await host.run("go", provider=script))

            group.start_soon(one)

    assert len(outcomes) == 100
    assert {o.status for o in outcomes} == {"completed"}
    assert nrllm.host.store.verify().broken == ()
    per_run = [nrllm.host.store.get_run(o.run_id).steps for o in outcomes]
    assert {len(steps) for steps in per_run} == {len(per_run[0])}
    assert all([s.sequence for s in steps] == list(range(1, len(steps) + 1)) for steps in per_run)


ASYNC_PLUGIN = """
import anyio
from nrllm_core import DataClass, ToolResult, hookimpl, tool

@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def later(text: str) -> ToolResult:
    \"\"\"Answer after a wait on the event loop.\"\"\"
    await anyio.sleep(0.01)
    return ToolResult.text("later " + text)

@hookimpl
def nrllm_register_tools(registry):
    registry.register(later)
"""


def test_an_async_tool_through_the_sync_cli_invoke(tmp_path, monkeypatch):
    from importlib import metadata

    from click.testing import CliRunner

    from nrllm_core.cli import cli

    (tmp_path / "async_plugin.py").write_text(ASYNC_PLUGIN, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NRLLM_LOAD_PLUGINS", "async_plugin")
    ours = metadata.EntryPoint(name="async_plugin", value="async_plugin", group="nrllm")
    monkeypatch.setattr("nrllm_core._manager.metadata.entry_points", lambda group: [ours])

    result = CliRunner().invoke(
        cli, ["invoke", "later", "--args", '{"text": "x"}', "--json"], catch_exceptions=False
    )

    assert result.exit_code == 0, result.output
    wire = json.loads(result.stdout)["wire"]
    assert (wire["content"], wire["is_error"]) == ("later x", False)


async def test_ainvoke_is_the_seam_from_an_event_loop(sinks, make_pm, context):
    from nrllm_core import ainvoke

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    def blocking(text: str) -> ToolResult:
        """Answer from a worker thread."""
        return ToolResult.text(f"{text} on {'loop' if threading.get_ident() == loop else 'worker'}")

    loop = threading.get_ident()
    pm = make_pm(shout, blocking)

    awaited = await ainvoke(pm, "shout", {"text": "hi"}, context=context)
    threaded = await ainvoke(pm, "blocking", {"text": "hi"}, context=context)
    refused = await ainvoke(pm, "shout", {"text": 3}, context=context)

    assert (awaited.content, awaited.is_error) == ("HI", False)
    assert threaded.content == "hi on worker"
    assert refused.is_error
    assert refused.content.startswith('Error: invalid arguments for tool "shout"')
    assert [w.content for w in sinks.wire] == [awaited.content, threaded.content, refused.content]
    assert [r.payload["tool_outcome"] for r in sinks.audit] == ["ok", "ok", "refused"]


async def test_a_run_cancelled_before_its_loop_starts_settles_cancelled(
    tools_plugin, nrllm, monkeypatch
):
    nrllm.load(tools_plugin(shout))
    script = nrllm.scripted([{"content": "never"}])
    host = AsyncHost(nrllm.host)
    started = threading.Event()
    real = _run_flow._first_segment

    def slow_first_segment(*args: Any) -> Any:
        # The store work before the loop: the task is cancelled while it runs.
        started.set()
        threading.Event().wait(0.3)
        return real(*args)

    monkeypatch.setattr(_run_flow, "_first_segment", slow_first_segment)

    async with anyio.create_task_group() as group:
        group.start_soon(functools.partial(host.run, "go", provider=script))
        await anyio.to_thread.run_sync(started.wait)
        group.cancel_scope.cancel()

    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("cancelled", "cancelled")
    assert nrllm.requests == []
    assert nrllm.host.store.verify(info.run_id).broken == ()


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_stream_hands_each_step_to_on_event_in_order_on_the_readers_thread(tmp_path, driver):
    from nrllm_core._manager import make_plugin_manager

    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "one two three"}]}), encoding="utf-8")
    host = Host.from_config(
        data={
            "providers": {"m": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "m"},
        },
        pm=make_plugin_manager(load_entry_points=False),
        data_dir=tmp_path / "data",
    )
    seen: list[tuple[str, str, int]] = []

    def on_event(event: Any) -> None:
        seen.append(("step", event.step.kind.value, threading.get_ident()))

    def read(event: Any) -> None:
        seen.append(("event", type(event).__name__, threading.get_ident()))

    async def read_async() -> None:
        async for event in AsyncHost(host).stream("go", on_event=on_event):
            read(event)

    try:
        if driver == "sync":
            for event in host.stream("go", on_event=on_event):
                read(event)
        else:
            anyio.run(read_async)
    finally:
        host.store.close()

    assert [(what, name) for what, name, _ in seen] == [
        ("step", "start"),
        ("step", "gate"),
        ("step", "request"),
        ("event", "TextDelta"),
        ("event", "TextDelta"),
        ("event", "TextDelta"),
        ("step", "llm"),
        ("step", "finish"),
        ("event", "Finished"),
    ]
    assert len({thread for *_, thread in seen}) == 1

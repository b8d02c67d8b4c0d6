"""A running call's progress (``ToolContext.report_progress``) as ``ToolProgress`` events of a
streamed run, from a sync tool's thread and from an async tool on the host's loop."""

from __future__ import annotations

from typing import Any

import pytest

from nrllm_core import (
    AsyncHost,
    DataClass,
    Finished,
    TextDelta,
    Tool,
    ToolAnswered,
    ToolCallStarted,
    ToolContext,
    ToolProgress,
    ToolResult,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Slow(Tool):
    name = "slow"
    description = "Reports its progress."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        context.report_progress(1, 2, "half\x1b[2J\u202e way\n" + "x" * 500)
        context.report_progress(2)
        return ToolResult.text("done")


class AsyncSlow(Slow):
    name = "aslow"

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:  # type: ignore[override]
        return Slow.execute(self, arguments, context)


def calls(name: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": "c1", "name": name, "arguments": {}}]}


def check(events: list[Any], name: str) -> None:
    assert [type(e) for e in events] == [
        ToolCallStarted,
        ToolProgress,
        ToolProgress,
        ToolAnswered,
        TextDelta,
        Finished,
    ]
    first, second = events[1], events[2]
    assert (first.call_id, first.name, first.progress, first.total) == ("c1", name, 1.0, 2.0)
    assert first.message == "half[2J way " + "x" * 188
    assert (second.progress, second.total, second.message) == (2.0, None, None)


def test_host_stream_yields_a_calls_progress(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Slow()))
    script = nrllm.scripted([calls("slow"), {"content": "ok"}])
    check(list(nrllm.host.stream("go", provider=script)), "slow")


@pytest.mark.parametrize("tool", [Slow(), AsyncSlow()], ids=["sync", "async"])
async def test_async_host_stream_yields_a_calls_progress(tools_plugin, nrllm, tool):
    nrllm.load(tools_plugin(tool))
    script = nrllm.scripted([calls(tool.name), {"content": "ok"}])
    events = [e async for e in AsyncHost(nrllm.host).stream("go", provider=script)]
    check(events, tool.name)


def test_a_run_nobody_streams_hears_no_progress(tools_plugin, nrllm):
    nrllm.load(tools_plugin(Slow()))
    script = nrllm.scripted([calls("slow"), {"content": "ok"}])
    assert nrllm.host.run("go", provider=script).status == "completed"

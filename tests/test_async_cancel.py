"""Cancelling the task of an ``AsyncHost`` run at each point of the run: its store work, a step's
write, the model request (awaited, or a sync provider in a worker thread), a tool call and the
turn that would suspend. Each way a task is cancelled: an anyio cancel scope (on asyncio and on
trio), and asyncio's own ``Task.cancel`` (a client that went away, ``asyncio.timeout``), which no
anyio shield stops.

Every time the ``CancelledError`` goes on and nothing else is raised, the run is recorded and
settles ``cancelled``, and its audit chain holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import pytest

from nrllm_core import AsyncHost, DataClass, StepKind, ToolResult, tool
from nrllm_core._recorder import RunRecorder

pytestmark = pytest.mark.anyio

# Long enough never to be reached by a test that passes; it only bounds a failing one.
_STUCK_SECONDS = 10


class Stop:
    """Where a run is held: ``inside`` is set once the run got there, and it stays there
    (a worker thread blocked, a task asleep) until ``release``."""

    def __init__(self) -> None:
        self.inside = threading.Event()
        self.released = threading.Event()

    def hold(self) -> None:
        self.inside.set()
        self.released.wait(_STUCK_SECONDS)

    def release(self) -> None:
        self.released.set()


@pytest.fixture
def stop() -> Iterator[Stop]:
    held = Stop()
    yield held
    # A worker thread a cancelled run left behind (a sync model) is let go.
    held.release()


def calls(name: str, *ids: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": i, "name": name, "arguments": {"text": i}} for i in ids]}


def hold_step(monkeypatch: pytest.MonkeyPatch, stop: Stop, kind: StepKind) -> None:
    """The first write of a ``kind`` step waits at ``stop`` (in its worker thread)."""
    real = RunRecorder.record

    def record(self: RunRecorder, step: Any) -> bool:
        if step.kind is kind and not stop.inside.is_set():
            stop.hold()
        delivered: bool = real(self, step)
        return delivered

    monkeypatch.setattr(RunRecorder, "record", record)


async def cancel_at(stop: Stop, how: str, run: Callable[[], Any]) -> list[BaseException]:
    """Start ``run`` in a task, cancel the task once the run is held at ``stop`` (``how``:
    its cancel scope, or ``Task.cancel``), then let the run go on; what it raised."""
    raised: list[BaseException] = []

    async def task() -> None:
        try:
            await run()
        except BaseException as exc:
            raised.append(exc)
            raise

    if how == "scope":
        scope = anyio.CancelScope()

        async def scoped() -> None:
            with scope:
                await task()

        async with anyio.create_task_group() as group:
            group.start_soon(scoped)
            await anyio.to_thread.run_sync(stop.inside.wait)
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            stop.release()
        return raised
    pending = asyncio.create_task(task())
    await anyio.to_thread.run_sync(stop.inside.wait)
    pending.cancel()
    # The cancelled task's clean-up starts before the thread it interrupted may leave.
    await anyio.wait_all_tasks_blocked()
    stop.release()
    with pytest.raises(asyncio.CancelledError):
        await pending
    return raised


def assert_settled_cancelled(nrllm: Any, raised: list[BaseException]) -> Any:
    assert [type(e) for e in raised] == [anyio.get_cancelled_exc_class()]
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("cancelled", "cancelled")
    stored = nrllm.host.store.get_run(info.run_id)
    assert stored.steps[-1].kind == "finish"
    assert stored.steps[-1].payload["status"] == "cancelled"
    assert nrllm.host.store.verify(info.run_id).broken == ()
    assert nrllm.host.store.suspension(info.run_id) is None
    return stored


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


# Each way a task is cancelled, on each backend that has it: trio's own cancellation is a
# cancel scope; asyncio's ``Task.cancel`` has no trio counterpart.
HOW = pytest.mark.parametrize(
    ("anyio_backend", "how"), [("asyncio", "scope"), ("asyncio", "task"), ("trio", "scope")]
)


@HOW
@pytest.mark.parametrize(
    ("held", "written"),
    [
        # The host's store work before the loop: the loop never starts.
        (StepKind.GATE, ["start", "gate", "finish"]),
        # A step the loop writes: it is written whole, and the model is not asked after it.
        (StepKind.REQUEST, ["start", "gate", "request", "finish"]),
    ],
)
async def test_cancelled_while_the_store_writes(nrllm, monkeypatch, stop, how, held, written):
    hold_step(monkeypatch, stop, held)
    script = nrllm.scripted([{"content": "never"}])

    raised = await cancel_at(stop, how, lambda: AsyncHost(nrllm.host).run("go", provider=script))

    stored = assert_settled_cancelled(nrllm, raised)
    assert [s.kind for s in stored.steps] == written
    assert nrllm.requests == []


@HOW
@pytest.mark.parametrize("model", ["sync", "awaited"])
async def test_cancelled_while_the_model_answers(nrllm, monkeypatch, stop, how, model):
    from nrllm_core.providers._scripted import ScriptedProvider

    real = ScriptedProvider.complete

    def complete(self: ScriptedProvider, *args: Any, **kwargs: Any) -> Any:
        # A sync provider, in a worker thread.
        stop.hold()
        return real(self, *args, **kwargs)

    async def acomplete(*args: Any, **kwargs: Any) -> Any:
        stop.inside.set()
        await anyio.sleep(_STUCK_SECONDS)
        pytest.fail("the model request was not cancelled")

    if model == "sync":
        monkeypatch.setattr(ScriptedProvider, "complete", complete)
    else:
        monkeypatch.setattr("nrllm_core._drive.acomplete", acomplete)
    script = nrllm.scripted([{"content": "the answer"}])

    raised = await cancel_at(stop, how, lambda: AsyncHost(nrllm.host).run("go", provider=script))

    stored = assert_settled_cancelled(nrllm, raised)
    # The answer that comes after the cancellation is not the run's: it does not wait for it.
    assert [s.kind for s in stored.steps] == ["start", "gate", "request", "finish"]


@HOW
async def test_cancelled_while_a_tool_runs(nrllm, tools_plugin, stop, how):
    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    def slow(text: str) -> ToolResult:
        """Waits until it is let go."""
        stop.hold()
        return ToolResult.text("late")

    nrllm.load(tools_plugin(slow))
    script = nrllm.scripted([calls("slow", "a"), {"content": "never"}])

    raised = await cancel_at(stop, how, lambda: AsyncHost(nrllm.host).run("go", provider=script))

    stored = assert_settled_cancelled(nrllm, raised)
    (answer,) = [s.payload for s in stored.steps if s.kind == "tool"]
    assert answer["tool_outcome"] == "error"
    assert len(nrllm.requests) == 1


@HOW
async def test_cancelled_in_the_turn_that_would_suspend(
    nrllm, tools_plugin, monkeypatch, stop, how
):
    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT, requires_approval=True)
    def write(text: str) -> ToolResult:
        """Writes."""
        return ToolResult.text("written")

    nrllm.load(tools_plugin(write))
    hold_step(monkeypatch, stop, StepKind.LLM)
    script = nrllm.scripted([calls("write", "w"), {"content": "never"}])

    raised = await cancel_at(stop, how, lambda: AsyncHost(nrllm.host).run("go", provider=script))

    # A cancelled run never waits for a person: nothing is left to approve.
    stored = assert_settled_cancelled(nrllm, raised)
    assert "suspension" not in [s.kind for s in stored.steps]
    assert await AsyncHost(nrllm.host).pending(stored.run.run_id) is None


@pytest.mark.parametrize("leaving", ["aclose", "cancelled"])
async def test_leaving_a_stream_early_settles_its_run_cancelled(
    nrllm, monkeypatch, stop, caplog, leaving
):
    # The model's answer has streamed; its step is being written when the reader leaves.
    hold_step(monkeypatch, stop, StepKind.LLM)
    script = nrllm.scripted([{"content": "one two three"}])
    steps: list[str] = []
    seen: list[Any] = []

    events = AsyncHost(nrllm.host).stream(
        "go", provider=script, on_event=lambda e: steps.append(e.step.kind.value)
    )

    reading = anyio.CancelScope()

    async def read() -> None:
        with reading:
            async for event in events:
                seen.append(event)
                if leaving == "aclose":
                    break
            await events.aclose()

    async with anyio.create_task_group() as group:
        group.start_soon(read)
        await anyio.to_thread.run_sync(stop.inside.wait)
        if leaving == "cancelled":
            reading.cancel()
        await anyio.wait_all_tasks_blocked()
        stop.release()

    assert {type(e).__name__ for e in seen} == {"TextDelta"}
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("cancelled", "cancelled")
    assert nrllm.host.store.verify(info.run_id).broken == ()
    # The steps written after the reader left reach nobody, and nothing fails for it.
    assert steps == ["start", "gate", "request"]
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


async def test_a_reader_that_leaves_without_closing_the_stream_is_never_cancelled_for_it(
    nrllm, monkeypatch, stop, caplog, anyio_backend
):
    # The run is held while it writes its model step; the reader breaks out and drops the
    # stream without closing it: the garbage collector closes it, from another task (trio
    # warns of it: it asks for aclosing).
    hold_step(monkeypatch, stop, StepKind.LLM)
    script = nrllm.scripted([{"content": "one two three"}])
    seen: list[Any] = []

    async def read_one() -> None:
        async for event in AsyncHost(nrllm.host).stream("go", provider=script):
            seen.append(event)
            break

    with anyio.fail_after(_STUCK_SECONDS):
        async with anyio.create_task_group():
            with (
                pytest.warns(ResourceWarning, match="aclosing")
                if anyio_backend == "trio"
                else contextlib.nullcontext()
            ):
                await read_one()
            # The stream is closed (the run cancelled) before the run's write ends.
            await anyio.wait_all_tasks_blocked()
            stop.release()
            # The reader's own work goes on where it left the stream, never cancelled.
            while nrllm.host.runs("running"):
                await anyio.sleep(0.01)
            await anyio.sleep(0.05)

    assert [type(e).__name__ for e in seen] == ["TextDelta"]
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("cancelled", "cancelled")
    assert nrllm.host.store.verify(info.run_id).broken == ()
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_stream_tells_of_the_steps_written_after_its_run_is_cancelled(
    nrllm, tools_plugin, stop
):
    """The sync driver tells its watchers of every step it writes; so does the async one,
    for the steps a cancelled run still writes (the answer of the call it interrupted)."""
    from nrllm_core import Finished, ToolAnswered, ToolCallStarted

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    def slow(text: str) -> ToolResult:
        """Waits until it is let go."""
        stop.hold()
        return ToolResult.text("late")

    nrllm.load(tools_plugin(slow))
    script = nrllm.scripted([calls("slow", "a"), {"content": "never"}])
    host = AsyncHost(nrllm.host)
    events: list[Any] = []

    async for event in host.stream("go", provider=script):
        events.append(event)
        if isinstance(event, ToolCallStarted):
            await anyio.to_thread.run_sync(stop.inside.wait)
            (info,) = nrllm.host.runs()
            assert host.cancel(info.run_id)
            stop.release()

    answered = [e.payload.call_id for e in events if isinstance(e, ToolAnswered)]
    assert answered == ["a"]
    assert isinstance(events[-1], Finished)
    assert events[-1].outcome.status == "cancelled"

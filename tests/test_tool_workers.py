"""``Host`` runs tool calls on kept daemon worker threads: no thread per call, every call still
answered within its timeout, a call that never returns holds its own thread only."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from nrllm_core import DataClass, ToolResult, tool
from nrllm_core._loop_thread import Workers
from nrllm_core._payloads import StepKind


class Threads:
    """The threads the tool ran on, and what holds it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: list[threading.Thread] = []
        self.release = threading.Event()
        self.barrier: threading.Barrier | None = None

    def note(self) -> None:
        with self.lock:
            self.seen.append(threading.current_thread())

    def distinct(self) -> int:
        return len({id(thread) for thread in self.seen})


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> Iterator[Threads]:
    # A pool of this test's own: the process's one is shared with the tests before it.
    pool = Workers()
    monkeypatch.setattr("nrllm_core._drive.workers", lambda: pool, raising=False)
    seen = Threads()
    yield seen
    # A call the run abandoned is let go.
    seen.release.set()


@pytest.fixture
def work_tools(tools_plugin: Any, nrllm: Any, threads: Threads) -> None:
    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    def note(label: str) -> ToolResult:
        """Note the thread it runs on; ``hang`` waits until the test ends, ``meet`` until
        every call of the turn is inside."""
        threads.note()
        if label == "hang":
            threads.release.wait(10)
        if label == "meet" and threads.barrier is not None:
            threads.barrier.wait(5)
        return ToolResult.text(f"done {label}")

    nrllm.load(tools_plugin(note))


def turn(*labels: str) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"id": f"c{index}", "name": "note", "arguments": {"label": label}}
            for index, label in enumerate(labels)
        ]
    }


def answers(nrllm: Any, run_id: str) -> list[str]:
    return [
        e.step.fields["tool_result"]
        for e in nrllm.sinks.trace
        if e.run_id == run_id and e.step.kind is StepKind.TOOL
    ]


@pytest.mark.usefixtures("work_tools")
def test_calls_run_on_kept_threads_not_a_new_thread_per_call(nrllm, threads):
    for _ in range(5):
        outcome = nrllm.run("go", script=[turn("one"), {"content": "ok"}])
        assert answers(nrllm, outcome.run_id) == ["done one"]
    # Each single call went to the one thread kept after the first.
    assert (len(threads.seen), threads.distinct()) == (5, 1)

    threads.barrier = threading.Barrier(3)
    for _ in range(3):
        outcome = nrllm.run("go", script=[turn("meet", "meet", "meet"), {"content": "ok"}])
        assert answers(nrllm, outcome.run_id) == ["done meet"] * 3
    # A turn of three at once needs three threads, and the next turns reuse them.
    assert (len(threads.seen), threads.distinct()) == (14, 3)


@pytest.mark.usefixtures("work_tools")
def test_at_most_tool_threads_idle_threads_are_kept(nrllm, threads):
    nrllm.config = {"run": {"tool_threads": 1}}
    threads.barrier = threading.Barrier(3)
    nrllm.run("go", script=[turn("meet", "meet", "meet"), {"content": "ok"}])
    threads.barrier = None
    first = set(map(id, threads.seen))

    for _ in range(3):
        nrllm.run("go", script=[turn("one"), {"content": "ok"}])

    # Two of the turn's three threads ended; the one kept ran every call after.
    later = {id(thread) for thread in threads.seen[3:]}
    assert len(later) == 1
    assert later <= first


@pytest.mark.usefixtures("work_tools")
def test_a_single_call_past_its_timeout_is_answered_timed_out_and_the_run_goes_on(nrllm, threads):
    nrllm.config = {"run": {"tool_timeout_seconds": 0.2}}

    began = time.monotonic()
    hung = nrllm.run("go", script=[turn("hang"), {"content": "ok"}])
    # The abandoned call holds its thread: the next run's call runs on another one.
    after = nrllm.run("go", script=[turn("one"), {"content": "ok"}])

    assert time.monotonic() - began < 3
    assert (hung.status, after.status) == ("completed", "completed")
    assert answers(nrllm, hung.run_id) == ['Error: tool "note" timed out after 0.2 seconds.']
    assert answers(nrllm, after.run_id) == ["done one"]
    assert threads.distinct() == 2


def test_a_worker_answers_what_its_function_raised():
    def fail() -> None:
        raise KeyboardInterrupt

    future = Workers().submit(fail, keep=1)

    with pytest.raises(KeyboardInterrupt):
        future.result(5)

"""The calls of one turn run at once; answers and audit follow the model's call order."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import anyio
import pytest

from nrllm_core import (
    DataClass,
    Tool,
    ToolContext,
    ToolResult,
    tool,
)
from nrllm_core._payloads import StepKind

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")


class Timeline:
    """When each call of a test started and ended (monotonic seconds)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.spans: dict[str, tuple[float, float]] = {}
        self.started: list[str] = []

    def begin(self, label: str) -> float:
        with self.lock:
            self.started.append(label)
        return time.monotonic()

    def end(self, label: str, began: float) -> None:
        with self.lock:
            self.spans[label] = (began, time.monotonic())


def waiting_tools(timeline: Timeline) -> list[Tool]:
    """``wait`` (a sync tool) and ``await_`` (an ``async def`` one): each waits ``ms`` and
    answers its label, or fails when the label is ``boom``."""

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
    def wait(label: str, ms: int) -> ToolResult:
        """Wait, then answer the label."""
        began = timeline.begin(label)
        time.sleep(ms / 1000)
        timeline.end(label, began)
        if label == "boom":
            raise RuntimeError("secret-token-123 leaked in an exception")
        return ToolResult.text(f"done {label}")

    @tool(group="content", data_class=DataClass.PUBLIC_CONTENT, name="await_")
    async def await_(label: str, ms: int) -> ToolResult:
        """Wait on the event loop, then answer the label."""
        began = timeline.begin(label)
        await anyio.sleep(ms / 1000)
        timeline.end(label, began)
        if label == "boom":
            raise RuntimeError("secret-token-123 leaked in an exception")
        return ToolResult.text(f"done {label}")

    return [wait, await_]


def turn(name: str, *waits: tuple[str, int]) -> dict[str, Any]:
    return {
        "tool_calls": [
            {"id": f"call_{label}", "name": name, "arguments": {"label": label, "ms": ms}}
            for label, ms in waits
        ]
    }


def tool_answers(nrllm: Any) -> list[tuple[str, str]]:
    return [
        (e.step.fields["tool_call_id"], e.step.fields["tool_result"]) for e in tool_events(nrllm)
    ]


def tool_events(nrllm: Any) -> list[Any]:
    return [e for e in nrllm.sinks.trace if e.step.kind is StepKind.TOOL]


@pytest.fixture
def timeline() -> Timeline:
    return Timeline()


@pytest.mark.parametrize("name", ["wait", "await_"])
def test_later_calls_finishing_first_are_answered_and_audited_in_call_order(
    tools_plugin, nrllm, timeline, name
):
    nrllm.load(tools_plugin(*waiting_tools(timeline)))

    outcome = nrllm.run(
        "go", script=[turn(name, ("slow", 400), ("mid", 200), ("fast", 50)), {"content": "ok"}]
    )

    assert outcome.status == "completed"
    # They finished the other way round...
    ends = {label: span[1] for label, span in timeline.spans.items()}
    assert ends["fast"] < ends["mid"] < ends["slow"]
    # ...and ran at once: each started before the first one ended (the fast one waits a little,
    # so that a loaded machine starting the calls late cannot let it finish before the last starts).
    assert max(s for s, _ in timeline.spans.values()) < min(ends.values())
    assert tool_answers(nrllm) == [
        ("call_slow", "done slow"),
        ("call_mid", "done mid"),
        ("call_fast", "done fast"),
    ]
    sequences = [e.sequence for e in tool_events(nrllm)]
    assert sequences == sorted(sequences)
    stored = nrllm.host.store.get_run(outcome.run_id)
    tool_steps = [s for s in stored.steps if s.kind == "tool"]
    assert [s.payload["tool_name"] for s in tool_steps] == [name] * 3
    # The model got the answers back in its own order.
    history = nrllm.requests[-1][0]
    assert [m.tool_call_id for m in history if m.tool_call_id] == [
        "call_slow",
        "call_mid",
        "call_fast",
    ]


@pytest.mark.parametrize("name", ["wait", "await_"])
def test_max_parallel_tools_1_runs_the_calls_one_after_another_in_call_order(
    tools_plugin, nrllm, timeline, name
):
    nrllm.load(tools_plugin(*waiting_tools(timeline)))
    nrllm.config = {"run": {"max_parallel_tools": 1}}

    nrllm.run("go", script=[turn(name, ("a", 50), ("b", 0), ("c", 20)), {"content": "ok"}])

    assert timeline.started == ["a", "b", "c"]
    spans = [timeline.spans[label] for label in "abc"]
    for (_, first_end), (second_start, _) in itertools.pairwise(spans):
        assert first_end <= second_start


@pytest.mark.parametrize("name", ["wait", "await_"])
def test_a_failing_call_fails_alone_and_its_exception_never_reaches_the_wire(
    tools_plugin, nrllm, timeline, name
):
    nrllm.load(tools_plugin(*waiting_tools(timeline)))

    outcome = nrllm.run(
        "go", script=[turn(name, ("one", 30), ("boom", 0), ("two", 10)), {"content": "ok"}]
    )

    assert outcome.status == "completed"
    assert tool_answers(nrllm) == [
        ("call_one", "done one"),
        ("call_boom", f'Error: tool "{name}" failed.'),
        ("call_two", "done two"),
    ]
    assert [w.is_error for w in nrllm.sinks.wire] == [False, True, False]
    assert all("secret-token-123" not in w.content for w in nrllm.sinks.wire)


@pytest.mark.parametrize("name", ["wait", "await_"])
# One at a time, the abandoned call (it runs on) gives its place to the next one.
@pytest.mark.parametrize("parallel", [8, 1])
def test_a_call_past_its_timeout_is_answered_as_timed_out_and_the_others_go_on(
    tools_plugin, nrllm, timeline, name, parallel
):
    nrllm.load(tools_plugin(*waiting_tools(timeline)))
    nrllm.config = {"run": {"tool_timeout_seconds": 0.3, "max_parallel_tools": parallel}}

    started = time.monotonic()
    outcome = nrllm.run(
        "go", script=[turn(name, ("hang", 5_000), ("quick", 10)), {"content": "ok"}]
    )

    assert time.monotonic() - started < 4
    assert outcome.status == "completed"
    assert tool_answers(nrllm) == [
        ("call_hang", f'Error: tool "{name}" timed out after 0.3 seconds.'),
        ("call_quick", "done quick"),
    ]
    timed_out = tool_events(nrllm)[0].step.fields
    # Its own outcome: it ran, and did not answer in time.
    assert (timed_out["tool_is_error"], timed_out["tool_outcome"]) == (True, "timeout")


@pytest.mark.parametrize("name", ["wait", "await_"])
def test_a_turn_s_only_call_past_its_timeout_is_answered_as_timed_out(
    tools_plugin, nrllm, timeline, name
):
    nrllm.load(tools_plugin(*waiting_tools(timeline)))
    nrllm.config = {"run": {"tool_timeout_seconds": 0.3}}

    started = time.monotonic()
    outcome = nrllm.run("go", script=[turn(name, ("hang", 5_000)), {"content": "ok"}])

    assert time.monotonic() - started < 4
    assert outcome.status == "completed"
    assert tool_answers(nrllm) == [
        ("call_hang", f'Error: tool "{name}" timed out after 0.3 seconds.')
    ]


def test_the_run_settings_refuse_nonsense(nrllm):
    from nrllm_core import ConfigError

    for key, value, problem in [
        ("max_parallel_tools", 0, "must be greater than 0"),
        ("tool_threads", -1, "must be greater than 0"),
        ("tool_timeout_seconds", 0, "must be greater than 0"),
        ("tool_timeout_seconds", float("nan"), "must be greater than 0"),
        ("tool_timeout_seconds", float("inf"), "must be at most 315,360,000"),
    ]:
        nrllm.config = {"run": {key: value}}
        with pytest.raises(ConfigError, match=f"run.{key}: {problem}"):
            nrllm.host.config  # noqa: B018


class Gate:
    """Where a held tool waits until the test opens it; counts its runs."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.runs = 0


class HeldTool(Tool):
    """A sync tool that waits at its gate."""

    name = "held"
    description = "Waits for the test."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT

    def __init__(self, gate: Gate) -> None:
        self.gate = gate

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.gate.runs += 1
        self.gate.entered.set()
        self.gate.release.wait(10)
        return ToolResult.text("released")


def test_host_cancel_mid_turn_stops_the_pending_calls_and_settles_the_run_cancelled(
    tools_plugin, nrllm
):
    gate = Gate()
    nrllm.load(tools_plugin(HeldTool(gate)))
    nrllm.config = {"run": {"max_parallel_tools": 1}}
    three = {"tool_calls": [{"id": f"c{i}", "name": "held", "arguments": {}} for i in range(3)]}
    result: list[Any] = []
    runner = threading.Thread(
        target=lambda: result.append(nrllm.run("go", script=[three, {"content": "never"}]))
    )
    runner.start()
    assert gate.entered.wait(10)
    running = nrllm.host.runs("running")
    assert len(running) == 1
    assert nrllm.host.cancel(running[0].run_id)
    runner.join(10)
    gate.release.set()

    (outcome,) = result
    assert (outcome.status, outcome.termination_reason) == ("cancelled", "cancelled")
    # The call that was running is abandoned (a sync tool cannot be stopped: it ran, so its
    # outcome is an error, not a refusal); the two after it never started; the model was not
    # asked again.
    assert gate.runs == 1
    assert [a for _, a in tool_answers(nrllm)] == [
        "Error: the run was cancelled before this call finished."
    ] * 3
    assert [e.step.fields["tool_outcome"] for e in tool_events(nrllm)] == [
        "error",
        "refused",
        "refused",
    ]
    assert len(nrllm.requests) == 1
    stored = nrllm.host.store.get_run(outcome.run_id)
    assert (stored.run.status, stored.run.termination_reason) == ("cancelled", "cancelled")
    assert nrllm.host.cancel(outcome.run_id) is False

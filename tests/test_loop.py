"""The loop rules: rounds and the cap, step order, plain completions, synthesis, usage, failures.

Runs go through the ``nrllm`` fixture's host and its scripted model, whose requests it keeps;
the tests of the loop alone drive it on the fixture's plugin manager.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
import structlog
from structlog.testing import capture_logs

from nrllm_core import (
    Actor,
    ChatMessage,
    Effect,
    ProviderError,
    ProviderRegistry,
    RunRecorder,
    StepKind,
    ToolArtifact,
    ToolContext,
    ToolSpec,
    TraceEvent,
    Usage,
    hookimpl,
)
from nrllm_core._config import RunConfig
from nrllm_core._drive import drive
from nrllm_core._loop import (
    MAX_ROUNDS_CAP,
    MAX_ROUNDS_DEFAULT,
    PendingCall,
    SuspendedRunState,
    TerminationReason,
    ToolInvocation,
    ToolLoopResult,
    clamp_rounds,
    first_segment,
)
from nrllm_core._sealing import load_state_key, open_sealed
from nrllm_core.providers import ScriptedProvider

from .conftest import Counting, ToolsPlugin

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")


class _Asked:
    """A model for the loop alone, keeping the names of the tools each request offered."""

    def __init__(self, inner: ScriptedProvider) -> None:
        self._inner = inner
        self.tools: list[list[str]] = []

    def complete(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Any:
        self.tools.append([t.name for t in tools])
        return self._inner.complete(messages, tools)


class _Failing:
    def complete(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Any:
        raise ProviderError("upstream answered 503", status_code=503)


class _Crashing:
    def complete(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Any:
        raise RuntimeError("boom with api_key=sk-live-0123456789abcdefghij")


class BrokenModels:
    """Provider kinds whose model fails: ``failing`` with a provider error, ``crashing`` with
    an exception whose text holds a key."""

    @hookimpl
    def nrllm_register_providers(self, registry: ProviderRegistry) -> None:
        def failing(name: str, settings: Any, *, config_dir: Path | None, environ: Any) -> Any:
            return _Failing()

        def crashing(name: str, settings: Any, *, config_dir: Path | None, environ: Any) -> Any:
            return _Crashing()

        registry.register("failing", failing)
        registry.register("crashing", crashing)


def broken_model(nrllm: Any, kind: str) -> str:
    """Load the broken kinds and configure a model of ``kind``; returns its provider name."""
    nrllm.load(BrokenModels())
    nrllm.config = {"providers": {"model": {"kind": kind, "trust_zone": "local"}}}
    return "model"


def offered_per_request(nrllm: Any) -> list[list[str]]:
    """The names of the tools offered with each request the nrllm fixture's model received."""
    return [[spec.name for spec in tools] for _, tools in nrllm.requests]


def write_script(folder: Path, turns: list[dict[str, Any]]) -> Path:
    path = folder / f"script-{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return path


def calls(name: str, count: int = 1, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": arguments}] * count}


# -- rounds ---------------------------------------------------------------------------------------


def test_clamp_rounds_defaults_to_five_and_refuses_less_than_one():
    with capture_logs() as logs:
        assert clamp_rounds(None) == MAX_ROUNDS_DEFAULT == 5
        assert clamp_rounds(3) == 3
        assert clamp_rounds(20) == MAX_ROUNDS_CAP == 20
        for bad in (0, -4):
            with pytest.raises(ValueError, match="at least 1"):
                clamp_rounds(bad)
    assert logs == []


def test_a_larger_limit_is_clamped_to_twenty_with_a_warning():
    with capture_logs() as logs:
        assert clamp_rounds(50) == 20
    assert logs == [
        {"event": "nrllm.loop.rounds_clamped", "requested": 50, "cap": 20, "log_level": "warning"}
    ]


def test_the_default_run_has_five_rounds_then_one_tool_less_synthesis(nrllm):
    lookup = Counting("lookup")
    turns = [{**calls("lookup"), "content": f"answer {i}"} for i in range(10)]
    nrllm.load(ToolsPlugin(lookup))

    outcome = nrllm.run("go", script=turns)

    assert outcome.status == "completed"
    assert outcome.termination_reason == TerminationReason.MAX_ITERATIONS
    assert outcome.final_content == "answer 5"
    assert len(lookup.calls) == 5
    assert offered_per_request(nrllm) == [["lookup"]] * 5 + [[]]


def test_a_host_raises_its_round_cap_for_long_runs(nrllm):
    lookup = Counting("lookup")
    nrllm.load(ToolsPlugin(lookup))
    nrllm.config["run"] = {"max_rounds": 30, "max_rounds_cap": 120}
    model = nrllm.scripted([{**calls("lookup"), "content": f"t{i}"} for i in range(130)])

    default = nrllm.host.run("go", provider=model)
    with capture_logs() as logs:
        asked = nrllm.host.run("go", provider=model, max_rounds=150)

    assert len(lookup.calls) == 30 + 120
    assert (default.final_content, asked.final_content) == ("t30", "t120")
    assert {"event": "nrllm.loop.rounds_clamped", "requested": 150, "cap": 120} in [
        {k: v for k, v in entry.items() if k != "log_level"} for entry in logs
    ]


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ({"max_rounds_cap": 201}, "run.max_rounds_cap: must be from 1 to 200"),
        ({"max_rounds_cap": 0}, "run.max_rounds_cap: must be from 1 to 200"),
        ({"max_rounds": 0}, "run.max_rounds: must be from 1 to run.max_rounds_cap (20)"),
        ({"max_rounds": 30}, "run.max_rounds: must be from 1 to run.max_rounds_cap (20)"),
    ],
)
def test_the_round_settings_stay_within_the_hard_limit(run, message):
    from nrllm_core import ConfigError, load_config

    assert load_config(data={"run": {"max_rounds_cap": 200, "max_rounds": 200}})
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(data={"run": run})


def test_max_rounds_fifty_runs_twenty_rounds_and_warns(nrllm):
    lookup = Counting("lookup")
    nrllm.load(ToolsPlugin(lookup))
    model = nrllm.scripted([{**calls("lookup"), "content": f"t{i}"} for i in range(25)])

    with capture_logs() as logs:
        outcome = nrllm.host.run("go", provider=model, max_rounds=50)

    assert outcome.termination_reason == "max_iterations"
    assert outcome.final_content == "t20"
    assert len(lookup.calls) == 20
    assert len(nrllm.requests) == 21
    assert {"event": "nrllm.loop.rounds_clamped", "requested": 50, "cap": 20} in [
        {k: v for k, v in entry.items() if k != "log_level"} for entry in logs
    ]


def test_each_round_records_its_request_before_the_provider_call_then_the_answer(nrllm):
    nrllm.load(ToolsPlugin(Counting("lookup")))
    model = nrllm.scripted([calls("lookup", text="x"), {"content": "done"}])
    # Each step as it is recorded, with how many model calls had been made by then.
    seen: list[tuple[TraceEvent, int]] = []

    outcome = nrllm.host.run(
        "go", provider=model, on_event=lambda e: seen.append((e, len(nrllm.requests)))
    )

    assert outcome.status == "completed"
    # At the moment of each model call, the last recorded step is that round's request.
    last_before_each_call = [
        [(e.step.kind, e.step.round) for e, made in seen if made < call][-1]
        for call in range(1, len(nrllm.requests) + 1)
    ]
    assert last_before_each_call == [(StepKind.REQUEST, 1), (StepKind.REQUEST, 2)]
    steps = [(e.sequence, e.step.kind, e.step.round) for e, _ in seen]
    assert steps == [
        (1, StepKind.START, 0),
        (2, StepKind.GATE, 0),
        (3, StepKind.REQUEST, 1),
        (4, StepKind.LLM, 1),
        (5, StepKind.TOOL, 1),
        (6, StepKind.REQUEST, 2),
        (7, StepKind.LLM, 2),
        (8, StepKind.FINISH, 0),
    ]
    stored = nrllm.host.store.get_run(outcome.run_id)
    assert [(s.sequence, s.kind, s.round) for s in stored.steps] == steps


def test_an_answer_without_tool_calls_completes_the_run(nrllm):
    lookup = Counting("lookup")
    nrllm.load(ToolsPlugin(lookup))

    outcome = nrllm.run("hi", script=[{"content": "hello"}])

    assert (outcome.status, outcome.termination_reason) == ("completed", "completed")
    assert outcome.final_content == "hello"
    assert outcome.error is None
    assert lookup.calls == []
    assert offered_per_request(nrllm) == [["lookup"]]


@pytest.mark.parametrize("disabled", [False, True], ids=["none-registered", "all-disabled"])
def test_no_tools_offered_is_one_plain_completion_with_an_empty_tools_sequence(nrllm, disabled):
    lookup = Counting("lookup")
    turn = {**calls("lookup"), "content": "plain answer"}
    if disabled:
        nrllm.load(ToolsPlugin(lookup))
        nrllm.config = {"tools": {"disabled": ["lookup"]}}

    outcome = nrllm.run("hi", script=[turn])

    assert (outcome.status, outcome.termination_reason) == ("completed", "completed")
    assert outcome.final_content == "plain answer"
    assert offered_per_request(nrllm) == [[]]
    assert lookup.calls == []


def _loop(pm: Any, provider: Any, max_rounds: int) -> Any:
    recorder = RunRecorder(pm, "run-loop")
    core = first_segment(
        pm=pm,
        run_id="run-loop",
        provider_name="model",
        skill=None,
        messages=[ChatMessage.user("go")],
        offered=list(pm.catalog().tools.values()),
        permits=lambda tool: True,
        context_for=lambda call_id: ToolContext(
            run_id="run-loop", call_id=call_id, actor=Actor(id="alice")
        ),
        actor=Actor(id="alice"),
        max_rounds=max_rounds,
    )
    return drive(
        core,
        pm=pm,
        provider=provider,
        record=lambda effect: recorder.record(effect.step),
        limits=RunConfig(),
    )


def test_the_cap_with_calls_pending_ends_in_one_last_request_for_text(nrllm, tmp_path):
    nrllm.load(ToolsPlugin(Counting("lookup")))
    script = write_script(tmp_path, [{**calls("lookup"), "content": f"c{i}"} for i in range(5)])
    provider = _Asked(ScriptedProvider.load("model", script))

    outcome = _loop(nrllm.pm, provider, max_rounds=2)

    result = outcome.result
    assert outcome.suspended is None
    assert outcome.error is None
    assert result.termination_reason is TerminationReason.MAX_ITERATIONS
    # Cut off by the round cap, not by the answer's token limit.
    assert result.truncated is False
    assert result.iterations == 2
    assert result.final_content == "c2"
    assert [i.name for i in result.invocations] == ["lookup", "lookup"]
    # This provider takes no tool_choice: the last request for text only offers no tools.
    assert provider.tools == [["lookup"], ["lookup"], []]


def test_a_run_that_finishes_in_time_is_not_truncated(nrllm, tmp_path):
    nrllm.load(ToolsPlugin(Counting("lookup")))
    script = write_script(tmp_path, [calls("lookup"), {"content": "done"}])

    result = _loop(nrllm.pm, ScriptedProvider.load("model", script), max_rounds=2).result

    assert (result.termination_reason, result.truncated) == (TerminationReason.COMPLETED, False)
    assert result.iterations == 2


def test_usage_sums_every_model_call(nrllm):
    turns = [
        {**calls("lookup"), "usage": {"prompt_tokens": 10, "completion_tokens": 1}},
        {**calls("lookup"), "usage": {"prompt_tokens": 20, "completion_tokens": 2}},
        {"content": "done", "usage": {"prompt_tokens": 30, "completion_tokens": 3}},
    ]
    nrllm.load(ToolsPlugin(Counting("lookup")))

    outcome = nrllm.run("go", script=turns)

    assert outcome.usage == Usage(prompt_tokens=60, completion_tokens=6)
    (info,) = nrllm.host.runs()
    assert (info.prompt_tokens, info.completion_tokens) == (60, 6)


def test_usage_includes_the_synthesis_call(nrllm, tmp_path):
    nrllm.load(ToolsPlugin(Counting("lookup")))
    usage = {"prompt_tokens": 5, "completion_tokens": 1}
    script = write_script(tmp_path, [{**calls("lookup"), "usage": usage}] * 3)

    result = _loop(nrllm.pm, ScriptedProvider.load("model", script), max_rounds=2).result

    assert result.usage == Usage(prompt_tokens=15, completion_tokens=3)


def test_a_provider_error_fails_the_run_with_a_clear_message(nrllm):
    lookup = Counting("lookup")
    nrllm.load(ToolsPlugin(lookup))

    outcome = nrllm.host.run("go", provider=broken_model(nrllm, "failing"))

    assert outcome.status == "failed"
    assert outcome.termination_reason == "provider_failed"
    assert outcome.error == "the model provider failed: upstream answered 503"
    assert outcome.final_content == ""
    assert lookup.calls == []
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("failed", "provider_failed")


def test_a_provider_that_crashes_fails_the_run_without_its_text(nrllm):
    nrllm.load(ToolsPlugin(Counting("lookup")))
    model = broken_model(nrllm, "crashing")

    with structlog.testing.capture_logs() as logs:
        outcome = nrllm.host.run("go", provider=model)

    assert (outcome.status, outcome.termination_reason) == ("failed", "provider_failed")
    assert (
        outcome.error
        == "the model provider failed: the provider failed unexpectedly (RuntimeError)"
    )
    assert "sk-live" not in repr(outcome)
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["nrllm.provider.crashed"]
    (info,) = nrllm.host.runs()
    assert (info.status, info.termination_reason) == ("failed", "provider_failed")


def test_a_script_that_runs_out_fails_the_run_saying_so(nrllm):
    lookup = Counting("lookup")
    nrllm.load(ToolsPlugin(lookup))

    outcome = nrllm.run("go", script=[calls("lookup")])

    assert (outcome.status, outcome.termination_reason) == ("failed", "provider_failed")
    assert outcome.error is not None
    assert "ran out after 1 turns (turn 2 was asked for)" in outcome.error
    assert len(lookup.calls) == 1


# -- no artifact in resumable state ----------------------------------------------------------------


@pytest.mark.parametrize(
    "cls",
    [ToolLoopResult, SuspendedRunState, ToolInvocation, PendingCall],
    ids=lambda c: c.__name__,
)
def test_results_and_resumable_state_have_no_artifact_field(cls):
    names = [field.name for field in attrs.fields(cls)]
    assert names
    assert not [n for n in names if "artifact" in n.lower()]


def test_the_sealed_state_never_holds_an_artifact_from_an_earlier_turn(nrllm):
    sentinel = f"ARTIFACT-SENTINEL-{uuid.uuid4().hex}"
    lookup = Counting("lookup", content="lookup visible text", artifact=ToolArtifact.text(sentinel))
    save = Counting("save", effect=Effect.NON_IDEMPOTENT_WRITE)
    nrllm.load(ToolsPlugin(lookup, save))

    outcome = nrllm.run("go", script=[calls("lookup"), calls("save", text="x"), {"content": "ok"}])

    assert outcome.status == "awaiting_approval"
    # The tool did produce the artifact: it is in the trace.
    trace = nrllm.sinks.trace
    assert any(sentinel in a.data.get("text", "") for e in trace for a in e.step.tool_artifacts)
    suspension = nrllm.host.store.suspension(outcome.run_id)
    assert suspension is not None
    # The fixture's host keeps its state key in its folder, as a host keeps it in its data dir.
    key = load_state_key(nrllm.folder, {})
    plain = open_sealed(key, f"{outcome.run_id}:{outcome.turn_digest}", suspension.sealed)
    assert b"lookup visible text" in plain
    assert sentinel.encode() not in plain
    assert save.calls == []

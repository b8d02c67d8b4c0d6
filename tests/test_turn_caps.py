"""The caps of one model turn (``[run] max_tool_calls_per_turn``, ``[run] max_argument_bytes``,
one id per call): applied before the approval scan, answered through the refusal path, never
run."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    ConfigError,
    DataClass,
    Effect,
    Tool,
    ToolContext,
    ToolResult,
    load_config,
)
from nrllm_core._host import Host
from nrllm_core._json import dumps
from nrllm_core.testing import SinkRecorder

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")

TOO_MANY = "Error: too many tool calls in one turn (limit {})"
TOO_LARGE = "Error: the arguments of this call exceed {} bytes"
SAME_ID = "Error: another call of this turn has the same id"


class Counting(Tool):
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "additionalProperties": False,
    }

    def __init__(self, name: str, effect: Effect = Effect.READ_ONLY) -> None:
        self.name = name
        self.description = f"The {name} tool."
        self.effect = effect
        self.calls: list[dict[str, Any]] = []
        self.previews: list[dict[str, Any]] = []

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult.text(f"{self.name} done")

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        self.previews.append(arguments)
        return [f"would write {arguments.get('text', '')[:20]}"]


def call(name: str, text: str = "x", call_id: str | None = None) -> dict[str, Any]:
    made: dict[str, Any] = {"name": name, "arguments": {"text": text}}
    if call_id is not None:
        made["id"] = call_id
    return made


@pytest.fixture
def sinks() -> SinkRecorder:
    return SinkRecorder()


@pytest.fixture
def make_host(
    tmp_path: Path, sinks: SinkRecorder, tools_plugin: Any
) -> Iterator[Callable[..., Host]]:
    hosts: list[Host] = []

    def build(turns: list[dict[str, Any]], *tools: Tool, run: dict[str, Any] | None = None) -> Host:
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
        data: dict[str, Any] = {
            "providers": {
                "model": {"kind": "scripted", "script": str(script), "trust_zone": "local"}
            },
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
            "privacy": {"level": "full"},
        }
        if run is not None:
            data["run"] = run
        host = Host.from_config(
            data=data,
            plugins=[tools_plugin(*tools), sinks],
            load_entry_points=False,
            data_dir=tmp_path / "home",
            environ={},
        )
        hosts.append(host)
        return host

    yield build
    for host in hosts:
        host.store.close()


def tool_answers(host: Host, run_id: str) -> list[tuple[str, str, bool]]:
    steps = host.store.get_run(run_id).steps
    return [
        (s.payload["tool_call_id"], s.payload["tool_result"], s.payload["tool_is_error"])
        for s in steps
        if s.kind == "tool"
    ]


def model_saw(host: Host, run_id: str) -> list[tuple[str, str]]:
    """The tool answers in the last request the model received, in order."""
    (*_, last) = [s for s in host.store.get_run(run_id).steps if s.kind == "request"]
    return [
        (m["tool_call_id"], m["content"])
        for m in last.payload["messages_sent"]
        if m["role"] == "tool"
    ]


def test_calls_beyond_the_default_cap_of_32_are_answered_without_running(make_host, sinks):
    read = Counting("read_notes")
    calls = [call("read_notes", str(i)) for i in range(34)]
    host = make_host([{"tool_calls": calls}, {"content": "done"}], read)

    outcome = host.run("read a lot")

    assert outcome.status == "completed"
    # The first 32 ran (at once: in whatever order they started); the two after never did.
    assert sorted(int(c["text"]) for c in read.calls) == list(range(32))
    answers = model_saw(host, outcome.run_id)
    assert [content for _, content in answers] == ["read_notes done"] * 32 + [
        TOO_MANY.format(32)
    ] * 2
    # Answered in the model's order, each through the seam: on the wire and in the audit.
    assert [i for i, _ in answers] == [f"call_0_{i}" for i in range(34)]
    assert tool_answers(host, outcome.run_id)[-1] == ("call_0_33", TOO_MANY.format(32), True)
    assert [w.content for w in sinks.wire][-2:] == [TOO_MANY.format(32)] * 2


def test_a_write_beyond_the_cap_never_suspends_the_run(make_host):
    read = Counting("read_notes")
    write = Counting("write_note", Effect.NON_IDEMPOTENT_WRITE)
    turn = {"tool_calls": [call("read_notes"), call("read_notes"), call("write_note")]}
    host = make_host([turn, {"content": "done"}], read, write, run={"max_tool_calls_per_turn": 2})

    outcome = host.run("go")

    assert outcome.status == "completed"
    assert len(read.calls) == 2
    assert write.calls == []
    assert write.previews == []
    assert model_saw(host, outcome.run_id)[-1] == ("call_0_2", TOO_MANY.format(2))


def test_a_call_with_oversized_arguments_is_refused_before_the_approval_scan(make_host):
    write = Counting("write_note", Effect.NON_IDEMPOTENT_WRITE)
    big = "a" * 100_000
    assert len(dumps({"text": big})) > 100_000
    host = make_host([{"tool_calls": [call("write_note", big)]}, {"content": "done"}], write)

    outcome = host.run("go")

    assert outcome.status == "completed"
    assert write.calls == []
    assert write.previews == []
    assert model_saw(host, outcome.run_id) == [("call_0_0", TOO_LARGE.format(100_000))]


def test_the_argument_cap_counts_canonical_json_bytes(make_host):
    read = Counting("read_notes")
    fits = "é" * 9  # {"text":"…"} is 11 + 18 bytes: 29
    assert len(dumps({"text": fits})) == 29
    turn = {"tool_calls": [call("read_notes", fits), call("read_notes", fits + "a")]}
    host = make_host([turn, {"content": "done"}], read, run={"max_argument_bytes": 29})

    outcome = host.run("go")

    assert read.calls == [{"text": fits}]
    assert [c for _, c in model_saw(host, outcome.run_id)] == [
        "read_notes done",
        TOO_LARGE.format(29),
    ]


def test_a_capped_call_in_a_suspended_turn_stays_refused_after_approval(make_host):
    read = Counting("read_notes")
    write = Counting("write_note", Effect.NON_IDEMPOTENT_WRITE)
    turn = {"tool_calls": [call("read_notes", "a" * 200), call("write_note"), call("read_notes")]}
    host = make_host([turn, {"content": "done"}], read, write, run={"max_argument_bytes": 100})

    waiting = host.run("go")

    assert waiting.status == "awaiting_approval"
    first = waiting.pending[0]
    # The approver sees that it will not run, and why.
    assert (first.refusal, first.requires_approval, first.preview) == (
        TOO_LARGE.format(100),
        False,
        (TOO_LARGE.format(100),),
    )
    assert [p.refusal for p in waiting.pending[1:]] == [None, None]
    assert read.calls == []
    # Only the uncapped read was previewed: a refused call's code never runs.
    assert read.previews == [{"text": "x"}]

    done = host.approve(waiting.run_id, approver="bob", turn_digest=waiting.turn_digest)

    assert done.status == "completed"
    assert read.calls == [{"text": "x"}]
    assert write.calls == [{"text": "x"}]
    assert model_saw(host, waiting.run_id) == [
        ("call_0_0", TOO_LARGE.format(100)),
        ("call_0_1", "write_note done"),
        ("call_0_2", "read_notes done"),
    ]


@pytest.mark.parametrize("write_first", [True, False])
def test_calls_sharing_an_id_are_all_refused_so_a_write_cannot_borrow_a_reads_decision(
    make_host, sinks, write_first: bool
):
    read = Counting("read_notes")
    write = Counting("write_note", Effect.NON_IDEMPOTENT_WRITE)
    calls = [call("write_note", "pwned", "x"), call("read_notes", "a", "x")]
    if not write_first:
        calls.reverse()
    host = make_host(
        [{"tool_calls": [*calls, call("read_notes", "b", "y")]}, {"content": "done"}], read, write
    )

    outcome = host.run("go")

    # Neither call with the shared id ran, nor was previewed; the other call of the turn ran.
    assert outcome.status == "completed"
    assert write.calls == []
    assert write.previews == []
    assert read.calls == [{"text": "b"}]
    assert model_saw(host, outcome.run_id) == [
        ("x", SAME_ID),
        ("x", SAME_ID),
        ("y", "read_notes done"),
    ]
    kinds = [s.kind for s in host.store.get_run(outcome.run_id).steps]
    assert "suspension" not in kinds
    assert [w.content for w in sinks.wire][:2] == [SAME_ID, SAME_ID]


def test_a_write_reusing_an_earlier_turns_call_id_still_waits_for_a_person(make_host):
    read = Counting("read_notes")
    write = Counting("write_note", Effect.NON_IDEMPOTENT_WRITE)
    turns = [
        {"tool_calls": [call("read_notes", "a", "x")]},
        {"tool_calls": [call("write_note", "b", "x")]},
        {"content": "done"},
    ]
    host = make_host(turns, read, write)

    waiting = host.run("go")

    assert waiting.status == "awaiting_approval"
    assert read.calls == [{"text": "a"}]
    assert write.calls == []
    assert [(p.call_id, p.requires_approval) for p in waiting.pending] == [("x", True)]

    denied = host.approve(
        waiting.run_id, approve=False, approver="bob", turn_digest=waiting.turn_digest
    )

    assert denied.status == "completed"
    assert write.calls == []


def test_the_caps_default_to_32_calls_and_100000_bytes() -> None:
    run = load_config(data={}).run
    assert (run.max_tool_calls_per_turn, run.max_argument_bytes) == (32, 100_000)


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ({"max_tool_calls_per_turn": 0}, "run.max_tool_calls_per_turn: must be greater than 0"),
        ({"max_argument_bytes": -1}, "run.max_argument_bytes: must be greater than 0"),
        ({"max_argument_bytes": 1.5}, "run.max_argument_bytes: expected an integer"),
        ({"max_tool_calls": 3}, "run.max_tool_calls: unknown key"),
    ],
)
def test_a_bad_cap_is_a_config_error_naming_the_key(section: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(data={"run": section})

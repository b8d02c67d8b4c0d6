"""A host on scripted providers and in-test tools, for the inspector's API and browser tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    ArtifactType,
    ChatMessage,
    DataClass,
    ProviderAnswer,
    StreamRestarted,
    TextDelta,
    ThinkingDelta,
    Tool,
    ToolArtifact,
    ToolCall,
    ToolContext,
    ToolResult,
    ToolSpec,
    Usage,
    hookimpl,
    tool,
)
from nrllm_core._host import Host

HOSTILE_LABEL = "<img src=x onerror=\"document.title='pwned-label'\">"
HOSTILE_CELL = "<script>document.title='pwned-cell'</script>"
HOSTILE_TEXT = "<img src=x onerror=alert(1)><b>bold?</b>"

# Holds the `wait` tool until a test lets it go, so a run can be watched mid-flight.
RELEASE = threading.Event()


@tool(group="inspector", data_class=DataClass.PUBLIC_CONTENT)
def table_tool(city: str) -> ToolResult:
    """A table of one city."""
    return ToolResult.text(
        f"{city}: 2 rows",
        ToolArtifact.table(["city", "people"], [[city, "1000"], ["Other", "7"]], label="Cities"),
    )


@tool(group="inspector", data_class=DataClass.PUBLIC_CONTENT)
def plain_tool() -> ToolResult:
    """No artifacts at all."""
    return ToolResult.text("plain answer")


@tool(group="inspector", data_class=DataClass.PUBLIC_CONTENT)
def hostile_tool() -> ToolResult:
    """Artifacts holding markup, as an attacker-influenced source could."""
    return ToolResult.text(
        "hostile",
        ToolArtifact.table(["name", HOSTILE_CELL], [[HOSTILE_CELL, "x"]], label=HOSTILE_LABEL),
        ToolArtifact.text(HOSTILE_TEXT),
    )


# JSON values that String() and template strings cannot turn into text in a browser.
CRAFTED_CELL = {"toString": 1}
CRAFTED_COLUMN = ["a", 1]


@tool(group="inspector", data_class=DataClass.PUBLIC_CONTENT)
def crafted_tool() -> ToolResult:
    """A table whose column and cell are JSON values, not strings: the constructor allows it."""
    data = {"columns": ["name", CRAFTED_COLUMN], "rows": [[CRAFTED_CELL, "x"]]}
    crafted = ToolArtifact(type=ArtifactType.TABLE, label="Crafted", data=data)
    return ToolResult.text("crafted", crafted)


@tool(group="inspector", data_class=DataClass.PUBLIC_CONTENT)
def wait_tool() -> ToolResult:
    """Blocks until the test releases it."""
    RELEASE.wait(timeout=30)
    return ToolResult.text("released")


HOSTILE_PROGRESS = "<img src=x onerror=\"document.title='pwned-progress'\"> half"


class ProgressTool(Tool):
    name = "progress_tool"
    description = "Reports how far it got, in markup, then a progress JSON cannot carry."
    group = "inspector"
    data_class = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        context.report_progress(1, 2, HOSTILE_PROGRESS)
        context.report_progress(float("nan"), 2)
        context.report_progress(2, float("inf"))
        # Held like `wait_tool`: the page shows the progress before the call's step.
        RELEASE.wait(timeout=30)
        return ToolResult.text("progressed")


class SendTool(Tool):
    name = "send_mail"
    description = "Sends a mail; a person approves first."
    group = "inspector"
    data_class = DataClass.PUBLIC_CONTENT
    requires_approval = True
    parameters = {  # noqa: RUF012 - the Tool base class declares it as a class attribute
        "type": "object",
        "properties": {"to": {"type": "string"}},
        "required": ["to"],
        "additionalProperties": False,
    }

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text(f"sent to {arguments['to']}")

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str]:
        return [f"To: {arguments['to']}", "Subject: hello"]


class InspectorTools:
    @hookimpl
    def nrllm_register_tools(self, registry: Any) -> None:
        tools = (table_tool, plain_tool, hostile_tool, crafted_tool, wait_tool, ProgressTool())
        for t in (*tools, SendTool()):
            registry.register(t)


# -- a provider that streams ----------------------------------------------------------------------

HOSTILE_DELTA = "<img src=x onerror=\"document.title='pwned-delta'\"><b>bold?</b>"
# Hold the `gated` provider's stream at two points until a test lets each go.
GATES = (threading.Event(), threading.Event())
Piece = TextDelta | ThinkingDelta | StreamRestarted | threading.Event

# Each streaming provider's turns: the pieces it streams (an event is waited on) and the
# calls it asks for; its answer's text is what it streamed after its last restart.
STREAMS: dict[str, list[tuple[list[Piece], tuple[ToolCall, ...]]]] = {
    "streamed": [
        (
            [
                ThinkingDelta(text="A table "),
                ThinkingDelta(text="helps."),
                TextDelta(text="Let "),
                TextDelta(text="me "),
                TextDelta(text="look."),
            ],
            (ToolCall(id="c0", name="table_tool", arguments={"city": "Oslo"}),),
        ),
        ([TextDelta(text="Oslo "), TextDelta(text="has "), TextDelta(text="1000.")], ()),
    ],
    "restarted": [
        (
            [
                TextDelta(text="A broken "),
                TextDelta(text="answ"),
                StreamRestarted(),
                TextDelta(text="The whole "),
                TextDelta(text="answer."),
            ],
            (),
        )
    ],
    "gated": [
        (
            [
                TextDelta(text="First words"),
                GATES[0],
                TextDelta(text=HOSTILE_DELTA),
                GATES[1],
                TextDelta(text=" Last words."),
            ],
            (),
        )
    ],
}


class _Streaming:
    __slots__ = ("_turns",)

    def __init__(self, turns: list[tuple[list[Piece], tuple[ToolCall, ...]]]) -> None:
        self._turns = turns

    def complete(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Any:
        return self.stream(messages, tools, on_delta=lambda delta: None)

    def stream(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: str = "auto",
        on_delta: Callable[[Any], None],
    ) -> ProviderAnswer:
        pieces, calls = self._turns[sum(1 for m in messages if m.role.value == "assistant")]
        text: list[str] = []
        thinking: list[str] = []
        for piece in pieces:
            if isinstance(piece, threading.Event):
                piece.wait(timeout=30)
                continue
            on_delta(piece)
            if isinstance(piece, StreamRestarted):
                text.clear()
                thinking.clear()
            else:
                (text if isinstance(piece, TextDelta) else thinking).append(piece.text)
        return ProviderAnswer(
            content="".join(text),
            thinking="".join(thinking) or None,
            tool_calls=calls,
            usage=Usage(),
            finish_reason="tool_calls" if calls else "stop",
        )


class StreamingProviders:
    """The provider kind ``streaming``: a provider named after its entry in ``STREAMS``."""

    @hookimpl
    def nrllm_register_providers(self, registry: Any) -> None:
        registry.register("streaming", lambda name, *args, **kwargs: _Streaming(STREAMS[name]))


def _calls(*names_and_args: tuple[str, dict[str, Any]]) -> str:
    calls = ", ".join(
        f'{{ name = "{name}", id = "c{i}", arguments = {_toml(args)} }}'
        for i, (name, args) in enumerate(names_and_args)
    )
    return f'[[turns]]\ncontent = "Calling."\ntool_calls = [{calls}]\n'


def _toml(args: dict[str, Any]) -> str:
    return "{ " + ", ".join(f'{k} = "{v}"' for k, v in args.items()) + " }"


def _final(text: str) -> str:
    return f'[[turns]]\ncontent = "{text}"\n'


SCRIPTS = {
    "demo": _calls(("table_tool", {"city": "Oslo"}), ("plain_tool", {})) + _final("Oslo it is."),
    "hostile": _calls(("hostile_tool", {})) + _final("Shown as text."),
    "crafted": _calls(("crafted_tool", {}), ("plain_tool", {})) + _final("Still rendering."),
    "mail": _calls(("send_mail", {"to": "ops@example.org"})) + _final("Mail sent."),
    "slow": _calls(("wait_tool", {})) + _final("Waited."),
    "progress": _calls(("progress_tool", {})) + _final("Progressed."),
    "asking": _calls(("ask_tool", {})) + _final("Asked."),
    "empty": "turns = []\n",
    "counted": _final("Counted.")
    + "usage = { prompt_tokens = 120, completion_tokens = 30, cached_tokens = 64,"
    + " reasoning_tokens = 12 }\n",
}


def write_config(folder: Path, *, streaming: bool) -> Path:
    sections = []
    for name, script in SCRIPTS.items():
        (folder / f"{name}.toml").write_text(script, encoding="utf-8")
        sections.append(
            f'[providers.{name}]\nkind = "scripted"\nscript = "{name}.toml"\ntrust_zone = "local"\n'
        )
    for name in STREAMS if streaming else ():
        sections.append(f'[providers.{name}]\nkind = "streaming"\ntrust_zone = "local"\n')
    sections.append('[defaults]\nprovider = "demo"\n')
    sections.append('[skills.tables]\nallowed_tools = ["table_tool"]\n')
    sections.append('[actor]\nid = "operator"\n')
    path = folder / "nrllm.toml"
    path.write_text("\n".join(sections), encoding="utf-8")
    return path


def make_host(
    folder: Path,
    environ: dict[str, str] | None = None,
    *,
    streaming: bool = True,
    plugins: Sequence[object] = (),
    on_elicitation: Any = None,
) -> Host:
    """A host on the scripted providers and, with ``streaming``, the in-test streaming ones
    (a process that loads no in-test plugin can read only a configuration without them)."""
    return Host.from_config(
        write_config(folder, streaming=streaming),
        plugins=[InspectorTools(), StreamingProviders(), *plugins],
        load_entry_points=False,
        data_dir=folder / "data",
        environ=environ or {},
        on_elicitation=on_elicitation,
    )


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return make_host(tmp_path)


@pytest.fixture
def host_factory() -> Any:
    return make_host


@pytest.fixture
def hostile() -> dict[str, str]:
    return {"label": HOSTILE_LABEL, "cell": HOSTILE_CELL, "text": HOSTILE_TEXT}


@pytest.fixture
def hostile_delta() -> str:
    return HOSTILE_DELTA


@pytest.fixture
def gates() -> Any:
    """The points the `gated` provider's stream waits at; cleared before, set after a test."""
    for gate in GATES:
        gate.clear()
    yield GATES
    for gate in GATES:
        gate.set()


@pytest.fixture
def release() -> Any:
    """The event the `wait` tool blocks on; cleared before and set after each test."""
    RELEASE.clear()
    yield RELEASE
    RELEASE.set()


def seed_runs(data_dir: Path, runs: Sequence[dict[str, Any]]) -> None:
    """Store ``runs`` beside a host's own, each at its ``started_at``, through the store's
    public writes: ``tools`` become tool steps (``failed`` ones errors), ``tokens`` one model
    step, and a ``status`` other than running settles the run a minute after it started."""
    from datetime import timedelta

    from nrllm_core._payloads import AuditRecord, StepKind
    from nrllm_core.store import RunKind, RunStatus, Store

    now: list[Any] = [None]
    store = Store.open(None, data_dir=data_dir, environ={}, clock=lambda: now[0])
    try:
        for run in runs:
            now[0] = run["started_at"]
            run_id = run["run_id"]
            store.start_run(
                run_id,
                kind=RunKind(run.get("kind", "run")),
                provider=run.get("provider"),
                actor=run.get("actor"),
            )
            steps: list[tuple[StepKind, float, dict[str, Any]]] = []
            if "tokens" in run:
                steps.append((StepKind.LLM, 40.0, run["tokens"]))
            for tool_name in run.get("tools", ()):
                failed = tool_name in run.get("failed", ())
                steps.append(
                    (StepKind.TOOL, 5.0, {"tool_name": tool_name, "tool_is_error": failed})
                )
            for sequence, (kind, duration, fields) in enumerate(steps, start=1):
                store.record_step(
                    AuditRecord(
                        run_id=run_id,
                        sequence=sequence,
                        kind=kind,
                        round=1,
                        duration_ms=duration,
                        payload={"kind": kind.value, "round": 1, "duration_ms": duration, **fields},
                    )
                )
            status = RunStatus(run.get("status", "completed"))
            if status is not RunStatus.RUNNING:
                now[0] = run["started_at"] + timedelta(minutes=1)
                store.finish_run(run_id, status)
    finally:
        store.close()


# Five runs of the past for the Runs view: kinds, statuses, providers, actors, tools, tokens.
T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

RUNS: list[dict[str, Any]] = [
    {
        "run_id": "r1",
        "started_at": T0,
        "provider": "demo",
        "actor": "ana",
        "tools": ["search"],
        "tokens": {"prompt_tokens": 100, "completion_tokens": 20, "cached_tokens": 60},
    },
    {"run_id": "r2", "started_at": T0 + timedelta(hours=1), "status": "failed", "actor": "bo"},
    {
        "run_id": "r3",
        "started_at": T0 + timedelta(hours=2),
        "kind": "invoke",
        "actor": "ana",
        "tools": ["fetch"],
    },
    {
        "run_id": "r4",
        "started_at": T0 + timedelta(hours=3),
        "provider": "other",
        "tools": ["search", "fetch", "search"],
        "failed": ["fetch"],
        "tokens": {
            "prompt_tokens": 10,
            "completion_tokens": 5,
            "reasoning_tokens": 3,
            "cached_tokens": "lots",
        },
    },
    # Started at the same moment as r4: the run id orders the two.
    {"run_id": "r5", "started_at": T0 + timedelta(hours=3), "provider": "demo"},
]

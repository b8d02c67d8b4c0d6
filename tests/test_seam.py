"""The invoke seam: its order of checks, bounding, and what each sink receives."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from nrllm_core import (
    ARTIFACTS_MAX_BYTES,
    CONTENT_MAX_BYTES,
    Actor,
    ArtifactType,
    AuditRecord,
    RegisteredTool,
    Tool,
    ToolArtifact,
    ToolContext,
    ToolResult,
    TraceEvent,
    WirePayload,
    hookimpl,
    invoke,
    make_plugin_manager,
    tool,
)
from nrllm_core._json import dumps
from nrllm_core._payloads import RunStep, StepKind, builder
from nrllm_core._serde import wire_dict
from nrllm_core.testing import SinkRecorder

FAKE_SECRET = "sk-live-FAKE-SECRET-0123456789abcdef"
MARKERS = (
    (ToolArtifact.text("could not be encoded", label="Artifacts omitted"),),
    (ToolArtifact.text("exceeded 50000 bytes", label="Artifacts omitted"),),
)


class CountingTool(Tool):
    """A tool that counts its executions and returns whatever it was told to."""

    group = "rag"
    description = "Counts its calls."

    def __init__(self, name: str = "counter", returns: object = None, **attributes: Any) -> None:
        self.name = name
        self.calls: list[dict[str, Any]] = []
        self.returns = ToolResult.text("counted") if returns is None else returns
        for key, value in attributes.items():
            setattr(self, key, value)

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return self.returns  # type: ignore[return-value]


class RaisingTool(Tool):
    name = "leaky"
    group = "rag"
    description = "Raises with a credential in the message."

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        raise RuntimeError(f"connection failed with token {FAKE_SECRET}")


def everything_delivered(sinks) -> str:
    return repr([*sinks.wire, *sinks.trace, *sinks.audit])


def test_success_goes_to_every_sink_in_its_own_shape(make_pm, sinks, context):
    table = ToolArtifact.table(["k"], [["v"]], label="T")
    counter = CountingTool(returns=ToolResult.text("done", table))
    pm = make_pm(counter)
    wire = invoke(pm, "counter", {}, context=context)
    assert wire == WirePayload(
        call_id="call-1", tool_name="counter", content="done", is_error=False
    )
    assert sinks.wire == [wire]
    (event,) = sinks.trace
    assert isinstance(event, TraceEvent)
    assert event.run_id == "run-1"
    assert event.sequence == 1
    assert event.step.tool_artifacts == (table,)
    assert event.step.fields["tool_name"] == "counter"
    assert event.step.fields["tool_result"] == "done"
    assert event.step.fields["tool_is_error"] is False
    (record,) = sinks.audit
    assert isinstance(record, AuditRecord)
    assert record.sequence == 1
    # Without a configured privacy level the audit copy is the metadata summary.
    assert "tool_artifacts" not in record.payload
    assert record.payload["tool_artifacts_count"] == 1
    assert record.payload["tool_artifact_types"] == ["table"]
    assert counter.calls == [{}]


def test_unknown_tool(make_pm, sinks, context):
    wire = invoke(make_pm(), "nope", {}, context=context)
    assert wire.content == 'Error: unknown tool "nope"'
    assert wire.is_error is True
    assert sinks.wire == [wire]
    assert len(sinks.trace) == len(sinks.audit) == 1


def test_unknown_is_checked_before_offered(make_pm, context):
    asked: list[str] = []

    def offered(t: RegisteredTool) -> bool:
        asked.append(t.name)
        return False

    wire = invoke(make_pm(), "nope", {}, context=context, offered=offered)
    assert wire.content == 'Error: unknown tool "nope"'
    assert asked == []


def test_not_offered_is_never_executed(make_pm, context):
    counter = CountingTool()
    seen: list[RegisteredTool] = []

    def offered(t: RegisteredTool) -> bool:
        seen.append(t)
        return False

    wire = invoke(make_pm(counter), "counter", {}, context=context, offered=offered)
    assert wire.content == 'Error: tool "counter" not permitted'
    assert wire.is_error is True
    assert counter.calls == []
    assert [t.name for t in seen] == ["counter"]
    assert isinstance(seen[0], RegisteredTool)


def test_offered_is_checked_before_arguments(make_pm, context):
    wire = invoke(
        make_pm(CountingTool()),
        "counter",
        {"unexpected": 1},
        context=context,
        offered=lambda t: False,
    )
    assert wire.content == 'Error: tool "counter" not permitted'


def test_offered_tool_runs(make_pm, context):
    counter = CountingTool()
    wire = invoke(make_pm(counter), "counter", {}, context=context, offered=lambda t: True)
    assert wire.content == "counted"
    assert counter.calls == [{}]


def test_a_raising_tool_logs_the_exception_but_never_sends_it(make_pm, sinks, context):
    pm = make_pm(RaisingTool())
    with capture_logs(processors=[structlog.processors.format_exc_info]) as logs:
        wire = invoke(pm, "leaky", {}, context=context)
    assert wire.content == 'Error: tool "leaky" failed.'
    assert wire.is_error is True
    assert FAKE_SECRET not in everything_delivered(sinks)
    assert FAKE_SECRET not in repr(wire)
    (entry,) = [e for e in logs if e["event"] == "nrllm.tool.failed"]
    assert entry["tool"] == "leaky"
    assert entry["call_id"] == "call-1"
    assert entry["log_level"] == "error"
    assert FAKE_SECRET in entry["exception"]


@pytest.mark.parametrize(
    "returned",
    [
        "a plain string",
        {"content": "x", "is_error": False},
        ToolArtifact.text("x"),
        ["list"],
        0,
    ],
    ids=["str", "dict", "artifact", "list", "int"],
)
def test_anything_but_a_tool_result_is_an_error(make_pm, sinks, context, returned):
    wire = invoke(make_pm(CountingTool(returns=returned)), "counter", {}, context=context)
    assert wire.content == 'Error: tool "counter" returned no ToolResult.'
    assert wire.is_error is True
    (event,) = sinks.trace
    assert event.step.tool_artifacts == ()


def test_returning_none_is_an_error(make_pm, context):
    class NoneTool(CountingTool):
        def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
            return None  # type: ignore[return-value]

    wire = invoke(make_pm(NoneTool()), "counter", {}, context=context)
    assert wire.content == 'Error: tool "counter" returned no ToolResult.'


@tool(group="rag")
def add(a: int, b: int = 1) -> ToolResult:
    """Add two integers."""
    return ToolResult.text(str(a + b))


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"a": "x"}, "$.a: 'x' is not of type 'integer'"),
        ({}, "$: 'a' is a required property"),
        ({"a": 1, "b": 2.5}, "$.b: 2.5 is not of type 'integer'"),
        (
            {"a": 1, "c": 3},
            "$: Additional properties are not allowed ('c' was unexpected)",
        ),
    ],
    ids=["wrong-type", "missing", "wrong-type-optional", "extra"],
)
def test_schema_invalid_arguments_are_refused_without_executing(
    make_pm, context, arguments, problem
):
    calls: list[dict[str, Any]] = []

    @tool(group="rag", name="add")
    def spy(a: int, b: int = 1) -> ToolResult:
        """Add two integers."""
        calls.append({"a": a, "b": b})
        return ToolResult.text(str(a + b))

    wire = invoke(make_pm(spy), "add", arguments, context=context)
    assert wire.content == f'Error: invalid arguments for tool "add": {problem}'
    assert wire.is_error is True
    assert calls == []


def test_valid_arguments_are_passed_as_keywords(make_pm, context):
    assert invoke(make_pm(add), "add", {"a": 2, "b": 3}, context=context).content == "5"
    assert invoke(make_pm(add), "add", {"a": 2}, context=context).content == "3"


def test_arguments_that_are_not_an_object_are_refused(make_pm, context):
    counter = CountingTool()
    wire = invoke(make_pm(counter), "counter", ["a"], context=context)  # type: ignore[arg-type]
    assert wire.content == 'Error: invalid arguments for tool "counter": $: not a JSON object'
    assert counter.calls == []


def test_a_tool_that_checks_its_own_arguments_skips_the_schema(make_pm, context):
    strict = CountingTool(
        name="strict",
        parameters={
            "type": "object",
            "properties": {"n": {"type": "integer"}},
            "required": ["n"],
            "additionalProperties": False,
        },
    )
    own = CountingTool(name="own", parameters=strict.parameters, checks_own_arguments=True)
    pm = make_pm(strict, own)
    assert invoke(pm, "strict", {"n": "x"}, context=context).is_error
    assert strict.calls == []
    wire = invoke(pm, "own", {"n": "x", "extra": True}, context=context)
    assert wire.content == "counted"
    assert own.calls == [{"n": "x", "extra": True}]


def test_arguments_are_checked_against_the_argument_schema_when_a_tool_has_one(make_pm, context):
    offered = {"type": "object", "properties": {"n": {"type": "integer"}}}
    checked = {**offered, "required": ["n"], "dependentRequired": {"n": ["m"]}}
    narrow = CountingTool(name="narrow", parameters=offered, argument_schema=checked)
    pm = make_pm(narrow)
    assert pm.catalog().tools["narrow"].parameters == offered
    wire = invoke(pm, "narrow", {}, context=context)
    assert (
        wire.content
        == "Error: invalid arguments for tool \"narrow\": $: 'n' is a required property"
    )
    wire = invoke(pm, "narrow", {"n": 1}, context=context)
    assert wire.content == (
        "Error: invalid arguments for tool \"narrow\": $: 'm' is a dependency of 'n'"
    )
    assert narrow.calls == []
    assert invoke(pm, "narrow", {"n": 1, "m": 2}, context=context).content == "counted"


@pytest.mark.parametrize(
    ("schema", "problem"),
    [
        ({"type": 7}, "argument_schema is not a valid JSON Schema: "),
        (["type"], "argument_schema has the wrong type"),
    ],
)
def test_an_argument_schema_that_is_no_schema_refuses_the_tool(schema, problem) -> None:
    from nrllm_core import ToolRegistry

    with pytest.raises((TypeError, ValueError), match=problem):
        ToolRegistry().register(CountingTool(argument_schema=schema))


def test_error_results_keep_their_content_and_lose_nothing_else(make_pm, context):
    failing = CountingTool(returns=ToolResult.error("Error: not found"))
    wire = invoke(make_pm(failing), "counter", {}, context=context)
    assert wire.content == "Error: not found"
    assert wire.is_error is True


def test_both_channels_are_bounded(make_pm, sinks, context):
    huge = ToolResult.text("\udcff" + "x" * 200_000, ToolArtifact.text("y" * 60_000))
    wire = invoke(make_pm(CountingTool(returns=huge)), "counter", {}, context=context)
    assert wire.content.startswith("\ufffdx")
    assert wire.content.endswith("\n…[tool result truncated at 50000 bytes]")
    assert len(wire.content.encode()) <= CONTENT_MAX_BYTES
    (event,) = sinks.trace
    assert event.step.tool_artifacts == MARKERS[1]
    assert event.step.fields["tool_result"] == wire.content


def test_the_tool_context_arrives_unchanged(make_pm, context):
    seen: list[ToolContext] = []

    @tool(group="rag")
    def who(context: ToolContext) -> ToolResult:
        """Say who is calling."""
        seen.append(context)
        return ToolResult.text(context.actor.id)

    assert invoke(make_pm(who), "who", {}, context=context).content == "tester"
    assert seen == [context]


class FailingSinks:
    @hookimpl
    def nrllm_wire(self, payload: WirePayload) -> None:
        raise RuntimeError("wire sink down")

    @hookimpl
    def nrllm_trace(self, event: TraceEvent) -> None:
        raise RuntimeError("trace sink down")

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        raise RuntimeError("audit sink down")


@pytest.mark.parametrize("failing_first", [True, False], ids=["failing-first", "failing-last"])
def test_a_failing_sink_does_not_stop_the_others(sinks_class, tools_plugin, context, failing_first):
    good = sinks_class()
    plugins: list[object] = [tools_plugin(CountingTool())]
    # pluggy calls the most recently registered implementation first.
    plugins += [good, FailingSinks()] if failing_first else [FailingSinks(), good]
    pm = make_plugin_manager(plugins=plugins, load_entry_points=False)
    with capture_logs() as logs:
        wire = invoke(pm, "counter", {}, context=context)
    assert good.wire == [wire]
    assert len(good.trace) == 1
    assert len(good.audit) == 1
    failed = [e for e in logs if e["event"] == "nrllm.sink.failed"]
    assert sorted(e["hook"] for e in failed) == ["nrllm_audit", "nrllm_trace", "nrllm_wire"]
    assert all(e["log_level"] == "error" for e in failed)


def test_each_sink_receives_only_its_own_payload_type(make_pm, sinks, context):
    pm = make_pm(CountingTool(returns=ToolResult.text("x", ToolArtifact.text("a"))))
    for _ in range(3):
        invoke(pm, "counter", {}, context=context)
    invoke(pm, "missing", {}, context=context)
    assert len(sinks.wire) == len(sinks.trace) == len(sinks.audit) == 4
    assert all(type(p) is WirePayload for p in sinks.wire)
    assert all(type(e) is TraceEvent for e in sinks.trace)
    assert all(type(r) is AuditRecord for r in sinks.audit)


def test_the_wire_payload_has_no_artifact_field():
    names = [f.name for f in attrs.fields(WirePayload)]
    assert names == ["call_id", "tool_name", "content", "is_error"]
    assert not any("artifact" in name for name in names)
    payload = WirePayload(call_id="c", tool_name="t", content="x", is_error=False)
    assert not hasattr(payload, "artifacts")
    with pytest.raises(AttributeError):
        payload.artifacts = ()  # type: ignore[attr-defined]


def test_payloads_are_frozen():
    payload = WirePayload(call_id="c", tool_name="t", content="x", is_error=False)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        payload.content = "y"  # type: ignore[misc]


# -- properties -----------------------------------------------------------------------------------

surrogate_text = st.lists(
    st.one_of(st.text(max_size=20), st.sampled_from(["\ud800", "\udcff", "\udfff", "é", "😀"]))
).map("".join)
keys = st.text(max_size=8)


def planted_leaves(sentinel: str) -> st.SearchStrategy[object]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(),  # NaN and Infinity included
        surrogate_text,
        st.just(sentinel),
        st.just(sentinel + "\udcff"),
        st.integers(min_value=1, max_value=3000).map(lambda n: sentinel * n),
        st.sampled_from([object(), b"bytes", {1, 2}]),
    )


def trees(sentinel: str) -> st.SearchStrategy[object]:
    return st.recursive(
        planted_leaves(sentinel),
        lambda children: (
            st.lists(children, max_size=5)
            | st.dictionaries(keys, children, max_size=5)
            | st.tuples(st.integers(min_value=1, max_value=80), children).map(
                lambda pair: deep(pair[1], pair[0])
            )
        ),
        max_leaves=20,
    )


def deep(value: object, levels: int) -> object:
    for _ in range(levels):
        value = [value]
    return value


def artifacts(sentinel: str) -> st.SearchStrategy[list[ToolArtifact]]:
    artifact = st.builds(
        lambda kind, label, data: ToolArtifact(type=kind, label=label, data=data),
        st.sampled_from(ArtifactType),
        st.one_of(surrogate_text, st.just(sentinel)),
        trees(sentinel),
    )
    planted = st.just(ToolArtifact.text(sentinel, label=sentinel))
    return st.tuples(st.lists(artifact, max_size=4), planted, st.integers(0, 4)).map(
        lambda t: [*t[0][: t[2]], t[1], *t[0][t[2] :]]
    )


@st.composite
def results(draw: st.DrawFn) -> tuple[str, ToolResult]:
    sentinel = draw(st.uuids().map(lambda u: f"SENTINEL{u.hex}"))
    content = draw(
        st.one_of(
            surrogate_text,
            st.integers(min_value=CONTENT_MAX_BYTES - 10, max_value=CONTENT_MAX_BYTES + 10).map(
                lambda n: "ü" * (n // 2) + "a" * (n % 2)
            ),
            st.integers(min_value=1, max_value=300_000).map(lambda n: "\udcff" * n),
        )
    )
    if draw(st.booleans()):
        return sentinel, ToolResult.error(content)
    return sentinel, ToolResult.text(content, *draw(artifacts(sentinel)))


class ReturnsGiven(Tool):
    name = "given"
    group = "rag"
    description = "Returns the result it holds."

    def __init__(self, result: ToolResult) -> None:
        self.result = result

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return self.result


class ToolPlugin:
    def __init__(self, held: Tool) -> None:
        self.held = held

    @hookimpl
    def nrllm_register_tools(self, registry: Any) -> None:
        registry.register(self.held)


@given(results())
def test_property_no_sentinel_reaches_the_wire_and_both_channels_are_bounded(drawn):
    sentinel, result = drawn
    capture = SinkRecorder()
    pm = make_plugin_manager(
        plugins=[ToolPlugin(ReturnsGiven(result)), capture], load_entry_points=False
    )
    context = ToolContext(run_id="r", call_id="c", actor=Actor(id="a"))
    returned = invoke(pm, "given", {}, context=context)

    (wire,) = capture.wire
    assert wire is returned
    for payload in (wire, returned):
        assert sentinel not in repr(payload)
        assert all(sentinel not in str(getattr(payload, f.name)) for f in attrs.fields(WirePayload))
    assert sentinel not in dumps(wire_dict(wire)).decode()

    encoded = wire.content.encode("utf-8")
    assert len(encoded) <= CONTENT_MAX_BYTES
    assert wire.is_error is result.is_error

    (event,) = capture.trace
    bounded = event.step.tool_artifacts
    assert event.step.fields["tool_result"] == wire.content
    if bounded not in MARKERS:
        assert len(dumps([a.to_dict() for a in bounded])) <= ARTIFACTS_MAX_BYTES
        assert len(bounded) == len(result.artifacts)


def test_read_only_mappings_are_validated_as_objects(make_pm, sinks, context):
    # Tool calls parsed from a provider hold their arguments in a read-only mapping.
    from types import MappingProxyType

    from nrllm_core import tool as make_tool

    @make_tool(group="content")
    def shout(text: str) -> ToolResult:
        """Shout the text."""
        return ToolResult.text(text.upper())

    wire = invoke(make_pm(shout), "shout", MappingProxyType({"text": "hi"}), context=context)
    assert (wire.content, wire.is_error) == ("HI", False)


def test_arguments_that_break_the_validator_are_refused_not_raised(make_pm, sinks, context):
    from nrllm_core import tool as make_tool

    ran: list[object] = []

    @make_tool(group="content")
    def count(x: int) -> ToolResult:
        """Count."""
        ran.append(x)
        return ToolResult.text("ran")

    deep: object = 1
    for _ in range(1_000):
        deep = [deep]
    wire = invoke(make_pm(count), "count", {"x": deep}, context=context)
    assert wire.is_error
    assert wire.content.startswith('Error: invalid arguments for tool "count": ')
    assert ran == []


def test_a_result_forged_with_evolve_is_refused(make_pm, sinks, context):
    import attrs

    forged = ToolResult.error("oops")
    with pytest.raises(TypeError, match=r"ToolResult\.text"):
        attrs.evolve(forged, artifacts=(ToolArtifact.text("x" * 10),))


def test_an_error_result_never_carries_artifacts_to_the_trace(make_pm, sinks, context):
    # However a tool built it, an error result reaches the sinks without artifacts.
    result = ToolResult.error("no")
    object.__setattr__(result, "artifacts", (ToolArtifact.text("smuggled"),))
    tool = CountingTool(returns=result)
    invoke(make_pm(tool), "counter", {}, context=context)
    (event,) = sinks.trace
    assert event.step.tool_artifacts == ()


def test_a_result_with_fields_of_the_wrong_type_is_no_tool_result(make_pm, sinks, context):
    result = ToolResult.text("fine")
    object.__setattr__(result, "content", b"bytes")
    wire = invoke(make_pm(CountingTool(returns=result)), "counter", {}, context=context)
    assert wire.content == 'Error: tool "counter" returned no ToolResult.'


# --- the builders of the seam's frozen objects --------------------------------------------


def _every_field() -> list[tuple[type[Any], dict[str, Any]]]:
    from nrllm_core._invoke import Admitted, Executed

    context = ToolContext(run_id="r", call_id="c", actor=Actor(id="a"), settings={"p": {}})
    result = ToolResult.text("x")
    return [
        (WirePayload, {"call_id": "c", "tool_name": "t", "content": "x", "is_error": False}),
        (
            RunStep,
            {"kind": StepKind.TOOL, "round": 1, "duration_ms": 2.0, "fields": {"a": 1}},
        ),
        (ToolContext, {"run_id": "r", "call_id": "c", "actor": Actor(id="a"), "settings": {}}),
        (Executed, {"result": result, "outcome": "ok", "seconds": 0.5}),
        # Fields are not checked at run time, by the class or by its builder.
        (Admitted, {"registered": "a registered tool", "arguments": {}, "context": context}),
    ]


@pytest.mark.parametrize("index", range(5))
def test_a_builder_makes_what_the_class_makes_and_it_stays_frozen(index):
    cls, given_fields = _every_field()[index]
    fields = {f.name: given_fields.get(f.name, f.default) for f in attrs.fields(cls)}
    if cls is RunStep:
        fields["tool_artifacts"] = ()

    built = builder(cls)(**fields)

    assert type(built) is cls
    assert attrs.asdict(built, recurse=False) == attrs.asdict(cls(**fields), recurse=False)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.__setattr__(next(iter(fields)), None)
    with pytest.raises(TypeError):
        builder(cls)(**dict(list(fields.items())[1:]))


@attrs.frozen(slots=False)
class _Unslotted:
    value: int


@attrs.frozen
class _Converted:
    value: int = attrs.field(converter=int)


@pytest.mark.parametrize("cls", [ToolResult, Actor, _Unslotted, _Converted])
def test_a_builder_is_refused_for_a_class_whose_init_does_more(cls):
    with pytest.raises(TypeError, match="not a plain slotted attrs class"):
        builder(cls)

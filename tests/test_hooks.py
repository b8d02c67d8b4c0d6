"""One test per hook in ``nrllm_core.hookspecs``, and a check that none is missing."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import click
from click.testing import CliRunner
from structlog.testing import capture_logs

from nrllm_core import (
    CONTENT_MAX_BYTES,
    AuditRecord,
    DataClass,
    RunRecorder,
    Tool,
    ToolArtifact,
    ToolContext,
    ToolRegistry,
    ToolResult,
    TraceEvent,
    WirePayload,
    hookimpl,
    hookspecs,
    invoke,
    make_plugin_manager,
    tool,
)
from nrllm_core._providers import ProviderRegistry


@tool(group="content")
def echo(text: str) -> ToolResult:
    """Echo the text."""
    return ToolResult.text(text, ToolArtifact.text(text, label="echo"))


class EchoTools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(echo)


def spec_names() -> list[str]:
    return sorted(
        name
        for name, value in vars(hookspecs).items()
        if name.startswith("nrllm_") and hasattr(value, f"{hookspecs.PROJECT_NAME}_spec")
    )


def test_every_hook_has_a_test():
    names = spec_names()
    assert names == [
        "nrllm_audit",
        "nrllm_execute_tool",
        "nrllm_register_commands",
        "nrllm_register_providers",
        "nrllm_register_tools",
        "nrllm_settings",
        "nrllm_settings_class",
        "nrllm_tool_data_class",
        "nrllm_trace",
        "nrllm_trace_context",
        "nrllm_wire",
    ]
    pm = make_plugin_manager(load_entry_points=False)
    assert sorted(n for n in vars(pm.hook) if n.startswith("nrllm_")) == names
    tests = {name for name, value in globals().items() if inspect.isfunction(value)}
    assert [n for n in names if f"test_hook_{n}" not in tests] == []


def test_hook_nrllm_register_tools(context):
    class Plugin:
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            assert isinstance(registry, ToolRegistry)
            registry.register(echo)

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    registered = pm.catalog().get("echo")
    assert registered is not None
    assert registered.tool is echo
    assert invoke(pm, "echo", {"text": "hi"}, context=context).content == "hi"


def test_hook_nrllm_settings_class():
    import attrs

    @attrs.frozen
    class EchoSettings:
        prefix: str = ""

    class Plugin(EchoTools):
        @hookimpl
        def nrllm_settings_class(self, plugin_name: str) -> type[EchoSettings]:
            assert plugin_name == "echoes"
            return EchoSettings

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Plugin(), name="echoes")
    assert pm.settings_classes() == {"echoes": EchoSettings}


def test_hook_nrllm_tool_data_class():
    asked: list[str] = []

    class Plugin:
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(echo)

        @hookimpl
        def nrllm_tool_data_class(self, tool: Tool) -> DataClass | None:
            asked.append(tool.name)
            return DataClass.SOURCE_CODE

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    registered = pm.catalog().get("echo")
    assert registered is not None
    assert registered.data_class is DataClass.SOURCE_CODE
    assert registered.data_class_source == "hook"
    assert asked == ["echo"]


def test_hook_nrllm_execute_tool(context, sinks):
    ran_elsewhere: list[tuple[str, dict[str, Any], ToolContext]] = []

    class Sandbox:
        @hookimpl
        def nrllm_execute_tool(
            self, tool: Tool, arguments: dict[str, Any], context: ToolContext
        ) -> ToolResult | None:
            if tool.name != "echo":
                return None
            ran_elsewhere.append((tool.name, arguments, context))
            return ToolResult.text("\udcff" + "z" * (CONTENT_MAX_BYTES * 2))

    @tool(group="content")
    def local() -> ToolResult:
        """Runs in process."""
        return ToolResult.text("in process")

    class Tools:
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(echo)
            registry.register(local)

    pm = make_plugin_manager(plugins=[Tools(), Sandbox(), sinks], load_entry_points=False)
    wire = invoke(pm, "echo", {"text": "hi"}, context=context)
    # What the sandbox returned still passed through the seam.
    assert wire.content.startswith("\ufffdz")
    assert wire.content.endswith("\n…[tool result truncated at 50000 bytes]")
    assert len(wire.content.encode()) <= CONTENT_MAX_BYTES
    assert ran_elsewhere == [("echo", {"text": "hi"}, context)]
    # Returning None leaves the call to core's default, which runs the tool here.
    assert invoke(pm, "local", {}, context=context).content == "in process"


def test_a_wrapper_of_nrllm_execute_tool_sees_every_call_even_one_added_later(context, sinks):
    pm = make_plugin_manager(plugins=[EchoTools(), sinks], load_entry_points=False)
    assert invoke(pm, "echo", {"text": "hi"}, context=context).content == "hi"

    class Wrapper:
        @hookimpl(wrapper=True)
        def nrllm_execute_tool(self, tool: Tool) -> Generator[None, ToolResult, ToolResult]:
            answer = yield
            return ToolResult.text(f"{tool.name} wrapped: {answer.content}")

    pm.register(Wrapper())

    assert invoke(pm, "echo", {"text": "hi"}, context=context).content == "echo wrapped: hi"


def test_a_hook_call_monitor_sees_nrllm_execute_tool(context, sinks):
    pm = make_plugin_manager(plugins=[EchoTools(), sinks], load_entry_points=False)
    invoke(pm, "echo", {"text": "hi"}, context=context)
    seen: list[str] = []
    undo = pm.add_hookcall_monitoring(lambda name, impls, kwargs: seen.append(name), print)

    invoke(pm, "echo", {"text": "hi"}, context=context)
    undo()

    assert "nrllm_execute_tool" in seen


def test_nrllm_execute_tool_answers_in_pluggys_order_with_the_arguments_each_takes(context, sinks):
    asked: list[str] = []

    class Declines:
        @hookimpl(tryfirst=True)
        def nrllm_execute_tool(self, tool: Tool) -> None:
            asked.append("declines")

    class Answers:
        @hookimpl
        def nrllm_execute_tool(self, context: ToolContext, arguments: dict[str, Any]) -> ToolResult:
            asked.append("answers")
            return ToolResult.text(f"{arguments['text']} for {context.call_id}")

    class Unasked:
        @hookimpl(trylast=True)
        def nrllm_execute_tool(self) -> ToolResult:
            asked.append("unasked")
            return ToolResult.text("never")

    pm = make_plugin_manager(
        plugins=[EchoTools(), Unasked(), Answers(), Declines(), sinks], load_entry_points=False
    )

    assert invoke(pm, "echo", {"text": "hi"}, context=context).content == "hi for call-1"
    assert asked == ["declines", "answers"]


def test_hook_nrllm_wire(context):
    received: list[object] = []

    class Plugin:
        @hookimpl
        def nrllm_wire(self, payload: WirePayload) -> None:
            received.append(payload)

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    pm.register(EchoTools())
    returned = invoke(pm, "echo", {"text": "secret artifact"}, context=context)
    assert received == [
        WirePayload(call_id="call-1", tool_name="echo", content="secret artifact", is_error=False)
    ]
    assert received[0] is returned


def test_hook_nrllm_trace(context):
    received: list[object] = []

    class Plugin:
        @hookimpl
        def nrllm_trace(self, event: TraceEvent) -> None:
            received.append(event)

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    pm.register(EchoTools())
    invoke(pm, "echo", {"text": "hi"}, context=context)
    invoke(pm, "echo", {"text": "again"}, context=context)
    assert [type(e) for e in received] == [TraceEvent, TraceEvent]
    first = received[0]
    assert isinstance(first, TraceEvent)
    assert first.run_id == "run-1"
    assert first.step.tool_artifacts == (ToolArtifact.text("hi", label="echo"),)
    assert first.step.fields["tool_arguments"] == {"text": "hi"}


def test_hook_nrllm_audit(context):
    received: list[object] = []

    class Plugin:
        @hookimpl
        def nrllm_audit(self, record: AuditRecord) -> None:
            received.append(record)

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    pm.register(EchoTools())
    invoke(pm, "echo", {"text": "hi"}, context=context)
    (record,) = received
    assert isinstance(record, AuditRecord)
    assert record.run_id == "run-1"
    assert record.payload["tool_name"] == "echo"
    # The default audit view keeps shape and counts, never the content itself.
    assert "tool_result" not in record.payload
    assert record.payload["tool_result_length"] == 2
    assert record.payload["tool_artifact_types"] == ["text"]


def test_hook_nrllm_register_providers():
    def factory(**settings: Any) -> str:
        return f"echo provider {settings}"

    class Plugin:
        @hookimpl
        def nrllm_register_providers(self, registry: ProviderRegistry) -> None:
            registry.register("echo", factory)

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    registry = ProviderRegistry()
    pm.hook.nrllm_register_providers(registry=registry)
    assert registry.get("echo") is factory
    assert "echo" in registry.kinds


def test_hook_nrllm_register_commands():
    class Plugin:
        @hookimpl
        def nrllm_register_commands(self, cli: click.Group) -> None:
            @cli.command()
            def hello() -> None:
                """Say hello."""
                click.echo("hello from a plugin")

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    group = click.Group("nrllm")
    pm.hook.nrllm_register_commands(cli=group)
    assert "hello" in group.commands
    result = CliRunner().invoke(group, ["hello"])
    assert result.exit_code == 0
    assert result.stdout == "hello from a plugin\n"


def test_hook_nrllm_trace_context():
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

    class Plugin:
        def __init__(self, answer: object) -> None:
            self.answer = answer

        @hookimpl
        def nrllm_trace_context(self, run_id: str) -> object:
            return self.answer

    def asked(answer: object) -> object:
        pm = make_plugin_manager(plugins=[Plugin(answer)], load_entry_points=False)
        return pm.trace_context("run-1")

    assert asked({"traceparent": parent, "tracestate": "a=1"}) == {
        "traceparent": parent,
        "tracestate": "a=1",
    }
    assert asked(None) is None
    # Only a well-formed W3C context is kept: a plugin cannot park anything else next to a state.
    assert asked({"traceparent": parent, "extra": "x"}) is None
    assert asked({"traceparent": "00-" + "0" * 32 + "-b7ad6b7169203331-01"}) is None
    assert asked({"traceparent": parent, "tracestate": "x" * 513}) is None
    assert asked({"traceparent": parent, "tracestate": "a=\x1b[2J"}) is None


def test_hook_nrllm_settings():
    seen: dict[str, object] = {}

    class Plugin:
        def __init__(self, name: str) -> None:
            self.name = name

        @hookimpl
        def nrllm_settings(self, settings: Any) -> None:
            seen[self.name] = settings

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Plugin("otel"), name="otel")
    pm.register(Plugin("other"), name="other")
    pm.deliver_settings({"otel": {"enabled": False}, "secret": {"key": "k"}})
    # Each plugin sees its own section only, read-only; no section is an empty one.
    assert dict(seen["otel"]) == {"enabled": False}
    assert dict(seen["other"]) == {}
    assert not isinstance(seen["otel"], dict)


# -- every hook call goes through pluggy: wrappers, monitors, one plugin failing alone -----------


def monitored(pm: Any) -> tuple[list[tuple[str, tuple[str, ...], dict[str, Any]]], Any]:
    """Every hook call pluggy makes from now on: its name, the plugins in it, its arguments;
    and the undo function."""
    seen: list[tuple[str, tuple[str, ...], dict[str, Any]]] = []

    def before(name: str, impls: Any, kwargs: Any) -> None:
        seen.append((name, tuple(i.plugin_name for i in impls), dict(kwargs)))

    return seen, pm.add_hookcall_monitoring(before, lambda *args: None)


class WrappingSinks:
    """A wrapper of each sink hook, as a pluggy plugin writes one."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, object]] = []

    @hookimpl(wrapper=True)
    def nrllm_wire(self, payload: WirePayload) -> Generator[None, Any, Any]:
        self.seen.append(("before", "wire", payload))
        answer = yield
        self.seen.append(("after", "wire", answer))
        return answer

    @hookimpl(wrapper=True)
    def nrllm_trace(self, event: TraceEvent) -> Generator[None, Any, Any]:
        self.seen.append(("before", "trace", event.sequence))
        answer = yield
        self.seen.append(("after", "trace", answer))
        return answer

    @hookimpl(hookwrapper=True)
    def nrllm_audit(self, record: AuditRecord) -> Generator[None, Any, None]:
        self.seen.append(("before", "audit", record.sequence))
        outcome = yield
        self.seen.append(("after", "audit", outcome.get_result()))


def test_a_wrapper_sink_runs_around_its_call(context, sinks):
    wrapper = WrappingSinks()
    pm = make_plugin_manager(plugins=[EchoTools(), wrapper, sinks], load_entry_points=False)

    wire = invoke(pm, "echo", {"text": "hi"}, context=context)

    # Each plugin's sink is called on its own, so a wrapper's yield gives its own call's answer.
    assert wrapper.seen == [
        ("before", "wire", wire),
        ("after", "wire", []),
        ("before", "audit", 1),
        ("after", "audit", []),
        ("before", "trace", 1),
        ("after", "trace", []),
    ]
    assert sinks.wire == [wire]
    assert len(sinks.audit) == len(sinks.trace) == 1


def test_a_hook_call_monitor_sees_every_sink_call_one_plugin_at_a_time(context, sinks):
    class Other:
        @hookimpl
        def nrllm_wire(self, payload: WirePayload) -> None:
            pass

    pm = make_plugin_manager(plugins=[EchoTools(), sinks], load_entry_points=False)
    other = pm.register(Other(), name="other")
    sinks_name = pm.get_name(sinks)
    # Called once before the monitor comes: what was set up for calling them is not kept.
    invoke(pm, "echo", {"text": "hi"}, context=context)
    seen, undo = monitored(pm)

    wire = invoke(pm, "echo", {"text": "hi"}, context=context)
    undo()

    assert [(name, plugins) for name, plugins, _ in seen] == [
        ("nrllm_execute_tool", ("nrllm.defaults",)),
        # Most recently registered first, as pluggy calls them.
        ("nrllm_wire", (other,)),
        ("nrllm_wire", (sinks_name,)),
        ("nrllm_audit", (sinks_name,)),
        ("nrllm_trace", (sinks_name,)),
    ]
    assert seen[1][2] == seen[2][2] == {"payload": wire}


def test_a_failing_sink_is_isolated_from_the_others_through_pluggy(context, sinks):
    class Failing:
        @hookimpl
        def nrllm_audit(self, record: AuditRecord) -> None:
            raise RuntimeError("audit sink down")

    wrapper, failing = WrappingSinks(), Failing()
    pm = make_plugin_manager(
        plugins=[EchoTools(), sinks, failing, wrapper], load_entry_points=False
    )
    outcomes: list[tuple[str, BaseException | None]] = []
    undo = pm.add_hookcall_monitoring(
        lambda *args: None,
        lambda outcome, name, impls, kwargs: outcomes.append((name, outcome.exception)),
    )
    recorder = RunRecorder(pm, "run-1")

    with capture_logs() as logs:
        invoke(pm, "echo", {"text": "hi"}, context=context, recorder=recorder)
    undo()

    audits = [error for name, error in outcomes if name == "nrllm_audit"]
    assert [type(error) for error in audits] == [type(None), RuntimeError, type(None)]
    # The failing sink stopped neither the wrapper nor the sink registered before it.
    assert len(sinks.audit) == 1
    assert [s for s in wrapper.seen if s[1] == "audit"] == [
        ("before", "audit", 1),
        ("after", "audit", []),
    ]
    failed = [e for e in logs if e["event"] == "nrllm.sink.failed"]
    assert [(e["hook"], e["plugin"]) for e in failed] == [("nrllm_audit", pm.get_name(failing))]
    assert recorder.audit_failures == 1


def test_a_wrapper_and_a_monitor_see_each_plugins_provider_registration():
    def factory(**settings: Any) -> str:
        return "provider"

    ran: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def nrllm_register_providers(self, registry: ProviderRegistry) -> Generator[None, Any, Any]:
            registry.register("wrapped", factory)
            answer = yield
            ran.append("after")
            return answer

    class Failing:
        @hookimpl
        def nrllm_register_providers(self, registry: ProviderRegistry) -> None:
            registry.register("half", factory)
            raise RuntimeError("registration broke")

    pm = make_plugin_manager(plugins=[Failing(), Wrapper()], load_entry_points=False)
    seen, undo = monitored(pm)

    registry = pm.provider_registry()
    undo()

    assert ran == ["after"]
    assert registry.get("wrapped") is factory
    # A plugin that raised registers nothing, not even what it added before raising.
    assert "half" not in registry.kinds
    assert "openai" in registry.kinds
    # One call per plugin, each with that plugin alone in it.
    called = [plugins for name, plugins, _ in seen if name == "nrllm_register_providers"]
    implementations = pm.hook.nrllm_register_providers.get_hookimpls()
    assert sorted(called) == sorted((impl.plugin_name,) for impl in implementations)


def test_a_wrapper_and_a_monitor_see_each_plugins_settings_class_question():
    import attrs

    @attrs.frozen
    class WrappedSettings:
        level: int = 1

    asked: list[str] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def nrllm_settings_class(self, plugin_name: str) -> Generator[None, Any, Any]:
            asked.append(plugin_name)
            yield
            return [WrappedSettings]

    class Failing:
        @hookimpl
        def nrllm_settings_class(self) -> type[Any]:
            raise RuntimeError("broken")

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Wrapper(), name="wrapping")
    pm.register(Failing(), name="failing")
    seen, undo = monitored(pm)

    classes = pm.settings_classes()
    undo()

    # The wrapper is asked for its own section only, and its answer is its plugin's.
    assert asked == ["wrapping"]
    assert classes == {"wrapping": WrappedSettings}
    calls = [(plugins, kwargs) for name, plugins, kwargs in seen if name == "nrllm_settings_class"]
    assert (("failing",), {"plugin_name": "failing"}) in calls
    assert (("wrapping",), {"plugin_name": "wrapping"}) in calls


def test_a_wrapper_and_a_monitor_see_each_plugin_get_its_own_settings():
    got: list[tuple[str, object]] = []

    class Wrapper:
        @hookimpl(wrapper=True)
        def nrllm_settings(self, settings: Any) -> Generator[None, Any, Any]:
            got.append(("before", dict(settings)))
            answer = yield
            got.append(("after", answer))
            return answer

    class Plain:
        @hookimpl
        def nrllm_settings(self, settings: Any) -> None:
            got.append(("plain", dict(settings)))

    class Failing:
        @hookimpl
        def nrllm_settings(self) -> None:
            raise RuntimeError("broken")

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Plain(), name="plain")
    pm.register(Failing(), name="failing")
    pm.register(Wrapper(), name="wrapping")
    seen, undo = monitored(pm)

    with capture_logs() as logs:
        pm.deliver_settings({"wrapping": {"a": 1}, "plain": {"b": 2}, "failing": {"c": 3}})
    undo()

    # No plugin sees another's section: a wrapper wraps its own plugin's call only.
    assert got == [("before", {"a": 1}), ("after", []), ("plain", {"b": 2})]
    calls = [(plugins, dict(kwargs["settings"])) for name, plugins, kwargs in seen]
    assert calls == [
        (("wrapping",), {"a": 1}),
        (("failing",), {"c": 3}),
        (("plain",), {"b": 2}),
    ]
    failed = [e for e in logs if e["event"] == "nrllm.sink.failed"]
    assert [(e["hook"], e["plugin"]) for e in failed] == [("nrllm_settings", "failing")]


def test_a_wrapper_of_nrllm_register_tools_wraps_its_own_plugins_registration(context, sinks):
    class Wrapper:
        @hookimpl(wrapper=True)
        def nrllm_register_tools(self, registry: ToolRegistry) -> Generator[None, Any, Any]:
            answer = yield
            registry.register(echo)
            return answer

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Wrapper(), name="wrapping")
    pm.register(sinks)
    seen, undo = monitored(pm)

    assert invoke(pm, "echo", {"text": "hi"}, context=context).content == "hi"
    undo()

    assert pm.catalog().tools["echo"].plugin == "wrapping"
    called = [plugins for name, plugins, _ in seen if name == "nrllm_register_tools"]
    assert called == [("wrapping",)]

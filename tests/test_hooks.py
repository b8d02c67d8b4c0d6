"""One test per hook in ``nrllm_core.hookspecs``, and a check that none is missing."""

from __future__ import annotations

import inspect
from collections.abc import Generator
from typing import Any

import click
from click.testing import CliRunner

from nrllm_core import (
    CONTENT_MAX_BYTES,
    AuditRecord,
    DataClass,
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

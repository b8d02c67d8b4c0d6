"""The plugin manager: entry points on request, failures isolated, clashes withheld."""

from __future__ import annotations

import copy
from collections.abc import Callable
from importlib import metadata
from typing import Any

import pytest
from structlog.testing import capture_logs

from nrllm_core import (
    AuditRecord,
    ConfigError,
    DataClass,
    PluginManager,
    RunRecorder,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    invoke,
    load_config,
    make_plugin_manager,
    tool,
)


def make_tool(name: str, group: str = "content", data_class: DataClass | None = None) -> Tool:
    @tool(group=group, name=name, data_class=data_class)
    def function() -> ToolResult:
        """Answer with the tool's own name."""
        return ToolResult.text(name)

    return function


class FakeDist:
    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version


class FakeEntryPoint:
    """Just what ``make_plugin_manager`` reads from an entry point."""

    def __init__(self, name: str, load: Callable[[], object], dist: FakeDist | None) -> None:
        self.name = name
        self.dist = dist
        self._load = load

    def load(self) -> object:
        return self._load()


class FakeEntryPoints:
    def __init__(self) -> None:
        self.points: list[FakeEntryPoint] = []
        self.calls: list[dict[str, Any]] = []

    def add(self, name: str, load: Callable[[], object]) -> None:
        self.points.append(FakeEntryPoint(name, load, FakeDist(f"dist-{name}", "1.2.3")))

    def __call__(self, **kwargs: Any) -> list[FakeEntryPoint]:
        self.calls.append(kwargs)
        return list(self.points) if kwargs.get("group") == "nrllm" else []


@pytest.fixture
def entry_points(monkeypatch) -> FakeEntryPoints:
    fake = FakeEntryPoints()
    monkeypatch.setattr(metadata, "entry_points", fake)
    monkeypatch.delenv("NRLLM_LOAD_PLUGINS", raising=False)
    return fake


@pytest.fixture
def three_plugins(entry_points, tools_plugin) -> FakeEntryPoints:
    for name in ("a", "b", "c"):
        plugin = tools_plugin(make_tool(f"tool_{name}"))
        entry_points.add(name, lambda plugin=plugin: plugin)
    return entry_points


def invoke_content(pm: PluginManager, name: str, context: ToolContext) -> str:
    return invoke(pm, name, {}, context=context).content


# -- loading --------------------------------------------------------------------------------------


def test_entry_points_are_read_only_when_asked(three_plugins):
    PluginManager()
    make_plugin_manager(load_entry_points=False)
    assert three_plugins.calls == []
    pm = make_plugin_manager()
    assert three_plugins.calls == [{"group": "nrllm"}]
    assert {"a", "b", "c"} <= {name for name, _ in pm.list_name_plugin()}


def test_core_defaults_are_always_registered(three_plugins, context, tools_plugin):
    pm = make_plugin_manager(plugins=[tools_plugin(make_tool("mine"))], load_entry_points=False)
    assert pm.has_plugin("nrllm.defaults")
    assert invoke_content(pm, "mine", context) == "mine"


@pytest.mark.parametrize(
    ("value", "loaded"),
    [
        (None, {"a", "b", "c"}),
        ("", set()),
        ("a,c", {"a", "c"}),
        (" b , ,c ", {"b", "c"}),
        ("unknown", set()),
    ],
    ids=["unset", "empty", "list", "spaces", "unknown"],
)
def test_nrllm_load_plugins(three_plugins, monkeypatch, value, loaded):
    if value is not None:
        monkeypatch.setenv("NRLLM_LOAD_PLUGINS", value)
    pm = make_plugin_manager()
    assert {n for n in ("a", "b", "c") if pm.has_plugin(n)} == loaded
    assert set(pm.catalog().tools) == {f"tool_{n}" for n in loaded}


def test_nrllm_load_plugins_is_read_at_call_time(three_plugins, monkeypatch):
    monkeypatch.setenv("NRLLM_LOAD_PLUGINS", "a")
    first = make_plugin_manager()
    monkeypatch.setenv("NRLLM_LOAD_PLUGINS", "b")
    second = make_plugin_manager()
    assert set(first.catalog().tools) == {"tool_a"}
    assert set(second.catalog().tools) == {"tool_b"}


def test_plugin_records_show_provenance_hooks_and_tools(three_plugins):
    pm = make_plugin_manager()
    records = {r.name: r for r in pm.plugin_records()}
    a = records["a"]
    assert (a.distribution, a.version) == ("dist-a", "1.2.3")
    assert a.hooks == ("nrllm_register_tools",)
    assert a.tools == ("tool_a",)
    assert a.error is None
    assert a.withheld == ()
    core = records["nrllm.defaults"]
    assert core.distribution == "nrllm-core"
    assert core.hooks == ("nrllm_execute_tool",)


def raise_import_error() -> object:
    raise ImportError("No module named 'missing_dependency'")


def test_a_plugin_whose_import_raises_is_skipped_and_reported(three_plugins, context):
    three_plugins.add("broken", raise_import_error)
    with capture_logs() as logs:
        pm = make_plugin_manager()
    assert pm.load_errors == {"broken": "ImportError: No module named 'missing_dependency'"}
    assert not pm.has_plugin("broken")
    assert invoke_content(pm, "tool_a", context) == "tool_a"
    assert invoke_content(pm, "tool_c", context) == "tool_c"
    (record,) = [r for r in pm.plugin_records() if r.name == "broken"]
    assert record.error == "ImportError: No module named 'missing_dependency'"
    assert (record.distribution, record.hooks, record.tools) == ("dist-broken", (), ())
    assert [e["plugin"] for e in logs if e["event"] == "nrllm.plugin.load_failed"] == ["broken"]


class UnknownHook:
    @hookimpl
    def nrllm_no_such_hook(self) -> None:
        """A hook nrllm does not define."""


class WrongArguments:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry, surprise: int) -> None:
        """Asks for an argument the hook does not pass."""


@pytest.mark.parametrize("plugin", [UnknownHook(), WrongArguments()], ids=["unknown", "arguments"])
def test_a_plugin_that_fails_validation_is_skipped_and_reported(three_plugins, context, plugin):
    three_plugins.add("invalid", lambda: plugin)
    pm = make_plugin_manager()
    assert "invalid" in pm.load_errors
    assert pm.load_errors["invalid"].startswith("PluginValidationError")
    assert not pm.has_plugin("invalid")
    assert invoke_content(pm, "tool_b", context) == "tool_b"


class RaisingRegistration:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(make_tool("half_registered"))
        raise RuntimeError("registration exploded")


def test_a_plugin_whose_registration_raises_is_skipped_and_reported(three_plugins, context):
    three_plugins.add("explodes", RaisingRegistration)
    with capture_logs() as logs:
        pm = make_plugin_manager()
        catalog = pm.catalog()
    assert catalog.errors == {
        "explodes": "registration failed: RuntimeError: registration exploded"
    }
    # All or nothing: the tool registered before the failure is not kept.
    assert "half_registered" not in catalog.tools
    assert set(catalog.tools) == {"tool_a", "tool_b", "tool_c"}
    assert invoke_content(pm, "tool_a", context) == "tool_a"
    (record,) = [r for r in pm.plugin_records() if r.name == "explodes"]
    assert record.error == "registration failed: RuntimeError: registration exploded"
    assert record.tools == ()
    failed = [e for e in logs if e["event"] == "nrllm.plugin.registration_failed"]
    assert [e["plugin"] for e in failed] == ["explodes"]


def test_a_malformed_tool_fails_its_plugins_registration(three_plugins, tools_plugin):
    bad = make_tool("x")
    bad.name = "not valid!"
    three_plugins.add("malformed", lambda: tools_plugin(bad, make_tool("innocent")))
    catalog = make_plugin_manager().catalog()
    assert catalog.errors["malformed"].startswith("registration failed: ValueError")
    assert "innocent" not in catalog.tools
    assert "tool_a" in catalog.tools


# -- name clashes ---------------------------------------------------------------------------------


def test_a_name_registered_by_two_plugins_is_withheld_from_both(
    three_plugins, tools_plugin, context
):
    first = tools_plugin(make_tool("shared"), make_tool("only_first"))
    second = tools_plugin(make_tool("shared"))
    three_plugins.add("first", lambda: first)
    three_plugins.add("second", lambda: second)
    with capture_logs() as logs:
        pm = make_plugin_manager()
        catalog = pm.catalog()
    assert catalog.get("shared") is None
    assert catalog.clashes == {"shared": ("first", "second")}
    wire = invoke(pm, "shared", {}, context=context)
    assert (
        wire.content == 'Error: tool "shared" is withheld: registered by both "first" and "second"'
    )
    # Everything else keeps working, including the clashing plugins' other tools.
    assert invoke_content(pm, "only_first", context) == "only_first"
    assert invoke_content(pm, "tool_a", context) == "tool_a"
    (clash,) = [e for e in logs if e["event"] == "nrllm.tool.name_clash"]
    assert clash["tool"] == "shared"
    assert set(clash["plugins"]) == {"first", "second"}
    records = {r.name: r for r in pm.plugin_records()}
    assert records["first"].withheld == (("shared", ("first", "second")),)
    assert records["second"].withheld == (("shared", ("first", "second")),)
    assert records["first"].tools == ("only_first",)
    assert records["second"].tools == ()
    assert records["a"].withheld == ()


def test_no_tool_is_renamed_on_a_clash(tools_plugin):
    pm = make_plugin_manager(
        plugins=[tools_plugin(make_tool("same")), tools_plugin(make_tool("same"))],
        load_entry_points=False,
    )
    assert pm.catalog().tools == {}


# -- catalog --------------------------------------------------------------------------------------


def test_the_catalog_follows_registration(tools_plugin):
    pm = make_plugin_manager(load_entry_points=False)
    assert pm.catalog() is pm.catalog()
    assert pm.catalog().tools == {}
    plugin = tools_plugin(make_tool("late"))
    pm.register(plugin)
    assert set(pm.catalog().tools) == {"late"}
    pm.unregister(plugin)
    assert pm.catalog().tools == {}


def test_a_sink_coming_or_going_keeps_the_catalog(tools_plugin):
    from nrllm_core.testing import SinkRecorder

    pm = make_plugin_manager(
        plugins=[tools_plugin(make_tool("same")), tools_plugin(make_tool("same"))],
        load_entry_points=False,
    )
    with capture_logs() as logs:
        catalog = pm.catalog()
        sink = SinkRecorder()
        pm.register(sink, name="late.sink")
        assert pm.catalog() is catalog
        pm.unregister(name="late.sink")
        assert pm.catalog() is catalog
    # Built once, so its clash is logged once.
    assert [e["event"] for e in logs].count("nrllm.tool.name_clash") == 1
    pm.register(tools_plugin(make_tool("other")))
    assert set(pm.catalog().tools) == {"other"}


class Configured:
    """A plugin whose tools are named by its own section, ``[configured] tools``."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, Any]] = []

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry, settings: Any, store: Any) -> None:
        self.calls.append((settings, store))
        for name in settings.get("tools", []):
            registry.register(make_tool(name))


def test_tools_are_registered_with_the_hosts_own_section_and_store(tools_plugin):
    plugin = Configured()
    pm = make_plugin_manager(plugins=[tools_plugin(make_tool("plain"))], load_entry_points=False)
    pm.register(plugin, name="configured")
    data: dict[str, Any] = {"configured": {"tools": ["first"]}, "store": {"url": "sqlite:///x"}}

    def load() -> Any:
        return load_config(data=copy.deepcopy(data), plugin_sections=["configured", "other"])

    pm.use_config(load)
    assert set(pm.catalog().tools) == {"plain", "first"}
    ((settings, store),) = plugin.calls
    assert dict(settings) == {"tools": ["first"]}
    assert store.url == "sqlite:///x"
    assert pm.catalog() is pm.catalog()
    assert len(plugin.calls) == 1
    data["other"] = {"ignored": True}
    # Another plugin's section changed, not this one's: no new registration.
    pm.deliver_settings(load().plugin_settings)
    assert pm.catalog().get("first") is not None
    assert len(plugin.calls) == 1
    data["configured"] = {"tools": ["second"]}
    # The catalog is read on every call, so it follows the change as the next segment starts.
    assert set(pm.catalog().tools) == {"plain", "first"}
    pm.deliver_settings(load().plugin_settings)
    assert set(pm.catalog().tools) == {"plain", "second"}
    assert len(plugin.calls) == 2


def test_a_manager_given_no_configuration_reads_the_default_file(tmp_path, monkeypatch):
    path = tmp_path / "nrllm.toml"
    path.write_text('[configured]\ntools = ["from_file"]\n', encoding="utf-8")
    monkeypatch.setenv("NRLLM_CONFIG", str(path))
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Configured(), name="configured")
    assert set(pm.catalog().tools) == {"from_file"}


def test_a_configuration_that_cannot_be_read_registers_none_of_the_plugins_tools(tools_plugin):
    def broken() -> Any:
        raise ConfigError("the configuration file is gone")

    pm = make_plugin_manager(plugins=[tools_plugin(make_tool("plain"))], load_entry_points=False)
    pm.register(Configured(), name="configured")
    pm.use_config(broken)
    catalog = pm.catalog()
    assert set(catalog.tools) == {"plain"}
    assert catalog.errors == {"configured": "registration failed: the configuration cannot be read"}


def test_registered_tools_are_snapshotted(tools_plugin):
    original = make_tool("snap", data_class=DataClass.PUBLIC_CONTENT)
    pm = make_plugin_manager(plugins=[tools_plugin(original)], load_entry_points=False)
    registered = pm.catalog().get("snap")
    assert registered is not None
    original.data_class = DataClass.SECRET_ADJACENT
    assert registered.data_class is DataClass.PUBLIC_CONTENT
    assert registered.declared_data_class is DataClass.PUBLIC_CONTENT


# -- data classes ---------------------------------------------------------------------------------


class Answers:
    def __init__(self, answer: object) -> None:
        self.answer = answer

    @hookimpl
    def nrllm_tool_data_class(self, tool: Tool) -> object:
        return self.answer


class Raises:
    @hookimpl
    def nrllm_tool_data_class(self, tool: Tool) -> DataClass | None:
        raise RuntimeError("cannot decide")


def effective(tools_plugin, *answerers: object) -> tuple[DataClass, str]:
    declared = make_tool("t", data_class=DataClass.SOURCE_CODE)
    pm = make_plugin_manager(plugins=[tools_plugin(declared), *answerers], load_entry_points=False)
    registered = pm.catalog().get("t")
    assert registered is not None
    assert registered.declared_data_class is DataClass.SOURCE_CODE
    return registered.data_class, registered.data_class_source


def test_no_answers_keep_the_declared_class(tools_plugin):
    assert effective(tools_plugin) == (DataClass.SOURCE_CODE, "declared")
    assert effective(tools_plugin, Answers(None)) == (DataClass.SOURCE_CODE, "declared")


def test_a_hook_can_raise_the_class(tools_plugin):
    assert effective(tools_plugin, Answers(DataClass.SYSTEM_DIAGNOSTICS)) == (
        DataClass.SYSTEM_DIAGNOSTICS,
        "hook",
    )


@pytest.mark.parametrize("lower", [DataClass.PUBLIC_CONTENT, DataClass.EDITOR_CONTENT])
def test_a_hook_cannot_lower_the_class(tools_plugin, lower):
    assert effective(tools_plugin, Answers(lower)) == (DataClass.SOURCE_CODE, "declared")


def test_the_strictest_answer_wins(tools_plugin):
    answers = [
        Answers(DataClass.PUBLIC_CONTENT),
        Answers(DataClass.SECRET_ADJACENT),
        Answers(DataClass.INTERNAL_CONFIGURATION),
        Answers(None),
    ]
    assert effective(tools_plugin, *answers)[0] is DataClass.SECRET_ADJACENT
    assert effective(tools_plugin, *reversed(answers))[0] is DataClass.SECRET_ADJACENT


def test_a_raising_hook_counts_as_secret_adjacent(tools_plugin):
    with capture_logs() as logs:
        result = effective(tools_plugin, Answers(DataClass.PUBLIC_CONTENT), Raises())
    assert result == (DataClass.SECRET_ADJACENT, "hook")
    assert [e["event"] for e in logs] == ["nrllm.data_class.hook_failed"]


@pytest.mark.parametrize("garbage", ["publicContent", 0, object()], ids=["str", "int", "object"])
def test_an_answer_that_is_not_a_data_class_counts_as_secret_adjacent(tools_plugin, garbage):
    assert effective(tools_plugin, Answers(garbage))[0] is DataClass.SECRET_ADJACENT


def test_a_hook_can_tighten_another_plugins_tool(three_plugins, tools_plugin):
    class TightenA:
        @hookimpl
        def nrllm_tool_data_class(self, tool: Tool) -> DataClass | None:
            return DataClass.SECRET_ADJACENT if tool.name == "tool_a" else None

    three_plugins.add("tightener", TightenA)
    catalog = make_plugin_manager().catalog()
    assert catalog.tools["tool_a"].data_class is DataClass.SECRET_ADJACENT
    assert catalog.tools["tool_b"].data_class is DataClass.EDITOR_CONTENT


def raising_plugin_factory(exc: Exception) -> Callable[[], Any]:
    def load() -> Any:
        raise exc

    return load


def test_a_plugin_raising_any_exception_at_import_is_reported(three_plugins):
    three_plugins.add("syntax", raising_plugin_factory(SyntaxError("bad syntax")))
    three_plugins.add("value", raising_plugin_factory(ValueError("bad value")))
    pm = make_plugin_manager()
    assert pm.load_errors == {
        "syntax": "SyntaxError: bad syntax",
        "value": "ValueError: bad value",
    }
    assert set(pm.catalog().tools) == {"tool_a", "tool_b", "tool_c"}


def test_a_sink_registered_after_the_first_call_receives_the_next(make_pm, context):
    from nrllm_core.testing import SinkRecorder

    pm = make_pm()
    first = SinkRecorder()
    pm.register(first)
    invoke(pm, "nope", {}, context=context)
    late = SinkRecorder()
    pm.register(late)
    invoke(pm, "nope", {}, context=context)
    pm.unregister(first)
    invoke(pm, "nope", {}, context=context)
    assert (len(first.wire), len(late.wire)) == (2, 2)
    assert (len(first.audit), len(late.trace)) == (2, 2)


def test_a_sink_is_called_with_the_arguments_it_declares(make_pm, context):
    calls: list[object] = []

    class Bare:
        @hookimpl
        def nrllm_wire(self) -> None:
            calls.append("bare")

    class Defaulted:
        @hookimpl
        def nrllm_audit(self, record: AuditRecord | None = None) -> None:
            calls.append(record)

    pm = make_pm()
    pm.register(Bare())
    pm.register(Defaulted())
    recorder = RunRecorder(pm, "r")

    invoke(pm, "nope", {}, context=context, recorder=recorder)

    assert calls[0] == "bare"
    assert isinstance(calls[1], AuditRecord)
    assert recorder.audit_failures == 0


def test_one_by_one_calls_each_plugins_own_hook_alone_in_pluggys_order():
    from nrllm_core import hookimpl, make_plugin_manager

    seen: list[tuple[str, list[str]]] = []

    class Plugin:
        def __init__(self, name: str, *, fails: bool = False) -> None:
            self.name, self.fails = name, fails

        @hookimpl
        def nrllm_settings(self, settings: Any) -> None:
            seen.append((self.name, list(settings)))
            if self.fails:
                raise RuntimeError("broken")

    pm = make_plugin_manager(load_entry_points=False)
    for name, fails in (("a", False), ("b", True), ("c", False)):
        pm.register(Plugin(name, fails=fails), name=name)

    called = []
    for plugin_name, alone in pm.one_by_one("nrllm_settings"):
        try:
            alone(settings={plugin_name: 1})
        except RuntimeError:
            called.append(f"{plugin_name} failed")
        else:
            called.append(plugin_name)

    # pluggy calls the last registered first; each saw only what it was given.
    assert called == ["c", "b failed", "a"]
    assert seen == [("c", ["c"]), ("b", ["b"]), ("a", ["a"])]

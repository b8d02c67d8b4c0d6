"""Each plugin reads its own settings: its section only, checked by its settings class."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import attrs
import pytest
from click.testing import CliRunner

from nrllm_core import (
    Actor,
    ConfigError,
    Effect,
    Host,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    invoke,
    load_config,
    make_plugin_manager,
    tool,
)
from nrllm_core.cli import cli

SEEN: list[Any] = []


@tool(group="content")
def show_settings(context: ToolContext) -> ToolResult:
    """Report the settings the tool received."""
    SEEN.append(context.settings)
    return ToolResult.text("ok")


def _at_most_ten(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value > 10:
        raise ValueError(f"{attribute.name}: at most 10")


@attrs.frozen(kw_only=True)
class WeatherSettings:
    station: str = "north"
    days: int = attrs.field(default=3, validator=_at_most_ten)


class Weather:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(show_settings)

    @hookimpl
    def nrllm_settings_class(self, plugin_name: str) -> type[WeatherSettings]:
        return WeatherSettings


class Untyped:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(tool(group="content", name="untyped")(show_settings._function))


@pytest.fixture(autouse=True)
def _clear() -> None:
    SEEN.clear()


def host_with(tmp_path: Path, data: dict[str, Any], **plugins: object) -> Host:
    pm = make_plugin_manager(load_entry_points=False)
    for name, plugin in plugins.items():
        pm.register(plugin, name=name)
    return Host.from_config(data=data, pm=pm, data_dir=tmp_path, environ={})


def test_a_tool_sees_only_its_own_section_read_only(tmp_path):
    host = host_with(
        tmp_path,
        {"untyped": {"colour": "blue"}, "weather_stats": {"station": "south"}},
        untyped=Untyped(),
        weather_stats=Weather(),
    )
    try:
        host.invoke("untyped", {})
        host.invoke("show_settings", {})
    finally:
        host.store.close()
    own, typed = SEEN
    assert isinstance(own, types.MappingProxyType)
    assert dict(own) == {"colour": "blue"}
    with pytest.raises(TypeError):
        own["colour"] = "red"  # type: ignore[index]
    assert typed == WeatherSettings(station="south")


def test_a_plugin_without_a_section_gets_an_empty_mapping_or_its_defaults(tmp_path):
    host = host_with(tmp_path, {}, untyped=Untyped(), weather_stats=Weather())
    try:
        host.invoke("untyped", {})
        host.invoke("show_settings", {})
    finally:
        host.store.close()
    assert [{}, WeatherSettings()] == SEEN


def test_a_direct_invoke_narrows_the_callers_settings_too():
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Untyped(), name="untyped")
    context = ToolContext(
        run_id="r",
        call_id="c",
        actor=Actor(id="t"),
        settings={"untyped": {"a": 1}, "other": {"secret": "s"}},
    )
    invoke(pm, "untyped", {}, context=context)
    assert SEEN == [{"a": 1}]


def test_the_preview_sees_only_its_own_section(tmp_path):
    seen = []

    def preview(context: ToolContext) -> list[str]:
        seen.append(context.settings)
        return ["would write"]

    @tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE, preview=preview)
    def write_it(context: ToolContext) -> ToolResult:
        """Write."""
        return ToolResult.text("written")

    class Writer:
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(write_it)

    script = tmp_path / "turns.json"
    script.write_text(
        '{"turns": [{"tool_calls": [{"name": "write_it", "arguments": {}}]}]}', encoding="utf-8"
    )
    data = {
        "writer": {"folder": "x"},
        "other": {"token": "t"},
        "providers": {"m": {"kind": "scripted", "script": str(script), "trust_zone": "local"}},
    }
    host = host_with(tmp_path, data, writer=Writer(), other=Untyped())
    try:
        outcome = host.run("go", provider="m")
    finally:
        host.store.close()
    assert outcome.pending[0].preview == ("would write",)
    assert seen == [{"folder": "x"}]


def test_the_hook_is_asked_with_each_plugins_own_name():
    asked = []

    class Asking:
        @hookimpl
        def nrllm_settings_class(self, plugin_name: str) -> None:
            asked.append(plugin_name)

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Asking(), name="first")
    pm.register(Weather(), name="weather_stats")
    assert dict(pm.settings_classes()) == {"weather_stats": WeatherSettings}
    assert asked == ["first"]


def test_a_failing_or_wrong_settings_class_hook_declares_no_class():
    class Raises:
        @hookimpl
        def nrllm_settings_class(self, plugin_name: str) -> type:
            raise RuntimeError("boom")

    class NotAttrs:
        @hookimpl
        def nrllm_settings_class(self, plugin_name: str) -> type:
            return dict

    pm = make_plugin_manager(plugins=[Raises(), NotAttrs()], load_entry_points=False)
    assert dict(pm.settings_classes()) == {}


def test_a_section_is_checked_by_its_class_at_load():
    classes = {"weather_stats": WeatherSettings}
    with pytest.raises(ConfigError) as caught:
        load_config(
            data={"weather_stats": {"days": 11, "station": 3, "colour": "x"}},
            settings_classes=classes,
        )
    message = str(caught.value)
    assert "weather_stats.station: expected a string, got an integer" in message
    assert "weather_stats.colour: unknown key; accepted: days, station" in message
    with pytest.raises(ConfigError, match=r"^weather_stats\.days: at most 10$"):
        load_config(data={"weather_stats": {"days": 11}}, settings_classes=classes)
    config = load_config(data={"weather_stats": {"days": 4}}, settings_classes=classes)
    assert config.plugin_settings["weather_stats"] == WeatherSettings(days=4)


def test_every_error_of_one_load_is_reported_together_unknown_sections_included():
    with pytest.raises(ConfigError) as caught:
        load_config(
            data={
                "no_such_plugin": {"a": 1},
                "tools": {"speed": 1},
                "privacy": {"level": "loud"},
                "weather_stats": {"days": 99},
            },
            settings_classes={"weather_stats": WeatherSettings},
        )
    message = str(caught.value)
    for part in (
        "no_such_plugin: unknown section",
        "tools.speed: unknown key",
        "privacy.level: 'loud' is not accepted",
        "weather_stats.days: at most 10",
    ):
        assert part in message


def check(tmp_path: Path, text: str) -> Any:
    config = tmp_path / "nrllm.toml"
    config.write_text(text, encoding="utf-8")
    result = CliRunner().invoke(
        cli,
        ["--config", str(config), "config", "check"],
        env={"NRLLM_LOAD_PLUGINS": "builtin,repurpose"},
    )
    return config, result


def test_config_check_refuses_a_range_in_repurpose_allow_hosts(tmp_path):
    config, result = check(tmp_path, '[repurpose]\nallow_hosts = ["127.0.0.0/8"]\n')
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        f"Error: invalid configuration: {config}: repurpose.allow_hosts: exact host names or "
        "IP addresses only, no ranges or wildcards"
    )


def test_config_check_names_the_file_the_key_and_the_accepted_values(tmp_path):
    config, result = check(tmp_path, '[repurpose]\nsource_data_class = "secret"\n')
    assert result.exit_code == 2
    assert f"{config}: repurpose.source_data_class: 'secret' is not accepted; accepted " in (
        result.stderr
    )
    assert "publicContent" in result.stderr
    config, result = check(tmp_path, "[builtin]\ncolour = 1\n")
    assert (
        f"{config}: builtin.colour: unknown key; accepted: allow_columns, deny_columns"
        in result.stderr
    )


def test_config_check_passes_good_plugin_settings(tmp_path):
    _, result = check(tmp_path, '[repurpose]\nallow_hosts = ["127.0.0.1"]\n')
    assert result.exit_code == 0, result.stderr
    assert "plugin sections: " in result.stdout


def test_a_crashing_settings_class_refuses_its_section_by_type_only():
    def explode(value: str) -> str:
        raise RuntimeError("secret-in-the-message")

    @attrs.frozen
    class Fragile:
        key: str = attrs.field(default="", converter=explode)

    with pytest.raises(ConfigError) as caught:
        load_config(data={"fragile": {"key": "x"}}, settings_classes={"fragile": Fragile})
    assert str(caught.value) == "fragile: the settings class failed (RuntimeError)"


def test_a_tool_cannot_change_what_the_next_call_reads():
    @tool(group="content")
    def meddle(context: ToolContext) -> ToolResult:
        """Try to change the settings."""
        SEEN.append(list(context.settings["names"]))
        context.settings["names"].append("added")
        return ToolResult.text("ok")

    class Meddler:
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(meddle)

    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Meddler(), name="meddler")
    context = ToolContext(
        run_id="r", call_id="c", actor=Actor(id="t"), settings={"meddler": {"names": ["a"]}}
    )
    invoke(pm, "meddle", {}, context=context)
    invoke(pm, "meddle", {}, context=context)
    assert SEEN == [["a"], ["a"]]

"""The order of a flow's steps: the gate decides after the plugins have their settings, a
direct call's start and gate run under its lease and crash handling, a provider is built only
once nothing before the drive can raise, and a flow reads the configuration and the state key
once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    Effect,
    Host,
    ToolRegistry,
    ToolResult,
    TrustZone,
    hookimpl,
    make_plugin_manager,
    tool,
)
from nrllm_core.store import RunStatus

pytestmark = pytest.mark.usefixtures("driven")


def _tool(name: str) -> Any:
    @tool(group="content", name=name)
    def made() -> ToolResult:
        """Say which tool ran."""
        return ToolResult.text(name)

    return made


class Switch:
    """Registers the one tool its section names."""

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry, settings: Any) -> None:
        registry.register(_tool(settings.get("tool", "first")))


@tool(group="content", name="write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
def write_note(text: str) -> ToolResult:
    """Write a note."""
    return ToolResult.text(f"wrote {text}")


class Writes:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(write_note)


def _config(path: Path, script: Path, tool_name: str, **more: str) -> None:
    lines = [
        "[providers.model]",
        'kind = "scripted"',
        f"script = {json.dumps(str(script))}",
        'trust_zone = "local"',
        "[defaults]",
        'provider = "model"',
        "[actor]",
        'id = "alice"',
        "[switch]",
        f"tool = {json.dumps(tool_name)}",
        *(f"{key} = {value}" for key, value in more.items()),
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "done"}] * 4}), encoding="utf-8")
    return tmp_path / "nrllm.toml", script


def _host(tmp_path: Path, config: Path, *plugins: tuple[str, object]) -> Host:
    pm = make_plugin_manager(load_entry_points=False)
    for name, plugin in plugins:
        pm.register(plugin, name=name)
    return Host.from_config(config, pm=pm, data_dir=tmp_path, environ={})


def test_the_gate_decides_on_the_tools_the_settings_of_this_run_register(tmp_path, files):
    config, script = files
    _config(config, script, "first")
    host = _host(tmp_path, config, ("switch", Switch()))
    try:
        host.run("hello")
        _config(config, script, "second")

        events: list[Any] = []

        host.run("hello", on_event=events.append)

        (gate,) = [e.step for e in events if e.step.kind == "gate"]
        assert [d["tool"] for d in gate.fields["decisions"] if d["offered"]] == ["second"]
    finally:
        host.store.close()


def test_a_direct_calls_gate_that_fails_settles_the_call_as_failed(tmp_path, files, monkeypatch):
    from nrllm_core import _direct_flow

    config, script = files
    _config(config, script, "first")
    host = _host(tmp_path, config, ("switch", Switch()))

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the gate broke")

    monkeypatch.setattr(_direct_flow, "decide", broken)
    try:
        with pytest.raises(RuntimeError, match="the gate broke"):
            host.invoke("first", {}, zone=TrustZone.LOCAL)

        (run,) = host.runs()
        assert (run.status, run.termination_reason) == (RunStatus.FAILED, "internal_error")
    finally:
        host.store.close()


class Counted:
    """A provider kind that counts the providers it built and those closed."""

    def __init__(self) -> None:
        self.built = 0
        self.closed = 0

    @hookimpl
    def nrllm_register_providers(self, registry: Any) -> None:
        registry.register("counted", self._build)

    def _build(self, name: str, settings: Any, *, config_dir: Any, environ: Any) -> Any:
        from nrllm_core.providers._scripted import scripted_factory

        self.built += 1
        model = scripted_factory(name, settings, config_dir=config_dir, environ=environ)
        counter = self

        class Closing:
            def complete(self, messages: Any, tools: Any) -> Any:
                return model.complete(messages, tools)

            def close(self) -> None:
                counter.closed += 1

        return Closing()


def test_a_provider_is_never_left_open_by_a_configuration_error(tmp_path, files, monkeypatch):
    from nrllm_core import ConfigError
    from nrllm_core._manager import PluginManager

    config, script = files
    _config(config, script, "first")
    text = config.read_text(encoding="utf-8").replace('kind = "scripted"', 'kind = "counted"')
    config.write_text(text, encoding="utf-8")
    counted = Counted()
    host = _host(tmp_path, config, ("switch", Switch()), ("counted", counted))
    try:
        assert host.run("hello").status == "completed"
        assert (counted.built, counted.closed) == (1, 1)
        catalog = PluginManager.catalog
        calls = iter(range(100))

        def failing(self: PluginManager) -> Any:
            # The gate's catalog is read first; the one read after it fails.
            if next(calls) == 1:
                raise ConfigError("the plugin settings no longer load")
            return catalog(self)

        monkeypatch.setattr(PluginManager, "catalog", failing)

        outcome = host.run("hello")

        assert outcome.status == "failed"
        assert counted.built == counted.closed
    finally:
        host.store.close()


def test_an_approval_reads_the_configuration_and_the_state_key_once(tmp_path, files, monkeypatch):
    from nrllm_core import _approval_flow, _suspension

    config, script = files
    script.write_text(
        json.dumps(
            {
                "turns": [
                    {
                        "tool_calls": [
                            {"id": "c1", "name": "write_note", "arguments": {"text": "a"}}
                        ]
                    },
                    {"content": "done"},
                ]
            }
        ),
        encoding="utf-8",
    )
    _config(config, script, "first")
    host = _host(tmp_path, config, ("switch", Switch()), ("writes", Writes()))
    try:
        suspended = host.run("write a")
        assert suspended.status == "awaiting_approval"
        parts = host.flows.parts
        loads: list[object] = []
        keys: list[object] = []
        load, key = parts.load, _suspension.load_state_key

        def counted_load() -> Any:
            loads.append(1)
            return load()

        def counted_key(*args: Any) -> Any:
            keys.append(1)
            return key(*args)

        object.__setattr__(parts, "load", counted_load)
        monkeypatch.setattr(_suspension, "load_state_key", counted_key)
        # The live gate reads the configuration at every call, by design: not counted here.
        live_gate = _approval_flow.live_gate
        monkeypatch.setattr(
            _approval_flow,
            "live_gate",
            lambda pm, _, **kwargs: live_gate(pm, load, **kwargs),
        )

        outcome = host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)

        assert outcome.status == "completed"
        assert (len(keys), len(loads)) == (1, 1)
    finally:
        host.store.close()

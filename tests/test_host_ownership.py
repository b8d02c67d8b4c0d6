"""A host owns its plugin manager: a second host on the same one is refused, and changes
nothing of the first host's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import Host, PluginManager, ToolRegistry, hookimpl, make_plugin_manager, tool
from nrllm_core.store import Store


class Named:
    """Registers one tool, named by the plugin's own section: which host's configuration the
    manager builds its catalog with shows in the catalog."""

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry, settings: Any) -> None:
        registry.register(tool(group="content", name=settings.get("tool", "unnamed"))(_answer))


def _answer() -> str:
    """Answer."""
    return "answered"


def _manager() -> PluginManager:
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(Named(), name="named")
    return pm


def _host(folder: Path, pm: PluginManager, name: str) -> Host:
    script = folder / f"{name}.json"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(json.dumps({"turns": [{"content": f"{name} answered"}]}), encoding="utf-8")
    return Host.from_config(
        data={
            "providers": {"model": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "model"},
            "named": {"tool": name},
        },
        pm=pm,
        data_dir=folder / name,
        environ={},
    )


def test_a_second_host_on_a_hosts_manager_is_refused_and_changes_nothing(tmp_path):
    pm = _manager()
    first = _host(tmp_path, pm, "first")
    plugins = pm.list_name_plugin()
    try:
        with pytest.raises(ValueError, match="belongs to another host"):
            _host(tmp_path, pm, "second")
        # Neither the plugins nor the configuration the manager reads changed.
        assert pm.list_name_plugin() == plugins
        assert sorted(pm.catalog().tools) == ["first"]

        outcome = first.run("go")
    finally:
        first.store.close()
    # The refused host's store was closed again, and got nothing.
    second = Store.open(None, data_dir=tmp_path / "second")
    try:
        assert second.list_runs() == []
    finally:
        second.close()
    assert [r.run_id for r in first.runs()] == [outcome.run_id]


def test_a_host_built_by_hand_on_another_hosts_manager_is_refused(tmp_path):
    pm = _manager()
    first = _host(tmp_path, pm, "first")
    store = Store.open(None, data_dir=tmp_path / "by-hand")
    try:
        with pytest.raises(ValueError, match="belongs to another host"):
            Host(
                pm=pm,
                config_loader=lambda: first.config,
                store=store,
                data_dir=tmp_path / "by-hand",
                environ={},
            )
    finally:
        store.close()
        first.store.close()


def test_two_hosts_with_two_managers_each_write_their_own_store(tmp_path):
    first = _host(tmp_path, _manager(), "first")
    second = _host(tmp_path, _manager(), "second")
    try:
        one = first.run("go")
        two = second.run("go")
        assert (one.final_content, two.final_content) == ("first answered", "second answered")
        assert [r.run_id for r in first.runs()] == [one.run_id]
        assert [r.run_id for r in second.runs()] == [two.run_id]
        for host, run_id in ((first, one.run_id), (second, two.run_id)):
            detail = host.store.get_run(run_id)
            assert detail is not None
            assert [s.kind for s in detail.steps][-1] == "finish"
            assert host.store.verify(run_id).broken == ()
        assert sorted(first.pm.catalog().tools) == ["first"]
        assert sorted(second.pm.catalog().tools) == ["second"]
    finally:
        first.store.close()
        second.store.close()

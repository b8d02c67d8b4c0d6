"""Shared fixtures: a capturing sink plugin, a tools plugin, and managers with no entry points."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from nrllm_core import (
    Actor,
    PluginManager,
    Tool,
    ToolContext,
    ToolRegistry,
    hookimpl,
    make_plugin_manager,
)
from nrllm_core.testing import SinkRecorder, postgres_schema

# The sink recorder every core test uses.
Sinks = SinkRecorder


class ToolsPlugin:
    """A plugin registering the given tools."""

    def __init__(self, *tools: Tool) -> None:
        self.tools = tools

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        for t in self.tools:
            registry.register(t)


@pytest.fixture
def sinks() -> Sinks:
    return Sinks()


@pytest.fixture
def context() -> ToolContext:
    return ToolContext(run_id="run-1", call_id="call-1", actor=Actor(id="tester"))


@pytest.fixture
def tools_plugin() -> type[ToolsPlugin]:
    return ToolsPlugin


@pytest.fixture
def sinks_class() -> type[Sinks]:
    return Sinks


@pytest.fixture
def make_pm(sinks: Sinks) -> Callable[..., PluginManager]:
    """Build a manager with ``tools`` in one plugin, the ``sinks`` fixture, and no entry points."""

    def build(*tools: Tool, plugins: tuple[Any, ...] = ()) -> PluginManager:
        return make_plugin_manager(
            plugins=[ToolsPlugin(*tools), sinks, *plugins], load_entry_points=False
        )

    return build


# -- the audit store, on SQLite and on PostgreSQL ------------------------------------------------


@attrs.frozen(kw_only=True)
class Backend:
    """Where a test's audit store lives: ``url`` ``None`` is the embedded SQLite file."""

    name: str
    url: str | None
    data_dir: Path

    def open(self, **kwargs: Any) -> Any:
        from nrllm_core.store import Store

        return Store.open(self.url, data_dir=self.data_dir, **kwargs)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each store test runs on both; PostgreSQL gets a fresh schema, dropped afterwards."""
    if request.param == "sqlite":
        yield Backend(name="sqlite", url=None, data_dir=tmp_path)
        return
    with postgres_schema("nrllm_test") as url:
        yield Backend(name="postgresql", url=url, data_dir=tmp_path)


@pytest.fixture
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio."""
    return "asyncio"

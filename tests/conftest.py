"""Shared fixtures: a capturing sink plugin, a tools plugin, and managers with no entry points.

The tool doubles here are the suite's one copy: a test module imports them
(``from .conftest import Counting, Probe``) rather than keeping its own twin.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import anyio
import attrs
import pytest

from nrllm_core import (
    Actor,
    DataClass,
    Effect,
    PluginManager,
    Tool,
    ToolArtifact,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
)
from nrllm_core._async_host import AsyncHost
from nrllm_core._host import Host
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


class Counting(Tool):
    """A public-content tool that keeps the arguments of each execution in ``calls``: a
    read unless given another effect, answering ``"<name> done"`` unless given ``content``,
    with an optional artifact and an optional ``previewer`` of the arguments."""

    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "additionalProperties": False,
        }
    )

    def __init__(
        self,
        name: str,
        *,
        effect: Effect = Effect.READ_ONLY,
        requires_approval: bool = False,
        previewer: Callable[[dict[str, Any]], Any] | None = None,
        content: str | None = None,
        artifact: ToolArtifact | None = None,
    ) -> None:
        self.name = name
        self.description = f"The {name} tool."
        self.effect = effect
        self.requires_approval = requires_approval
        self.previewer = previewer
        self.content = f"{name} done" if content is None else content
        self.artifact = artifact
        self.calls: list[dict[str, Any]] = []

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        extra = () if self.artifact is None else (self.artifact,)
        return ToolResult.text(self.content, *extra)

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        if self.previewer is None:
            return None
        # Whatever the previewer returns: the tests of bad previews return bad values.
        lines: list[str] | None = self.previewer(arguments)
        return lines


class Probe(Tool):
    """A tool whose every property a test sets, which counts its calls and answers with the
    actor it ran for."""

    description = "A probe."

    def __init__(self, name: str, group: str = "content", **spec: Any) -> None:
        self.name = name
        self.group = group
        self.calls = 0
        for key, value in spec.items():
            setattr(self, key, value)

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls += 1
        return ToolResult.text(f"ran for {context.actor.id}")


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


@pytest.fixture(params=["sync", "async"])
def driven(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs a test once with ``Host`` as it is and once with ``Host.run``/``approve``/
    ``invoke``/``submit`` going through :class:`AsyncHost` on an event loop: one suite, both
    drivers."""
    if request.param == "async":
        for name in ("run", "approve", "invoke", "submit"):
            monkeypatch.setattr(Host, name, _through_async_host(name))
    return str(request.param)


def _through_async_host(name: str) -> Callable[..., Any]:
    def call(host: Host, *args: Any, **kwargs: Any) -> Any:
        method = getattr(AsyncHost(host), name)
        return anyio.run(functools.partial(method, *args, **kwargs))

    return call


@pytest.fixture
def anyio_backend() -> str:
    """``@pytest.mark.anyio`` tests run on asyncio."""
    return "asyncio"

"""Shared fixtures: a capturing sink plugin, a tools plugin, and managers with no entry points."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from nrllm_core import (
    Actor,
    AuditRecord,
    PluginManager,
    Tool,
    ToolContext,
    ToolRegistry,
    TraceEvent,
    WirePayload,
    hookimpl,
    make_plugin_manager,
)


class Sinks:
    """A plugin implementing the three sink hooks that keeps whatever each one receives."""

    def __init__(self) -> None:
        self.wire: list[object] = []
        self.trace: list[object] = []
        self.audit: list[object] = []

    @hookimpl
    def nrllm_wire(self, payload: WirePayload) -> None:
        self.wire.append(payload)

    @hookimpl
    def nrllm_trace(self, event: TraceEvent) -> None:
        self.trace.append(event)

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        self.audit.append(record)


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

POSTGRES_ENV = "NRLLM_TEST_POSTGRES_URL"


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
    base = os.environ.get(POSTGRES_ENV)
    if not base:
        if os.environ.get("CI"):
            pytest.fail(f"{POSTGRES_ENV} is not set: CI must run the PostgreSQL cases")
        pytest.skip(
            f"PostgreSQL cases: set {POSTGRES_ENV}="
            "postgresql+psycopg://postgres@127.0.0.1:5432/test to run them"
        )
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    schema = f"nrllm_test_{uuid.uuid4().hex[:16]}"
    admin = create_engine(make_url(base).set(drivername="postgresql+psycopg"))
    with admin.begin() as connection:
        connection.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
    try:
        yield Backend(
            name="postgresql", url=url.render_as_string(hide_password=False), data_dir=tmp_path
        )
    finally:
        with admin.begin() as connection:
            connection.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()

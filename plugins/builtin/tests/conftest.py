"""Fixtures: the sample database on SQLite and on PostgreSQL, and calls through the seam."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import nrllm_builtin
from nrllm_builtin.sample import create_sample_database, populate_sample
from nrllm_core import (
    Actor,
    ToolArtifact,
    ToolContext,
    invoke,
    make_plugin_manager,
)
from nrllm_core.testing import SinkRecorder as Sinks
from nrllm_core.testing import postgres_schema


@attrs.frozen(kw_only=True)
class Answer:
    """What one call delivered: the wire's text and the trace's artifacts."""

    content: str
    is_error: bool
    artifacts: tuple[ToolArtifact, ...]

    def table(self) -> dict[str, Any]:
        (artifact,) = self.artifacts
        assert artifact.type.value == "table"
        data: dict[str, Any] = artifact.data
        return data


Call = Callable[..., Answer]


def call_tool(name: str, arguments: dict[str, Any], settings: dict[str, Any]) -> Answer:
    """One call through the invoke seam (schema check, bounds, sinks) as a direct call."""
    sinks = Sinks()
    pm = make_plugin_manager(plugins=[sinks], load_entry_points=False)
    # Registered under its entry-point name, which names its settings section.
    pm.register(nrllm_builtin, name="builtin")
    context = ToolContext(
        run_id="run-1",
        call_id="call-1",
        actor=Actor(id="tester"),
        settings={"builtin": settings},
    )
    wire = invoke(pm, name, arguments, context=context)
    (event,) = sinks.trace
    return Answer(content=wire.content, is_error=wire.is_error, artifacts=event.step.tool_artifacts)


@attrs.frozen(kw_only=True)
class Records:
    """A sample database to point ``[builtin] records_url`` at."""

    backend: str
    url: str

    def settings(self, **extra: Any) -> dict[str, Any]:
        return {"records_url": self.url, **extra}

    def call(self, name: str, arguments: dict[str, Any], **extra: Any) -> Answer:
        return call_tool(name, arguments, self.settings(**extra))

    def scalar(self, sql: str) -> Any:
        from sqlalchemy import create_engine, text
        from sqlalchemy.pool import NullPool

        engine = create_engine(self.url, poolclass=NullPool)
        try:
            with engine.connect() as connection:
                return connection.execute(text(sql)).scalar()
        finally:
            engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def records(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Records]:
    """The sample database, fresh per test; on PostgreSQL in its own schema, dropped after."""
    if request.param == "sqlite":
        path = create_sample_database(tmp_path / "sample.db")
        yield Records(backend="sqlite", url=f"sqlite+pysqlite:///{path}")
        return
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    with postgres_schema("nrllm_builtin") as url:
        loader = create_engine(url, poolclass=NullPool)
        with loader.begin() as connection:
            populate_sample(connection)
        loader.dispose()
        yield Records(backend="postgresql", url=url)


@pytest.fixture
def sqlite_records(tmp_path: Path) -> Records:
    path = create_sample_database(tmp_path / "sample.db")
    return Records(backend="sqlite", url=f"sqlite+pysqlite:///{path}")


@pytest.fixture
def call() -> Call:
    """``call(tool, arguments, settings)``: one call through the seam with these settings."""
    return call_tool

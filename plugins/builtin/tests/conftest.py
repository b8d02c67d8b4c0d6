"""Fixtures: the sample database on SQLite and on PostgreSQL, and calls through the seam."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from nrllm_builtin.sample import create_sample_database, populate_sample
from nrllm_core import ToolArtifact
from nrllm_core.pytest_plugin import Harness, Invocation
from nrllm_core.testing import postgres_schema


@attrs.frozen
class Answer:
    """One call as the ``nrllm`` fixture recorded it, with a read's one table at hand."""

    call: Invocation

    @property
    def content(self) -> str:
        return self.call.content

    @property
    def is_error(self) -> bool:
        return self.call.is_error

    @property
    def artifacts(self) -> tuple[ToolArtifact, ...]:
        return self.call.artifacts

    def table(self) -> dict[str, Any]:
        (artifact,) = self.artifacts
        assert artifact.type.value == "table"
        data: dict[str, Any] = artifact.data
        return data


Call = Callable[..., Answer]


@attrs.frozen(kw_only=True)
class Records:
    """A sample database to point ``[builtin] records_url`` at."""

    backend: str
    url: str
    through: Call

    def settings(self, **extra: Any) -> dict[str, Any]:
        return {"records_url": self.url, **extra}

    def call(self, name: str, arguments: dict[str, Any], **extra: Any) -> Answer:
        return self.through(name, arguments, self.settings(**extra))

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
def records(request: pytest.FixtureRequest, tmp_path: Path, call: Call) -> Iterator[Records]:
    """The sample database, fresh per test; on PostgreSQL in its own schema, dropped after."""
    if request.param == "sqlite":
        path = create_sample_database(tmp_path / "sample.db")
        yield Records(backend="sqlite", url=f"sqlite+pysqlite:///{path}", through=call)
        return
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    with postgres_schema("nrllm_builtin") as url:
        loader = create_engine(url, poolclass=NullPool)
        with loader.begin() as connection:
            populate_sample(connection)
        loader.dispose()
        yield Records(backend="postgresql", url=url, through=call)


@pytest.fixture
def sqlite_records(tmp_path: Path, call: Call) -> Records:
    path = create_sample_database(tmp_path / "sample.db")
    return Records(backend="sqlite", url=f"sqlite+pysqlite:///{path}", through=call)


@pytest.fixture
def call(nrllm: Harness) -> Call:
    """``call(tool, arguments, settings)``: one direct call through the ``nrllm`` fixture's
    host, with ``settings`` as the ``[builtin]`` section, checked and typed by its settings
    class as a host's configuration is."""
    nrllm.load_installed("builtin")

    def call(name: str, arguments: dict[str, Any], settings: dict[str, Any]) -> Answer:
        # The harness reads its configuration on every call: each call has its own section.
        nrllm.config["builtin"] = settings
        return Answer(nrllm.invoke(name, **arguments))

    return call

"""The host's records database: one engine per call, only tables that exist are named."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

from nrllm_builtin._settings import BuiltinSettings

if TYPE_CHECKING:
    from sqlalchemy import Connection, Table

__all__ = ["SAMPLE_FILENAME", "connect", "reflect_table", "sample_path", "table_names"]

SAMPLE_FILENAME: Final = "builtin-sample.db"


def sample_path() -> Path:
    """Where the bundled sample database lives: the nrllm data folder."""
    from nrllm_core.store import default_data_dir

    return default_data_dir() / SAMPLE_FILENAME


def _url(settings: BuiltinSettings) -> str:
    if settings.records_url is not None:
        from sqlalchemy.engine import make_url

        parsed = make_url(settings.records_url)
        # A bare ``postgresql://`` would pick psycopg2, which nrllm does not install.
        if parsed.drivername == "postgresql":
            parsed = parsed.set(drivername="postgresql+psycopg")
        return parsed.render_as_string(hide_password=False)
    path = sample_path()
    if not path.exists():
        from nrllm_builtin.sample import create_sample_database

        create_sample_database(path)
    return f"sqlite+pysqlite:///{path}"


@contextlib.contextmanager
def connect(settings: BuiltinSettings, *, write: bool = False) -> Iterator[Connection]:
    """A connection in one transaction, committed only for a write; the engine is disposed after.

    No engine outlives a call, so a change of ``records_url`` takes effect at the next call.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    engine = create_engine(_url(settings), poolclass=NullPool)
    try:
        with engine.connect() as connection, connection.begin() as transaction:
            yield connection
            if not write:
                transaction.rollback()
    finally:
        engine.dispose()


def table_names(connection: Connection) -> list[str]:
    """The tables of the connection's default schema."""
    from sqlalchemy import inspect

    return sorted(str(name) for name in inspect(connection).get_table_names())


def reflect_table(connection: Connection, name: str) -> Table:
    """The reflected table; ``name`` must come from :func:`table_names`, never from a caller."""
    from sqlalchemy import MetaData, Table

    return Table(name, MetaData(), autoload_with=connection)

"""Connecting to the audit database and keeping its schema at the shipped migrations' head."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.dml import UpdateBase

from nrllm_core._private_files import private_dir, private_file

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "DB_FILENAME",
    "HEAD_REVISION",
    "SchemaOutdatedError",
    "current_revisions",
    "default_data_dir",
    "engine_for",
    "execute_rows",
    "head_revisions",
    "run_upgrade",
]

DB_FILENAME: Final = "nrllm.db"
# The last shipped migration's revision. The store compares the database's with it in one query
# and loads Alembic only to migrate (a test holds it to Alembic's head): importing Alembic and
# reading the scripts cost most of a short command's time.
HEAD_REVISION: Final = "0008"
_MIGRATIONS: Final = Path(__file__).parent / "migrations"
# Long enough for a burst of writers in other processes; each write is one short transaction.
_BUSY_TIMEOUT_MS: Final = 30_000


class SchemaOutdatedError(RuntimeError):
    """The database was created by an older nrllm; ``nrllm db upgrade`` brings it to head."""


def default_data_dir() -> Path:
    """``$NRLLM_HOME``, else the platform's user data folder for ``nrllm``."""
    home = os.environ.get("NRLLM_HOME")
    if home:
        return Path(home)
    import platformdirs

    return Path(platformdirs.user_data_dir("nrllm", appauthor=False))


def engine_for(url: str | None, data_dir: str | os.PathLike[str] | None) -> Engine:
    """An engine for ``url``; ``None`` is the embedded SQLite file under ``data_dir``.

    The embedded database's folder is created 0700, and the database file is made 0600 before
    SQLite opens it; SQLite creates its ``-wal`` and ``-shm`` files with the database file's
    mode, and ones left by an older nrllm are brought to 0600 here.
    """
    if url is None:
        directory = private_dir(Path(data_dir) if data_dir is not None else default_data_dir())
        database = directory / DB_FILENAME
        private_file(database)
        for suffix in ("-wal", "-shm"):
            private_file(database.with_name(DB_FILENAME + suffix), create=False)
        url = f"sqlite+pysqlite:///{database}"
    parsed = make_url(url)
    # A bare ``postgresql://`` would pick psycopg2, which nrllm does not install.
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_events(create_engine(parsed))
    return create_engine(parsed, pool_pre_ping=True)


def _sqlite_events(engine: Engine) -> Engine:
    event.listen(engine, "connect", _sqlite_connect)
    event.listen(engine, "begin", _sqlite_begin)
    return engine


def _sqlite_connect(dbapi_connection: Any, connection_record: object) -> None:
    # Transactions are begun by ``_sqlite_begin``, not by the driver's implicit ones.
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        # In WAL mode a commit with synchronous=NORMAL survives a killed process; only a power
        # loss can take back the last commits. That is the documented durability trade.
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
    finally:
        cursor.close()


def _sqlite_begin(connection: Connection) -> None:
    # Taking the write lock up front means a writer waits on busy_timeout instead of failing
    # when another writer commits between its read and its write. Sent through the driver's
    # own cursor: through SQLAlchemy it costs more than SQLite's work.
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute("BEGIN IMMEDIATE")
    finally:
        cursor.close()


# Every pysqlite engine's dialect compiles a statement alike: one is enough to compile them.
_SQLITE: Final = sqlite.dialect()


def execute_rows(
    connection: Connection, statement: UpdateBase, rows: Sequence[Mapping[str, Any]]
) -> int:
    """Run ``statement`` (an insert, update or delete built once) for each of ``rows`` and
    return how many rows it changed in all.

    On SQLite through the driver's own cursor, with the SQL and bind processors SQLAlchemy
    compiled once: for the statements every run's steps make, its execution costs about twice
    SQLite's own work (see docs/performance.md). Other drivers go through SQLAlchemy.
    """
    if connection.dialect.driver != "pysqlite":
        return connection.execute(statement, list(rows)).rowcount
    sql, binds = _sqlite_form(statement)
    cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.executemany(sql, [tuple(bind(row[name]) for name, bind in binds) for row in rows])
        return int(cursor.rowcount)
    finally:
        cursor.close()


@functools.cache
def _sqlite_form(statement: UpdateBase) -> tuple[str, tuple[tuple[str, Callable[[Any], Any]], ...]]:
    """``statement``'s SQLite SQL and, in the order of its parameters, each one's name and
    the processor its type binds it with (a datetime column's, say)."""
    compiled = statement.compile(dialect=_SQLITE)
    binds = []
    for name in compiled.positiontup or ():
        bind = compiled.binds[name]
        if not bind.required:
            raise TypeError(f"the parameter {name!r} is not one a row names")
        kind = bind.type.dialect_impl(_SQLITE)
        binds.append((name, kind.bind_processor(_SQLITE) or _unchanged))
    return compiled.string, tuple(binds)


def _unchanged(value: Any) -> Any:
    return value


def _alembic_config(
    connection: Connection | None = None, environ: Mapping[str, str] | None = None
) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["connection"] = connection
    # The audit chain's key comes from the environment: migrations chain with the store's.
    config.attributes["environ"] = os.environ if environ is None else environ
    return config


def head_revisions() -> frozenset[str]:
    from alembic.script import ScriptDirectory

    return frozenset(ScriptDirectory.from_config(_alembic_config()).get_heads())


def current_revisions(engine: Engine) -> frozenset[str]:
    """The revisions the database's ``alembic_version`` table holds; none for a new database."""
    with engine.connect() as connection:
        try:
            rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
        except DBAPIError:
            # Only a missing table means a new database: any other failure is raised as is.
            connection.rollback()
            if inspect(connection).has_table("alembic_version"):
                raise
            return frozenset()
    return frozenset(row[0] for row in rows)


def run_upgrade(engine: Engine, environ: Mapping[str, str] | None = None) -> None:
    """Apply every shipped migration the database lacks, in one transaction where it can;
    ``environ`` holds the audit key variables (default: the process environment)."""
    from alembic import command

    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection, environ), "head")

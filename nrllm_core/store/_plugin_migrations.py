"""A plugin's own tables in the audit's database: its Alembic history next to the audit's.

Each plugin keeps its scripts in its package and its revisions in a version table of its own,
so the two histories never meet.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from nrllm_core.store._chain import derived_key
from nrllm_core.store._operations import read_chain_key

__all__ = ["open_plugin_engine", "plugin_key", "run_plugin_migrations", "upgrade_plugin_schema"]


def plugin_key(engine: Engine, purpose: str, *, environ: Mapping[str, str] | None = None) -> bytes:
    """The key ``Store.derived_key(purpose)`` gives, read over a plugin's own engine on the
    audit's database (see :func:`open_plugin_engine`), without opening the audit store.
    ``LookupError`` when the database holds no audit key (no audit store has made one, or it
    was lost) and ``environ`` (default: the process environment) names none."""
    with engine.connect() as connection:
        key = read_chain_key(connection, os.environ if environ is None else environ)
    return derived_key(key, purpose)


def upgrade_plugin_schema(
    engine: Engine, *, migrations: str | os.PathLike[str], version_table: str, lock_key: int
) -> None:
    """Bring the plugin's tables to the head of ``migrations`` (its Alembic folder), unless
    they are there already. On PostgreSQL, processes migrating one new database together take
    turns on the advisory lock ``lock_key`` (any constant of the plugin's own)."""
    from alembic import command
    from alembic.config import Config
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    config = Config()
    config.set_main_option("script_location", os.fspath(migrations))
    heads = frozenset(ScriptDirectory.from_config(config).get_heads())
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"version_table": version_table})
        if frozenset(context.get_current_heads()) == heads:
            return
    with engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key})
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def open_plugin_engine(
    url: str | None,
    data_dir: str | os.PathLike[str] | None,
    *,
    migrations: str | os.PathLike[str],
    version_table: str,
    lock_key: int,
) -> Engine:
    """An engine on the audit's database (``None``: the embedded ``nrllm.db`` in ``data_dir``),
    as :func:`~nrllm_core.store.engine_for` connects, with the plugin's tables brought to the
    head of ``migrations`` (see :func:`upgrade_plugin_schema`). Disposed again if that fails."""
    from nrllm_core.store._database import engine_for

    engine = engine_for(url, data_dir)
    try:
        upgrade_plugin_schema(
            engine, migrations=migrations, version_table=version_table, lock_key=lock_key
        )
    except BaseException:
        engine.dispose()
        raise
    return engine


def run_plugin_migrations(metadata: Any, version_table: str) -> None:
    """The whole of a plugin's ``migrations/env.py``: run on the connection
    :func:`upgrade_plugin_schema` hands over, never offline."""
    from alembic import context

    connection = context.config.attributes.get("connection")
    if connection is None or context.is_offline_mode():
        raise RuntimeError("run the plugin's migrations through upgrade_plugin_schema()")
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=version_table,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()

"""Alembic environment: the plugin's migrations, on the connection the pin store hands over."""

from __future__ import annotations

from alembic import context

from nrllm_mcp._schema import METADATA, VERSION_TABLE

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("run migrations through nrllm_mcp's PinStore.open()")
context.configure(
    connection=connection,
    target_metadata=METADATA,
    version_table=VERSION_TABLE,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()

"""Alembic environment: the plugin's migrations, on the connection the job store hands over."""

from __future__ import annotations

from alembic import context

from nrllm_repurpose._schema import METADATA, VERSION_TABLE

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("run migrations through nrllm_repurpose's JobStore.open()")
context.configure(
    connection=connection,
    target_metadata=METADATA,
    version_table=VERSION_TABLE,
    render_as_batch=True,
)
with context.begin_transaction():
    context.run_migrations()

"""Alembic environment: migrations run on the connection the store hands over, never offline."""

from __future__ import annotations

from alembic import context

from nrllm_core.store._models import METADATA

connection = context.config.attributes.get("connection")
if connection is None or context.is_offline_mode():
    raise RuntimeError("run migrations through nrllm_core.store.Store.upgrade()")
context.configure(connection=connection, target_metadata=METADATA, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()

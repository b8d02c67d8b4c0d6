"""Alembic environment: the plugin's migrations, on the connection the job store hands over."""

from __future__ import annotations

from nrllm_core.store import run_plugin_migrations
from nrllm_repurpose._schema import METADATA, VERSION_TABLE

run_plugin_migrations(METADATA, VERSION_TABLE)

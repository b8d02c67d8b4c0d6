"""The pin tables, in the audit's database, and the plugin's own Alembic version table.

Importing this module loads SQLAlchemy; the plugin's package imports it only inside functions.
"""

from __future__ import annotations

from typing import Final

import sqlalchemy as sa

__all__ = ["METADATA", "PINS", "SERVERS", "VERSION_TABLE"]

# The audit keeps ``alembic_version``; a table of its own keeps the two histories apart.
VERSION_TABLE: Final = "nrllm_mcp_alembic_version"

METADATA: Final = sa.MetaData()

PINS: Final = sa.Table(
    "mcp_pins",
    METADATA,
    sa.Column("server", sa.String(64), primary_key=True),
    sa.Column("tool", sa.String(255), primary_key=True),
    sa.Column("digest", sa.String(64), nullable=False),
    # The canonical JSON the digest is over: the original description, for ``nrllm mcp pins``.
    sa.Column("definition", sa.Text, nullable=False),
    sa.Column("pinned_at", sa.String(32), nullable=False),
    sa.Column("pinned_by", sa.String(255), nullable=False),
    # HMAC-SHA256 of the row under a key derived from the audit key; none on rows pinned
    # before pins carried one, which count as changed until approved again.
    sa.Column("mac", sa.String(64), nullable=True),
)

# The servers listed at least once: trust on first use is over for them, even with no tool.
SERVERS: Final = sa.Table(
    "mcp_servers",
    METADATA,
    sa.Column("server", sa.String(64), primary_key=True),
    sa.Column("pinned_at", sa.String(32), nullable=False),
    sa.Column("pinned_by", sa.String(255), nullable=False),
)

"""The MCP pin table: one row per server and tool, the digest of its approved definition.

Revision ID: mcp_0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "mcp_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mcp_pins",
        sa.Column("server", sa.String(64), primary_key=True),
        sa.Column("tool", sa.String(255), primary_key=True),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("definition", sa.Text(), nullable=False),
        sa.Column("pinned_at", sa.String(32), nullable=False),
        sa.Column("pinned_by", sa.String(255), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mcp_pins")

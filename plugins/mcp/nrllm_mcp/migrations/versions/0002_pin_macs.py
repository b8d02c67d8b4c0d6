"""Authenticated pins, and the servers whose first listing was pinned.

Pins written before this revision get no mac: they count as ``changed`` (the tool is
withheld, ``nrllm mcp pins`` says ``no MAC``) until a person approves them again. A server
with such pins is known already, so its tools never go through trust on first use again.

Revision ID: mcp_0002
Revises: mcp_0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "mcp_0002"
down_revision = "mcp_0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("mcp_pins") as batch:
        batch.add_column(sa.Column("mac", sa.String(64), nullable=True))
    op.create_table(
        "mcp_servers",
        sa.Column("server", sa.String(64), primary_key=True),
        sa.Column("pinned_at", sa.String(32), nullable=False),
        sa.Column("pinned_by", sa.String(255), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("mcp_servers")
    with op.batch_alter_table("mcp_pins") as batch:
        batch.drop_column("mac")

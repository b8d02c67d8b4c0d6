"""The nonces of sealed states already claimed: a state opens for one decision, ever.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "consumed_approvals",
        sa.Column("nonce", sa.String(64), primary_key=True),
        # No foreign key: a nonce outlives its run's purge, so a purged run's state can never
        # be put back and claimed again.
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("consumed_approvals")

"""The W3C trace context of a suspended turn, kept next to (never inside) its sealed state.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Batch mode, so that SQLite can drop the column again; NULL for turns suspended before.
    with op.batch_alter_table("suspensions") as batch:
        batch.add_column(sa.Column("trace_context", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("suspensions") as batch:
        batch.drop_column("trace_context")

"""When a suspended turn expires, kept next to (never inside) its sealed state.

A sweep that ends the turns nobody answered (``nrllm mcp serve``'s, once a minute) then asks
the database which open turns are due, instead of opening every waiting turn's sealed state.
The sealed state still decides: the column only says which turns are worth opening. The
partial index holds the open turns only, so decided ones, which accumulate with the runs, cost
nothing. NULL for turns suspended before this revision: their expiry is unknown, and the sweep
opens them.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_OPEN = sa.text("decided_at IS NULL")


def upgrade() -> None:
    # Batch mode, so that SQLite can drop the column again.
    with op.batch_alter_table("suspensions") as batch:
        batch.add_column(sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "ix_suspensions_open_expires_at",
        "suspensions",
        ["expires_at"],
        sqlite_where=_OPEN,
        postgresql_where=_OPEN,
    )


def downgrade() -> None:
    op.drop_index("ix_suspensions_open_expires_at", table_name="suspensions")
    with op.batch_alter_table("suspensions") as batch:
        batch.drop_column("expires_at")

"""The run's chain head authenticated: an HMAC of its run id, step count and last mac.

Until this revision ``chain_head`` was the last step's mac and ``steps`` a plain count, so a
database writer could cut a run short and set both to fit what was left. The last mac moves
to ``last_mac``, and ``chain_head`` becomes the HMAC of the run id, the count and the last mac,
with the key the store will use (run ``nrllm db upgrade`` with the host's environment, as for
0004). Each run's head is made from the count and last mac it has at upgrade time: a run cut
short and given a fitting head before the upgrade cannot be told apart afterwards. A run that
has lost its head keeps none, and stays a break.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

from nrllm_core.store._chain import head_mac
from nrllm_core.store._operations import read_chain_key

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

# The table as this revision leaves it, whatever the models say later.
_runs = sa.table(
    "runs",
    sa.column("id", sa.String),
    sa.column("steps", sa.Integer),
    sa.column("last_mac", sa.String),
    sa.column("chain_head", sa.String),
)


def upgrade() -> None:
    op.add_column("runs", sa.Column("last_mac", sa.String(64), nullable=True))
    connection = op.get_bind()
    runs = connection.execute(
        sa.select(_runs.c.id, _runs.c.steps, _runs.c.chain_head).where(
            _runs.c.chain_head.is_not(None)
        )
    ).all()
    if not runs:
        # A new database: nothing to authenticate, and no key needed until the first run.
        return
    # The key the store reads: a variable of the upgrading process, else the database's own
    # (which 0004 made, in this transaction or before).
    key = read_chain_key(connection, context.config.attributes["environ"])
    connection.execute(
        sa.update(_runs)
        .where(_runs.c.id == sa.bindparam("r"))
        .values(last_mac=sa.bindparam("l"), chain_head=sa.bindparam("h")),
        [
            {
                "r": run.id,
                "l": run.chain_head,
                "h": head_mac(key, run.id, run.steps, run.chain_head),
            }
            for run in runs
        ],
    )


def downgrade() -> None:
    op.execute(_runs.update().values(chain_head=_runs.c.last_mac))
    op.drop_column("runs", "last_mac")

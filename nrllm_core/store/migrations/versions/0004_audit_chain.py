"""The audit hash chain: a mac per step, a chain head per run, and the database's own key.

Steps stored before this revision are chained here, as they stand at upgrade time, with the
key the store will use (run ``nrllm db upgrade`` with the host's environment), so that every
run has a head afterwards and a run without one is a break, never a run nobody can check.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import secrets
from collections.abc import Callable

import sqlalchemy as sa
from alembic import context, op

from nrllm_core.store._chain import STEP_FIELDS, ChainKey, chain_key, initial_mac, step_mac
from nrllm_core.store._models import UTCDateTime

revision = "0004"
# Written beside 0003 (consumed approvals) on another branch, against 0002; re-chained onto
# 0003 when main, which has 0003, was merged in.
down_revision = "0003"
branch_labels = None
depends_on = None

# The tables as this revision leaves them, whatever the models say later.
_runs = sa.table(
    "runs",
    sa.column("id", sa.String),
    sa.column("steps", sa.Integer),
    sa.column("chain_head", sa.String),
)
_steps = sa.table(
    "run_steps",
    sa.column("run_id", sa.String),
    sa.column("sequence", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("round", sa.Integer),
    sa.column("duration_ms", sa.Float),
    sa.column("payload", sa.Text),
    sa.column("recorded_at", UTCDateTime),
    sa.column("mac", sa.String),
)


def upgrade() -> None:
    op.add_column("runs", sa.Column("chain_head", sa.String(64), nullable=True))
    op.add_column("run_steps", sa.Column("mac", sa.String(64), nullable=True))
    keys = op.create_table(
        "audit_keys",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
    )
    # Made here, once per database: no two hosts can ever race to create different keys.
    stored = secrets.token_bytes(32)
    op.bulk_insert(keys, [{"id": 1, "secret": stored}])
    _chain_existing(
        op.get_bind(), lambda: chain_key(context.config.attributes["environ"], lambda: stored)
    )


def _chain_existing(connection: sa.Connection, derive: Callable[[], ChainKey]) -> None:
    run_ids = list(connection.execute(sa.select(_runs.c.id)).scalars())
    if not run_ids:
        # A new database: nothing to chain, and no key needed until the first run.
        return
    key = derive()
    set_mac = (
        sa.update(_steps)
        .where(_steps.c.run_id == sa.bindparam("r"), _steps.c.sequence == sa.bindparam("s"))
        .values(mac=sa.bindparam("m"))
    )
    set_head = (
        sa.update(_runs)
        .where(_runs.c.id == sa.bindparam("r"))
        .values(chain_head=sa.bindparam("h"), steps=sa.bindparam("n"))
    )
    fields = [_steps.c[name] for name in STEP_FIELDS]
    for run_id in run_ids:
        head = initial_mac(key, run_id)
        macs = []
        query = sa.select(*fields).where(_steps.c.run_id == run_id).order_by(_steps.c.sequence)
        for row in connection.execute(query).mappings():
            head = step_mac(key, head, row)
            macs.append({"r": run_id, "s": row["sequence"], "m": head})
        if macs:
            connection.execute(set_mac, macs)
        connection.execute(set_head, {"r": run_id, "h": head, "n": len(macs)})


def downgrade() -> None:
    op.drop_table("audit_keys")
    op.drop_column("run_steps", "mac")
    op.drop_column("runs", "chain_head")

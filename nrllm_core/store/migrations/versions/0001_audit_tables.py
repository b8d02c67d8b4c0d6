"""The audit tables: runs, run steps and gate decisions.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("provider", sa.String(255), nullable=True),
        sa.Column("zone", sa.String(32), nullable=True),
        sa.Column("skill", sa.String(255), nullable=True),
        sa.Column("actor", sa.String(255), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("termination_reason", sa.String(64), nullable=True),
        sa.Column("steps", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_runs_status_started_at", "runs", ["status", "started_at"])
    op.create_index("ix_runs_ended_at", "runs", ["ended_at"])
    op.create_table(
        "run_steps",
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), primary_key=True),
        sa.Column("sequence", sa.Integer(), primary_key=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("round", sa.Integer(), nullable=False),
        sa.Column("duration_ms", sa.Float(), nullable=False),
        sa.Column("payload", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "gate_decisions",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("run_id", sa.String(64), sa.ForeignKey("runs.id"), nullable=False),
        sa.Column("tool", sa.String(255), nullable=False),
        sa.Column("reason", sa.String(64), nullable=True),
        sa.Column("zone", sa.String(32), nullable=True),
        sa.Column("ceiling", sa.String(64), nullable=True),
        sa.Column("observed", sa.Boolean(), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_gate_decisions_run_id", "gate_decisions", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_gate_decisions_run_id", table_name="gate_decisions")
    op.drop_table("gate_decisions")
    op.drop_table("run_steps")
    op.drop_index("ix_runs_ended_at", table_name="runs")
    op.drop_index("ix_runs_status_started_at", table_name="runs")
    op.drop_table("runs")

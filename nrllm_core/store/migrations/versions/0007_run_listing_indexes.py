"""Indexes for the runs listing: its order, its filters, and the tools a run called.

The listing pages newest first by ``(started_at, id)``; ``actor`` and ``provider`` filters
read their own ``(column, started_at)`` index (``status`` has had one since 0001; ``kind``
has three values, too few for an index to pay). A run that called a tool is found on a partial
index of tool steps by the ``tool_name`` in their payload, an expression that only the backend's
JSON functions can read, so it is written per backend; the query in ``_operations`` spells
the same expression. The index holds tool steps only, so other steps cost no JSON parse when
written.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# With the run id after the name, a run is checked against a tool by one index probe: a
# planner that walks the runs first (an actor's, newest first) does not rescan every step
# of the tool for each run.
_TOOL_NAME = {
    "postgresql": "((payload::jsonb ->> 'tool_name'), run_id)",
    "sqlite": "(json_extract(payload, '$.tool_name'), run_id)",
}


def upgrade() -> None:
    op.create_index("ix_runs_started_at_id", "runs", ["started_at", "id"])
    op.create_index("ix_runs_actor_started_at", "runs", ["actor", "started_at"])
    op.create_index("ix_runs_provider_started_at", "runs", ["provider", "started_at"])
    dialect = op.get_bind().dialect.name
    expression = _TOOL_NAME.get(dialect)
    if expression is None:
        # Another backend lists runs by tool without the index: correct, only slower.
        return
    op.execute(f"CREATE INDEX ix_run_steps_tool_name ON run_steps {expression} WHERE kind = 'tool'")


def downgrade() -> None:
    if op.get_bind().dialect.name in _TOOL_NAME:
        op.execute("DROP INDEX ix_run_steps_tool_name")
    op.drop_index("ix_runs_provider_started_at", table_name="runs")
    op.drop_index("ix_runs_actor_started_at", table_name="runs")
    op.drop_index("ix_runs_started_at_id", table_name="runs")

"""The repurpose job tables: jobs and their artifacts.

Revision ID: repurpose_0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "repurpose_0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repurpose_jobs",
        sa.Column("uid", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("source_type", sa.String(16), nullable=False),
        sa.Column("source_url", sa.Text(), nullable=False),
        sa.Column("formats", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_repurpose_jobs_status_uid", "repurpose_jobs", ["status", "uid"])
    op.create_table(
        "repurpose_job_artifacts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_uid", sa.Integer(), sa.ForeignKey("repurpose_jobs.uid"), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("file_path", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_repurpose_job_artifacts_job_uid", "repurpose_job_artifacts", ["job_uid"])


def downgrade() -> None:
    op.drop_table("repurpose_job_artifacts")
    op.drop_table("repurpose_jobs")

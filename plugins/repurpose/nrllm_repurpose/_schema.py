"""The job tables, in the audit's database, and the name of the plugin's own version table.

Importing this module loads SQLAlchemy; the plugin's package imports it only inside functions.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import Dialect

__all__ = ["ARTIFACTS", "JOBS", "METADATA", "VERSION_TABLE", "UTCDateTime"]

# The audit keeps ``alembic_version``; a table of its own keeps the two histories apart.
VERSION_TABLE: Final = "nrllm_repurpose_alembic_version"


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, stored naive so both databases compare
    them the same way."""

    impl = sa.DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> Any:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("a naive datetime cannot be stored")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: Any, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        stored: datetime = value
        return stored.replace(tzinfo=UTC)


METADATA: Final = sa.MetaData()

JOBS: Final = sa.Table(
    "repurpose_jobs",
    METADATA,
    sa.Column("uid", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("owner", sa.String(255), nullable=False),
    sa.Column("source_type", sa.String(16), nullable=False),
    # The full URL, query included: the worker needs it; only its redaction is ever shown.
    sa.Column("source_url", sa.Text, nullable=False),
    sa.Column("formats", sa.Text, nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("message", sa.Text, nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.Column("attempt", sa.Integer, nullable=False),
    sa.Column("worker", sa.String(64), nullable=True),
    sa.Column("lease_until", UTCDateTime, nullable=True),
    sa.Index("ix_repurpose_jobs_status_uid", "status", "uid"),
)

ARTIFACTS: Final = sa.Table(
    "repurpose_job_artifacts",
    METADATA,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "job_uid", sa.Integer, sa.ForeignKey("repurpose_jobs.uid"), nullable=False, index=True
    ),
    sa.Column("position", sa.Integer, nullable=False),
    sa.Column("format", sa.String(32), nullable=False),
    sa.Column("status", sa.String(16), nullable=False),
    sa.Column("content", sa.Text, nullable=True),
    sa.Column("file_path", sa.Text, nullable=True),
    sa.Column("error", sa.Text, nullable=True),
)

"""The job store: the plugin's tables in the audit's database, claimed atomically by workers.

Importing this module loads SQLAlchemy; the tool and the commands import it inside functions.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, final

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from nrllm_repurpose._records import (
    RUNNING,
    ArtifactInfo,
    ArtifactStatus,
    Claim,
    JobInfo,
    JobStatus,
)
from nrllm_repurpose._schema import ARTIFACTS, JOBS, VERSION_TABLE

__all__ = ["WORKER_LOST", "JobStore", "LeaseLost"]

_MIGRATIONS: Final = Path(__file__).parent / "migrations"
# Any constant shared by every process that migrates: PostgreSQL serialises them on it.
_MIGRATION_LOCK: Final = 0x6E726C6C6D5250
# A worker that stopped twice on one job does not get a third try: the job fails.
_MAX_ATTEMPTS: Final = 2
WORKER_LOST: Final = "The worker processing this job stopped twice; the job was not tried again"


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LeaseLost(Exception):
    """The job is no longer this worker's: its lease ran out and another worker took it."""


@final
class JobStore:
    """Jobs and artifacts. Build it with :meth:`open`; every write commits before returning.

    Leases are written and judged with ``clock``, the worker machine's UTC time, not the
    database's: workers on several machines need clocks that agree to well within the part of
    a lease the heartbeat leaves unrenewed (two thirds)."""

    __slots__ = ("_clock", "_engine")

    def __init__(self, engine: Engine, *, clock: Callable[[], datetime] = _utcnow) -> None:
        self._engine = engine
        self._clock = clock

    @classmethod
    def open(
        cls,
        url: str | None,
        *,
        data_dir: str | os.PathLike[str] | None,
        clock: Callable[[], datetime] = _utcnow,
    ) -> JobStore:
        """Connect as the audit store does (``None``: the embedded ``nrllm.db`` in
        ``data_dir``) and bring the plugin's tables to the shipped head on first use."""
        from nrllm_core.store import open_plugin_engine

        engine = open_plugin_engine(
            url,
            data_dir,
            migrations=_MIGRATIONS,
            version_table=VERSION_TABLE,
            lock_key=_MIGRATION_LOCK,
        )
        return cls(engine, clock=clock)

    def close(self) -> None:
        self._engine.dispose()

    def __enter__(self) -> JobStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- schema ------------------------------------------------------------------------------

    # -- the tool's side -----------------------------------------------------------------------

    def create_job(
        self, *, owner: str, source_type: str, source_url: str, formats: Sequence[str]
    ) -> int:
        """Queue a new job and return its uid."""
        now = self._clock()
        with self._engine.begin() as connection:
            result = connection.execute(
                sa.insert(JOBS).returning(JOBS.c.uid),
                {
                    "owner": owner,
                    "source_type": source_type,
                    "source_url": source_url,
                    "formats": json.dumps(list(formats)),
                    "status": JobStatus.QUEUED.value,
                    "message": None,
                    "created_at": now,
                    "updated_at": now,
                    "attempt": 0,
                    "worker": None,
                    "lease_until": None,
                },
            )
            uid: int = result.scalar_one()
        return uid

    # -- reading -----------------------------------------------------------------------------

    def jobs(self, *, owner: str | None = None) -> list[JobInfo]:
        """Every job, newest first; only ``owner``'s when one is given."""
        query = sa.select(JOBS).order_by(JOBS.c.uid.desc())
        if owner is not None:
            query = query.where(JOBS.c.owner == owner)
        with self._engine.connect() as connection:
            return [_job(row) for row in connection.execute(query).mappings()]

    def job(self, uid: int) -> JobInfo | None:
        with self._engine.connect() as connection:
            row = connection.execute(sa.select(JOBS).where(JOBS.c.uid == uid)).mappings().first()
        return None if row is None else _job(row)

    def artifacts(self, uid: int) -> list[ArtifactInfo]:
        """A job's artifacts in the order the caller asked for the formats."""
        query = (
            sa.select(ARTIFACTS).where(ARTIFACTS.c.job_uid == uid).order_by(ARTIFACTS.c.position)
        )
        with self._engine.connect() as connection:
            return [
                ArtifactInfo(
                    format=row["format"],
                    status=ArtifactStatus(row["status"]),
                    content=row["content"],
                    file_path=row["file_path"],
                    error=row["error"],
                )
                for row in connection.execute(query).mappings()
            ]

    # -- the worker's side ---------------------------------------------------------------------

    def claim(self, worker: str, *, lease_seconds: int) -> Claim | None:
        """Take the next job, or ``None`` when there is none.

        A job whose lease ran out is taken first: once more on its second attempt, and failed
        with :data:`WORKER_LOST` after that. Then the oldest queued job. The row is locked
        (PostgreSQL ``FOR UPDATE SKIP LOCKED``; SQLite's write lock) and the update is guarded
        by the status it read, so two workers never hold one job.
        """
        while True:
            with self._engine.begin() as connection:
                now = self._clock()
                expired = (
                    connection.execute(
                        sa.select(JOBS)
                        .where(JOBS.c.status.in_([s.value for s in RUNNING]))
                        .where(JOBS.c.lease_until < now)
                        .order_by(JOBS.c.uid)
                        .limit(1)
                        .with_for_update(skip_locked=True)
                    )
                    .mappings()
                    .first()
                )
                row = expired
                if row is None:
                    row = (
                        connection.execute(
                            sa.select(JOBS)
                            .where(JOBS.c.status == JobStatus.QUEUED.value)
                            .order_by(JOBS.c.uid)
                            .limit(1)
                            .with_for_update(skip_locked=True)
                        )
                        .mappings()
                        .first()
                    )
                if row is None:
                    return None
                guard = sa.and_(
                    JOBS.c.uid == row["uid"],
                    JOBS.c.status == row["status"],
                    JOBS.c.attempt == row["attempt"],
                )
                if expired is not None and row["attempt"] >= _MAX_ATTEMPTS:
                    connection.execute(
                        sa.update(JOBS)
                        .where(guard)
                        .values(
                            status=JobStatus.FAILED.value,
                            message=WORKER_LOST,
                            updated_at=now,
                            worker=None,
                            lease_until=None,
                        )
                    )
                    continue
                taken = connection.execute(
                    sa.update(JOBS)
                    .where(guard)
                    .values(
                        status=JobStatus.INGESTING.value,
                        attempt=row["attempt"] + 1,
                        worker=worker,
                        lease_until=now + timedelta(seconds=lease_seconds),
                        updated_at=now,
                        message=None,
                    )
                )
                if taken.rowcount != 1:
                    continue
                return Claim(
                    uid=row["uid"],
                    attempt=row["attempt"] + 1,
                    worker=worker,
                    owner=row["owner"],
                    source_type=row["source_type"],
                    source_url=row["source_url"],
                    formats=tuple(json.loads(row["formats"])),
                )

    @contextlib.contextmanager
    def _held(self, claim: Claim, lease_seconds: int | None, **values: Any) -> Iterator[Connection]:
        """One transaction that renews the claim's lease (``None``: clears it) and sets
        ``values``, or raises :class:`LeaseLost`: nothing is written for a job this worker no
        longer holds."""
        with self._engine.begin() as connection:
            now = self._clock()
            lease = None if lease_seconds is None else now + timedelta(seconds=lease_seconds)
            renewed = connection.execute(
                _holding(claim).values(updated_at=now, lease_until=lease, **values)
            )
            if renewed.rowcount != 1:
                raise LeaseLost(f"job {claim.uid} is no longer held by {claim.worker}")
            yield connection

    def renew(self, claim: Claim, *, lease_seconds: int) -> None:
        """Extend a held job's lease and change nothing else (the worker's heartbeat), or raise
        :class:`LeaseLost`."""
        with self._engine.begin() as connection:
            lease = self._clock() + timedelta(seconds=lease_seconds)
            renewed = connection.execute(_holding(claim).values(lease_until=lease))
        if renewed.rowcount != 1:
            raise LeaseLost(f"job {claim.uid} is no longer held by {claim.worker}")

    def advance(self, claim: Claim, status: JobStatus, *, lease_seconds: int) -> None:
        """Move a held job to a running ``status`` and renew its lease."""
        with self._held(claim, lease_seconds, status=status.value):
            pass

    def start_generating(self, claim: Claim, formats: Sequence[str], *, lease_seconds: int) -> None:
        """Replace whatever an earlier attempt left with one pending artifact per format."""
        with self._held(claim, lease_seconds, status=JobStatus.GENERATING.value) as connection:
            connection.execute(sa.delete(ARTIFACTS).where(ARTIFACTS.c.job_uid == claim.uid))
            if formats:
                connection.execute(
                    sa.insert(ARTIFACTS),
                    [
                        {
                            "job_uid": claim.uid,
                            "position": position,
                            "format": name,
                            "status": ArtifactStatus.PENDING.value,
                            "content": None,
                            "file_path": None,
                            "error": None,
                        }
                        for position, name in enumerate(formats)
                    ],
                )

    def record_artifact(
        self,
        claim: Claim,
        format: str,
        *,
        status: ArtifactStatus,
        content: str | None,
        file_path: str | None,
        error: str | None,
        lease_seconds: int,
    ) -> None:
        """Settle one format of a held job; the write renews the lease."""
        with self._held(claim, lease_seconds) as connection:
            connection.execute(
                sa.update(ARTIFACTS)
                .where(ARTIFACTS.c.job_uid == claim.uid)
                .where(ARTIFACTS.c.format == format)
                .values(status=status.value, content=content, file_path=file_path, error=error)
            )

    def finish(self, claim: Claim, status: JobStatus, message: str | None) -> None:
        """Settle a held job in a terminal ``status``; it is nobody's afterwards."""
        if not status.is_terminal:
            raise ValueError(f"{status} is not a final status")
        with self._held(claim, None, status=status.value, message=message):
            pass


def _holding(claim: Claim) -> sa.Update:
    """An update of the claim's job that matches only while this worker still holds it."""
    return (
        sa.update(JOBS)
        .where(JOBS.c.uid == claim.uid)
        .where(JOBS.c.worker == claim.worker)
        .where(JOBS.c.attempt == claim.attempt)
        .where(JOBS.c.status.in_([s.value for s in RUNNING]))
    )


def _job(row: Any) -> JobInfo:
    return JobInfo(
        uid=row["uid"],
        owner=row["owner"],
        source_type=row["source_type"],
        source_url=row["source_url"],
        formats=tuple(json.loads(row["formats"])),
        status=JobStatus(row["status"]),
        message=row["message"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        attempt=row["attempt"],
    )

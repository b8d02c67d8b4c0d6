"""What the job store hands out: statuses, jobs, their artifacts and a worker's claim."""

from __future__ import annotations

import enum
from datetime import datetime
from typing import Final, final

import attrs

__all__ = ["ArtifactInfo", "ArtifactStatus", "Claim", "JobInfo", "JobStatus"]


class JobStatus(enum.StrEnum):
    """``queued → ingesting → analyzing → generating → done | partially_done | failed``."""

    QUEUED = "queued"
    INGESTING = "ingesting"
    ANALYZING = "analyzing"
    GENERATING = "generating"
    DONE = "done"
    PARTIALLY_DONE = "partially_done"
    FAILED = "failed"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL: Final = frozenset({JobStatus.DONE, JobStatus.PARTIALLY_DONE, JobStatus.FAILED})
RUNNING: Final = (JobStatus.INGESTING, JobStatus.ANALYZING, JobStatus.GENERATING)


class ArtifactStatus(enum.StrEnum):
    """``pending → done | failed``; each format on its own."""

    PENDING = "pending"
    DONE = "done"
    FAILED = "failed"


@final
@attrs.frozen(kw_only=True)
class ArtifactInfo:
    """One format of a job."""

    format: str
    status: ArtifactStatus
    content: str | None
    file_path: str | None
    error: str | None


@final
@attrs.frozen(kw_only=True)
class JobInfo:
    """One job row; ``source_url`` is the full URL, for the worker only: show its redaction."""

    uid: int
    owner: str
    source_type: str
    source_url: str
    formats: tuple[str, ...]
    status: JobStatus
    message: str | None
    created_at: datetime
    updated_at: datetime
    attempt: int


@final
@attrs.frozen(kw_only=True)
class Claim:
    """A job one worker holds: every write it makes is guarded by ``worker`` and ``attempt``."""

    uid: int
    attempt: int
    worker: str
    owner: str
    source_type: str
    source_url: str
    formats: tuple[str, ...]

"""Where a run stands: the status the store keeps and a :class:`RunOutcome` reports.

Its own module so that an outcome carries it without loading the store (SQLAlchemy).
"""

from __future__ import annotations

import enum

__all__ = ["RunStatus"]


class RunStatus(enum.StrEnum):
    """Where a run stands. ``interrupted`` is never stored: it is a running run gone silent."""

    RUNNING = "running"
    COMPLETED = "completed"
    AWAITING_APPROVAL = "awaiting_approval"
    FAILED = "failed"
    # Stopped by its host (``Host.cancel``, or its async task cancelled).
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def is_finished(self) -> bool:
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)

"""Privacy levels for what the audit persists."""

from __future__ import annotations

import enum

__all__ = ["PrivacyLevel"]


class PrivacyLevel(enum.StrEnum):
    """How much of a run step the audit keeps: shape only, masked, or verbatim."""

    NONE = "none"
    METADATA = "metadata"
    REDACTED = "redacted"
    FULL = "full"

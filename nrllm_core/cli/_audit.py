"""The audit commands."""

from __future__ import annotations

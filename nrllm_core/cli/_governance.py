"""The governance commands."""

from __future__ import annotations

"""The library's logger, created on first use so ``import nrllm_core`` does not load structlog."""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["logger"]


@functools.cache
def logger() -> Any:
    """``structlog.get_logger("nrllm")``; the host configures structlog, never this library."""
    import structlog

    return structlog.get_logger("nrllm")

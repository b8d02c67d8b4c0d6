"""nrllm's logger: where core and plugins send their events; structlog loads on first use."""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["logger", "use_logger"]

_chosen: list[Any] = []


def logger() -> Any:
    """The logger nrllm writes its events to.

    ``structlog.get_logger("nrllm")``, which follows the host's structlog configuration, unless
    a host application chose another with :func:`use_logger`. The library never configures
    structlog.
    """
    return _chosen[0] if _chosen else _structlog_logger()


def use_logger(chosen: Any | None) -> None:
    """Send nrllm's events to ``chosen`` (a structlog logger) without touching structlog's
    global configuration; ``None`` goes back to ``structlog.get_logger("nrllm")``."""
    _chosen[:] = [] if chosen is None else [chosen]


@functools.cache
def _structlog_logger() -> Any:
    import structlog

    return structlog.get_logger("nrllm")

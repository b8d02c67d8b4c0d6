"""Logging for the hosts in this package (the `nrllm` command, the demo); the library never does."""

from __future__ import annotations

import logging
import os
import sys


def configure_for_cli() -> None:
    """Warnings and errors to stderr, so stdout carries only the command's output.

    ``NRLLM_LOG_LEVEL`` (for example ``info``) shows more.
    """
    import structlog

    if structlog.is_configured():
        return
    level = logging.getLevelNamesMapping().get(
        os.environ.get("NRLLM_LOG_LEVEL", "warning").upper(), logging.WARNING
    )
    structlog.configure(  # noqa: TID251 - the CLI is the host application here
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )

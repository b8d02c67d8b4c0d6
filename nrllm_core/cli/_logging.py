"""Logging for the ``nrllm`` command, which is a host: the library itself never configures it."""

from __future__ import annotations

import sys


def configure_for_cli() -> None:
    """Send log lines to stderr so that stdout carries only the command's output."""
    import structlog

    if structlog.is_configured():
        return
    structlog.configure(  # noqa: TID251 - the CLI is the host application here
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            structlog.dev.ConsoleRenderer(colors=False),
        ],
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
    )

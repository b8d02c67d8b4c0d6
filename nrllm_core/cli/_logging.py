"""Where the `nrllm` command and the demo send nrllm's log events: stderr, warnings and up."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, MutableMapping
from typing import Any

from nrllm_core.cli._terminal import printable
from nrllm_core.log import use_logger


def _reported_by_the_command(_: object, __: str, event: MutableMapping[str, Any]) -> Any:
    """A plugin that failed to load is reported by the command, once, in one line; its
    traceback is for ``nrllm plugins``, not for every command's stderr."""
    if event.get("event") == "nrllm.plugin.load_failed":
        import structlog

        raise structlog.DropEvent
    return event


def configure_for_cli() -> None:
    """Warnings and errors to stderr, so stdout carries only the command's output.

    ``NRLLM_LOG_LEVEL`` (for example ``info``) shows more. structlog's global configuration is
    left as it is: only nrllm's own logger is wrapped.
    """
    import structlog

    level = logging.getLevelNamesMapping().get(
        os.environ.get("NRLLM_LOG_LEVEL", "warning").upper(), logging.WARNING
    )
    use_logger(
        structlog.wrap_logger(
            structlog.PrintLogger(sys.stderr),
            processors=[
                _reported_by_the_command,
                structlog.processors.add_log_level,
                structlog.processors.TimeStamper(fmt="iso"),
                _printable(
                    # Plain tracebacks: a rich one would print local variables, keys among them.
                    structlog.dev.ConsoleRenderer(
                        colors=False, exception_formatter=structlog.dev.plain_traceback
                    )
                ),
            ],
            wrapper_class=structlog.make_filtering_bound_logger(level),
        )
    )


def _printable(render: Callable[..., str]) -> Callable[..., str]:
    """``render``'s line made inert for the terminal: a logged value can be a plugin's or a
    tool's text. Multi-line, for the traceback that can follow an event."""

    def rendered(logger: Any, method: str, event: Any) -> str:
        return printable(render(logger, method, event), multiline=True)

    return rendered

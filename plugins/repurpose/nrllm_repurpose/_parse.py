"""Parsing a fetched body in a child process bounded in CPU time, address space and text.

A parser is the code the source controls most: an 11 KB PDF whose pages share one 6.9 MB
content stream kept pypdf busy for 82 s. So the worker never parses in its own process.
:func:`parse` starts a fresh interpreter on :mod:`nrllm_repurpose._parse_child`, which sets
its limits before it reads a byte. A fresh interpreter, not a fork: the worker has threads
(the heartbeat, ``--concurrency``) and open database connections, and a forked child would
inherit their locks and sockets in whatever state they were; ``subprocess`` execs at once and
passes only the standard streams (``close_fds``), and no ``preexec_fn`` runs between fork
and exec. The child gets no environment but the worker's import path, so none of the
worker's keys or passwords.
"""

from __future__ import annotations

import enum
import os
import signal
import subprocess
import sys
from typing import Final, final

import attrs

from nrllm_core.log import logger
from nrllm_repurpose import _parse_child
from nrllm_repurpose._parse_child import MAX_TEXT_BYTES, Outcome

__all__ = ["ParseFailed", "ParseLimits", "Stop", "parse"]


@final
@attrs.frozen(kw_only=True)
class ParseLimits:
    """The bounds of one parse: ``[repurpose] parse_cpu_seconds`` and ``parse_memory_mib``."""

    cpu_seconds: int = 20
    memory_mib: int = 512

    @property
    def wall_seconds(self) -> int:
        """A child blocked rather than busy spends no CPU time: this ends it too."""
        return 2 * self.cpu_seconds + 10


class Stop(enum.Enum):
    """Why a parse gave no text."""

    UNREADABLE = "unreadable"
    TOO_MANY_PAGES = "too_many_pages"
    CPU_LIMIT = "cpu_limit"
    MEMORY_LIMIT = "memory_limit"
    TEXT_LIMIT = "text_limit"
    TIME_LIMIT = "time_limit"


_REPORTED: Final[dict[int, Stop]] = {
    Outcome.UNREADABLE: Stop.UNREADABLE,
    Outcome.TOO_MANY_PAGES: Stop.TOO_MANY_PAGES,
    Outcome.TEXT_LIMIT: Stop.TEXT_LIMIT,
    Outcome.MEMORY_LIMIT: Stop.MEMORY_LIMIT,
}


class ParseFailed(Exception):
    """The parse gave no text; :attr:`stop` says why."""

    def __init__(self, stop: Stop) -> None:
        super().__init__(stop.value)
        self.stop = stop


def parse(kind: str, body: bytes, limits: ParseLimits) -> str:
    """The text of ``body`` read as ``kind`` (``url`` or ``pdf_url``), stripped; may be empty."""
    command = [
        sys.executable,
        "-P",  # no script folder on the child's path: nothing there can shadow a module
        _parse_child.__file__,
        kind,
        str(limits.cpu_seconds),
        str(limits.memory_mib),
    ]
    path = os.pathsep.join(entry for entry in sys.path if entry)
    try:
        done = subprocess.run(
            command,
            input=body,
            capture_output=True,
            timeout=limits.wall_seconds,
            env={"PYTHONPATH": path},
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ParseFailed(Stop.TIME_LIMIT) from None
    except OSError as exc:
        logger().error("nrllm.repurpose.parser_not_started", kind=kind, error=type(exc).__name__)
        raise ParseFailed(Stop.UNREADABLE) from None
    if done.returncode == Outcome.TEXT:
        if len(done.stdout) > MAX_TEXT_BYTES:
            raise ParseFailed(Stop.TEXT_LIMIT)
        return done.stdout.decode("utf-8", "replace")
    if done.returncode == -signal.SIGXCPU:
        raise ParseFailed(Stop.CPU_LIMIT)
    stop = _REPORTED.get(done.returncode)
    # The child writes an exception's type name there, nothing else of its own.
    error = done.stderr[-64:].decode("ascii", "replace")
    logger().warning(
        "nrllm.repurpose.parse_failed",
        kind=kind,
        status=done.returncode,
        error=error if error.isidentifier() else None,
    )
    raise ParseFailed(stop or Stop.UNREADABLE)

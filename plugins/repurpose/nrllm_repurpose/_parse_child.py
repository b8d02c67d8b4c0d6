"""The parser's own process: a fetched page's or PDF's text, under limits it sets first.

Run as a script by :mod:`nrllm_repurpose._parse` (``python -P _parse_child.py KIND CPU MIB``),
never imported by the worker's code paths but for its constants. It imports the standard
library only until it parses, so the limits cover as little start-up as possible and the
package (and with it nrllm_core) is never loaded in the child.

The body comes on stdin; the text goes to stdout as UTF-8; the exit status is an
:class:`Outcome`. Running out of CPU time is not an exit status: the kernel ends the process
with SIGXCPU.
"""

from __future__ import annotations

import enum
import io
import sys
from collections.abc import Callable, Sequence
from typing import Final

__all__ = ["MAX_PDF_PAGES", "MAX_TEXT_BYTES", "Outcome", "main"]

_MIB: Final = 1024 * 1024
MAX_PDF_PAGES: Final = 200
MAX_TEXT_BYTES: Final = 2 * _MIB


class Outcome(enum.IntEnum):
    """The child's exit status."""

    TEXT = 0
    # Not parsable: damaged, encrypted, or the parser raised.
    UNREADABLE = 10
    TOO_MANY_PAGES = 11
    TEXT_LIMIT = 12
    MEMORY_LIMIT = 13


class _Stopped(Exception):
    def __init__(self, outcome: Outcome) -> None:
        super().__init__(outcome.name)
        self.outcome = outcome


def main(argv: Sequence[str]) -> int:
    """Limit this process, parse stdin as ``argv[0]`` (``url`` or ``pdf_url``), print the text."""
    kind, cpu_seconds, memory_mib = argv[0], int(argv[1]), int(argv[2])
    _limit_self(cpu_seconds, memory_mib * _MIB)
    try:
        text = _PARSERS[kind](sys.stdin.buffer.read())
        data = text.encode("utf-8", "replace")
        if len(data) > MAX_TEXT_BYTES:
            return Outcome.TEXT_LIMIT
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except MemoryError:
        return Outcome.MEMORY_LIMIT
    except _Stopped as stopped:
        return stopped.outcome
    except Exception as exc:
        # The type only: a parser's message can quote the document.
        sys.stderr.write(type(exc).__name__)
        return Outcome.UNREADABLE
    return Outcome.TEXT


def _limit_self(cpu_seconds: int, address_space: int) -> None:
    """Set this process's limits, each never above a hard limit it already has."""
    # Imported here: the worker imports this module for its constants, on any system.
    import resource

    limits = {
        resource.RLIMIT_CORE: (0, 0),  # SIGXCPU would otherwise dump the parser's memory
        # The soft limit sends SIGXCPU, whose default action ends the process; the hard one,
        # a second later, is SIGKILL in case anything caught it.
        resource.RLIMIT_CPU: (cpu_seconds, cpu_seconds + 1),
        resource.RLIMIT_AS: (address_space, address_space),
    }
    for which, (soft, hard) in limits.items():
        _, current = resource.getrlimit(which)
        if current != resource.RLIM_INFINITY:
            soft, hard = min(soft, current), min(hard, current)
        resource.setrlimit(which, (soft, hard))


def _page(body: bytes) -> str:
    import trafilatura

    text = trafilatura.extract(body, include_comments=False, include_tables=True)
    return str(text or "").strip()


def _pdf(body: bytes) -> str:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(body))
    if reader.is_encrypted:
        raise _Stopped(Outcome.UNREADABLE)
    pages = reader.pages
    if len(pages) > MAX_PDF_PAGES:
        raise _Stopped(Outcome.TOO_MANY_PAGES)
    texts: list[str] = []
    size = 0
    for page in pages:
        text = page.extract_text() or ""
        # Characters, checked page by page: never more than the bytes, so stopping here is
        # never early, and a long document stops at the limit rather than at its end.
        size += len(text) + 2
        if size > MAX_TEXT_BYTES:
            raise _Stopped(Outcome.TEXT_LIMIT)
        texts.append(text)
    return "\n\n".join(texts).strip()


_PARSERS: Final[dict[str, Callable[[bytes], str]]] = {"url": _page, "pdf_url": _pdf}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

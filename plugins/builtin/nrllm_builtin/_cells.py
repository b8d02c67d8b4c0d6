"""The one cell formatter, and the one pass that builds the model's lines and the table from it."""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Final

from nrllm_core import ToolArtifact
from nrllm_core.redact import mask_secrets

__all__ = [
    "CELL_MAX_CHARS",
    "ELLIPSIS",
    "RecordTable",
    "fit_lines",
    "format_cell",
    "shows_whole",
]

CELL_MAX_CHARS: Final = 300
ELLIPSIS: Final = "…"
# ASCII whitespace only: the cell must stay on one line of the model's text.
_WHITESPACE: Final = re.compile(r"[ \t\n\r\f\v]+")
# Unicode line breaks would split a text line just as well as "\n".
_LINE_BREAKS: Final = re.compile(r"[\x1c-\x1e\x85\u2028\u2029]")


def format_cell(value: object) -> str:
    """A database value as one masked, single-line string of at most 300 characters plus ``…``.

    Masking runs before the cap, so a cap can never cut a secret into an unmaskable stub.
    """
    if isinstance(value, bytes | bytearray | memoryview):
        return f"(binary, {len(bytes(value))} bytes)"
    text = mask_secrets(_one_line(value))
    if len(text) > CELL_MAX_CHARS:
        return text[:CELL_MAX_CHARS] + ELLIPSIS
    return text


def fit_lines(
    header: str, lines: Sequence[str], rows: Sequence[list[str]], *, max_bytes: int
) -> tuple[list[str], list[list[str]]]:
    """The header and as many (line, row) pairs as fit in ``max_bytes`` of text, in order,
    plus a closing line when some did not: the rows kept are exactly the lines kept, so a
    table built from them never shows more than the text."""
    closing = "… {} more not shown (text limit)."
    budget = max_bytes - len(header.encode()) - len(closing.format(len(rows)).encode()) - 2
    kept_lines: list[str] = []
    kept_rows: list[list[str]] = []
    used = 0
    for line, row in zip(lines, rows, strict=True):
        used += len(line.encode()) + 1
        if used > budget:
            break
        kept_lines.append(line)
        kept_rows.append(row)
    text = [header, *kept_lines]
    if len(kept_rows) < len(rows):
        text.append(closing.format(len(rows) - len(kept_rows)))
    return text, kept_rows


def shows_whole(value: object) -> bool:
    """Whether :func:`format_cell` shows all of ``value``: nothing masked, capped or binary."""
    if isinstance(value, bytes | bytearray | memoryview):
        return False
    return format_cell(value) == _one_line(value)


def _one_line(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value.isoformat() if isinstance(value, datetime.date | datetime.time) else str(value)
    return _WHITESPACE.sub(" ", _LINE_BREAKS.sub(" ", text)).strip(" ")


class RecordTable:
    """Rows of one table, rendered once: each cell feeds both the text line and the artifact.

    The text is kept within ``max_bytes`` (UTF-8, lines joined by newlines): the first row
    that would not fit, and every row after it, is added to neither channel, so the artifact
    never holds a row the text lacks and the rows shown are never a gapped selection.
    """

    def __init__(
        self, table: str, columns: Sequence[str], id_column: str | None, *, max_bytes: int
    ) -> None:
        # Names pass through the formatter: a reflected name may hold a line break.
        self._table = format_cell(table)
        self._columns = [format_cell(c) for c in columns]
        self._id_index = None if id_column is None else list(columns).index(id_column)
        self._max_bytes = max_bytes
        self._bytes = 0
        self._full = False
        self._lines: list[str] = []
        self._rows: list[list[str]] = []

    def add(self, row: Sequence[object]) -> bool:
        """Add ``row`` if its lines fit within the byte budget; whether it was added."""
        if self._full:
            return False
        cells = [format_cell(value) for value in row]
        if self._id_index is None:
            lines = [f"- {self._table} row {len(self._rows) + 1}"]
        else:
            lines = [f"- {self._table}:{cells[self._id_index]}"]
        lines += [
            f"  {column}: {cell}"
            for index, (column, cell) in enumerate(zip(self._columns, cells, strict=True))
            if index != self._id_index
        ]
        # One newline per line: before it, or after the header the caller puts first.
        size = sum(len(line.encode()) + 1 for line in lines)
        if self._bytes + size > self._max_bytes:
            self._full = True
            return False
        self._bytes += size
        self._lines += lines
        self._rows.append(cells)
        return True

    @property
    def count(self) -> int:
        return len(self._rows)

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def artifact(self, label: str) -> ToolArtifact:
        return ToolArtifact.table(self._columns, self._rows, label=label)

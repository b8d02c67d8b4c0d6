"""The one cell formatter, and the one pass that builds the model's lines and the table from it."""

from __future__ import annotations

import datetime
import re
from collections.abc import Sequence
from typing import Final

from nrllm_core import ToolArtifact
from nrllm_core.redact import mask_secrets

__all__ = ["CELL_MAX_CHARS", "ELLIPSIS", "RecordTable", "format_cell"]

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
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"(binary, {len(bytes(value))} bytes)"
    text = value.isoformat() if isinstance(value, datetime.date | datetime.time) else str(value)
    text = _WHITESPACE.sub(" ", _LINE_BREAKS.sub(" ", text)).strip(" ")
    text = mask_secrets(text)
    if len(text) > CELL_MAX_CHARS:
        return text[:CELL_MAX_CHARS] + ELLIPSIS
    return text


class RecordTable:
    """Rows of one table, rendered once: each cell feeds both the text line and the artifact."""

    def __init__(self, table: str, columns: Sequence[str], id_column: str | None) -> None:
        # Plain ``str``: reflected names are a ``str`` subclass the JSON encoder refuses.
        self._table = str(table)
        self._columns = [str(c) for c in columns]
        self._id_column = None if id_column is None else str(id_column)
        self._lines: list[str] = []
        self._rows: list[list[str]] = []

    def add(self, row: Sequence[object]) -> None:
        cells = [format_cell(value) for value in row]
        if self._id_column is None:
            self._lines.append(f"- {self._table} row {len(self._rows) + 1}")
        else:
            self._lines.append(f"- {self._table}:{cells[self._columns.index(self._id_column)]}")
        for column, cell in zip(self._columns, cells, strict=True):
            if column != self._id_column:
                self._lines.append(f"  {column}: {cell}")
        self._rows.append(cells)

    @property
    def count(self) -> int:
        return len(self._rows)

    @property
    def lines(self) -> list[str]:
        return list(self._lines)

    def artifact(self, label: str) -> ToolArtifact:
        return ToolArtifact.table(self._columns, self._rows, label=label)

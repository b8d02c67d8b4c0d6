"""The tail of the host's log file, through the redactor: ``fetch_logs``."""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Any, Final

from nrllm_builtin._settings import settings_or_error
from nrllm_core import Integrity, Tool, ToolContext, ToolResult
from nrllm_core.redact import redact

__all__ = ["FetchLogs"]

DEFAULT_LINES: Final = 50
MAX_LINES: Final = 500
# How far back from the end the tail may read, whatever the line lengths.
MAX_TAIL_BYTES: Final = 1024 * 1024


class FetchLogs(Tool):
    name = "fetch_logs"
    description = (
        f"The last lines of the host's log file (default {DEFAULT_LINES}, max {MAX_LINES}), "
        "with credentials and e-mail addresses masked."
    )
    group = "system"
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {
                "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES, "default": 50}
            },
            "additionalProperties": False,
        }
    )
    # Log lines quote what anyone sent the host (paths, headers, user agents).
    integrity = Integrity.UNTRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        settings = settings_or_error(context, self.name)
        if isinstance(settings, ToolResult):
            return settings
        count = arguments.get("lines", DEFAULT_LINES)
        if not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_LINES:
            return ToolResult.text(f"lines: expected an integer from 1 to {MAX_LINES}.")
        if settings.log_file is None:
            return ToolResult.text("No log file is configured ([builtin] log_file).")
        try:
            tail = _tail(settings.log_file, count)
        except OSError:
            return ToolResult.text("The configured log file cannot be read.")
        if not tail:
            return ToolResult.text("The log file is empty.")
        lines = [redact(line) for line in tail]
        return ToolResult.text("\n".join([f"Last {len(lines)} log lines:", *lines]))


def _tail(path: os.PathLike[str], count: int) -> list[str]:
    with open(path, "rb") as handle:
        size = handle.seek(0, os.SEEK_END)
        start = max(0, size - MAX_TAIL_BYTES)
        handle.seek(start)
        data = handle.read(MAX_TAIL_BYTES)
    lines = data.decode("utf-8", errors="replace").splitlines()
    if start > 0 and lines:
        # The first line read is most likely cut: drop it rather than show half a line.
        lines = lines[1:]
    return lines[-count:]

"""A server's own log lines (``notifications/message``) as nrllm log events.

The text is the server's: it could carry terminal escapes, invisible characters that hide
what a log reader sees, a secret the server read, or a megabyte. It is cleaned as a tool's
description is, masked by core's redactor and bounded before it reaches a log.
"""

from __future__ import annotations

import json
from typing import Any, Final

from nrllm_core.log import logger
from nrllm_core.redact import mask_secrets
from nrllm_mcp._definition import clean_text

__all__ = ["SERVER_LOG_MAX_CHARS", "log_server_message"]

# What a log event keeps of the server's text.
SERVER_LOG_MAX_CHARS: Final = 500
# What is read of it at all: cleaning and masking a megabyte per line would cost the loop.
_READ_MAX_BYTES: Final = 16 * 1024
_LOGGER_NAME_MAX_BYTES: Final = 64
_LEVELS: Final = {
    "debug": "debug",
    "info": "info",
    "notice": "info",
    "warning": "warning",
}


def log_server_message(server: str, params: Any) -> None:
    """Log ``params`` (``LoggingMessageNotificationParams``) as ``nrllm.mcp.server_log``:
    debug, info (``notice`` too), warning, else error."""
    data = params.data
    raw = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, default=str)
    level = str(params.level)
    fields: dict[str, Any] = {
        "server": server,
        "level": level,
        "text": shown(raw),
    }
    if params.logger is not None:
        fields["logger"] = clean_text(str(params.logger), _LOGGER_NAME_MAX_BYTES)
    log = logger()
    method = getattr(log, _LEVELS.get(level, "error"))
    method("nrllm.mcp.server_log", **fields)


def shown(text: str) -> str:
    """``text`` cleaned, its secrets masked (after cleaning: an invisible character between
    two halves of a key must not hide it), and cut at ``SERVER_LOG_MAX_CHARS``."""
    masked = mask_secrets(clean_text(text, _READ_MAX_BYTES))
    if len(masked) <= SERVER_LOG_MAX_CHARS:
        return masked
    # Masked again after the cut, as core's ``redact`` does: a cut can make a secret's shape.
    return mask_secrets(masked[: SERVER_LOG_MAX_CHARS - 1]) + "…"

"""What a person who decides a call sees of it: its tool's preview, bounded."""

from __future__ import annotations

import re
from typing import Final

from nrllm_core._catalog import RegisteredTool
from nrllm_core._invoke import own_context
from nrllm_core._messages import ToolCall
from nrllm_core._tool import ToolContext
from nrllm_core.log import logger

__all__ = ["PREVIEW_FAILED", "PREVIEW_MAX_LINES", "PREVIEW_MAX_LINE_CHARS", "preview_lines"]

PREVIEW_MAX_LINES: Final = 20
PREVIEW_MAX_LINE_CHARS: Final = 500
_WHITESPACE: Final = re.compile(r"\s+")
PREVIEW_FAILED: Final = (
    "The preview for this call failed, so it shows nothing about what the call would do."
)


def preview_lines(
    registered: RegisteredTool | None, call: ToolCall, context: ToolContext
) -> tuple[tuple[str, ...], bool]:
    """The lines a person sees for ``call`` (bounded), and whether the tool's preview failed."""
    if registered is None:
        return (), False
    try:
        lines = registered.tool.preview(dict(call.arguments), own_context(context, registered))
    except Exception:
        logger().warning("nrllm.preview.failed", tool=call.name, exc_info=True)
        return (PREVIEW_FAILED,), True
    if lines is None:
        return (), False
    if not isinstance(lines, list) or not lines or not all(isinstance(x, str) for x in lines):
        return ("The tool produced no usable preview for this call.",), True
    # At most 20 lines in all: a longer preview keeps 19 and says how many it left out.
    kept = lines if len(lines) <= PREVIEW_MAX_LINES else lines[: PREVIEW_MAX_LINES - 1]
    shown = [_WHITESPACE.sub(" ", line).strip()[:PREVIEW_MAX_LINE_CHARS] for line in kept]
    if len(kept) < len(lines):
        shown.append(f"… and {len(lines) - len(kept)} more line(s), not shown.")
    return tuple(shown), False

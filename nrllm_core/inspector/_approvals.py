"""What the approvals inbox shows of a pending call's preview: an update as a diff.

The convention (documented in docs/how-to/inspector.md): a preview describes an update when
one of its lines is exactly ``Before:`` and a later one exactly ``After:``. The lines above
``Before:`` head it; the lines between are the record before, the lines after ``After:`` the
record after. ``update_record`` previews this way. Any other preview is plain lines.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, Final

from nrllm_core._preview import PREVIEW_MAX_LINES

__all__ = ["preview_diff"]

BEFORE: Final = "Before:"
AFTER: Final = "After:"
# The line _preview.preview_lines puts last when it cut a preview: what follows "After:" is
# then a part of the record, and a diff of a part would show lines as removed that are not.
_CUT_OPENING: Final = "… and "


def preview_diff(preview: Sequence[str]) -> dict[str, Any] | None:
    """The diff a preview describes, or ``None`` when it describes none (see the module).

    ``heading``: the lines above ``Before:``. ``lines``: each line of either record, as
    ``{"change": "same" | "removed" | "added", "text": ...}``, in the order a reader
    compares them: an unchanged line once, a changed one as its old line then its new one.
    """
    lines = list(preview)
    if BEFORE not in lines:
        return None
    start = lines.index(BEFORE)
    if AFTER not in lines[start + 1 :]:
        return None
    middle = lines.index(AFTER, start + 1)
    if len(lines) >= PREVIEW_MAX_LINES and lines[-1].startswith(_CUT_OPENING):
        return None
    before, after = lines[start + 1 : middle], lines[middle + 1 :]
    shown: list[dict[str, str]] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, a_from, a_to, b_from, b_to in matcher.get_opcodes():
        if tag == "equal":
            shown += [{"change": "same", "text": line} for line in before[a_from:a_to]]
            continue
        shown += [{"change": "removed", "text": line} for line in before[a_from:a_to]]
        shown += [{"change": "added", "text": line} for line in after[b_from:b_to]]
    return {"heading": lines[:start], "lines": shown}

"""A short, redacted, one-line excerpt of an error body a provider sent, for its error."""

from __future__ import annotations

import re
from typing import Final

__all__ = ["EXCERPT_MAX_CHARS", "SCAN_MAX_CHARS", "excerpt"]

EXCERPT_MAX_CHARS: Final = 300
# Only this much of an error body is ever read: redaction then sees whole keys, not the tail
# of one cut at the excerpt's edge.
SCAN_MAX_CHARS: Final = 4096
_SPACE: Final = re.compile(r"\s+")
_TRAILING_WORD: Final = re.compile(r"\S*$")
_JSON_ESCAPE: Final = re.compile(r"\\u([0-9a-fA-F]{4})|\\/")


def _unescaped(match: re.Match[str]) -> str:
    if match[1] is None:
        return "/"
    code = int(match[1], 16)
    # A control character or half a surrogate pair stays escaped: no key holds one, and it
    # would reach a terminal or the audit as it is.
    if code < 0x20 or 0x7F <= code <= 0x9F or 0xD800 <= code <= 0xDFFF:
        return match[0]
    return chr(code)


def excerpt(body: bytes, secrets: tuple[str, ...]) -> str:
    """A short, redacted, one-line excerpt of an error body."""
    from nrllm_core.redact import redact

    text = body[: SCAN_MAX_CHARS * 4].decode("utf-8", "replace")
    # A JSON body may echo a key escaped (``\\u0073k-…``, ``\\/``): read as written, so that
    # the key is masked below in any spelling JSON gives it.
    text = _JSON_ESCAPE.sub(_unescaped, text)
    if len(text) > SCAN_MAX_CHARS:
        # Whatever straddles the edge of the window is dropped whole, so no key is half-read.
        text = _TRAILING_WORD.sub("", text[:SCAN_MAX_CHARS])
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = redact(_SPACE.sub(" ", text).strip())
    if len(text) > EXCERPT_MAX_CHARS:
        text = text[:EXCERPT_MAX_CHARS] + "…"
    return text or "(empty body)"

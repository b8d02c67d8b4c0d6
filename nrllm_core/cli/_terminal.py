"""What a command prints, made inert for the terminal that shows it.

A terminal obeys the control characters it is sent: ESC starts sequences that move the cursor,
repaint the screen (an approval prompt could be redrawn to say something else), set the window
title or, in some terminals, write to the clipboard; BEL rings; a C1 control (U+0080 to U+009F,
U+009B being CSI) acts like an ESC sequence in some; a carriage return overwrites the start of
a line; the bidirectional overrides and isolates reorder what is shown. Text from a tool, a
model, a plugin, a database or a URL can hold any of them, so every command prints through
:func:`echo` or :func:`echo_json` and shows each such character as an escape (``\\x1b``,
``\\u202e``) instead of its effect.
"""

from __future__ import annotations

import re
from typing import Any, Final

import click

from nrllm_core._serde import to_json

__all__ = ["echo", "echo_json", "printable"]

# C0 controls, DEL, C1 controls, and the bidirectional overrides and isolates.
_SINGLE_LINE: Final = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# The same but newline and tab: they cannot reach outside the text, and multi-line text (a
# model's Markdown answer, a tool's listing) is unreadable with every line break escaped.
_MULTI_LINE: Final = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def printable(text: str, *, multiline: bool = False) -> str:
    """``text`` with every control, C1 and bidirectional-override character shown as an escape.

    Single-line text (a name, a status, a message on one line) escapes newline and tab too, so
    no value can start a line of its own that looks like the command's output. With
    ``multiline`` newline and tab stay."""
    return (_MULTI_LINE if multiline else _SINGLE_LINE).sub(_escape, text)


def echo(text: str, *, multiline: bool = False, err: bool = False) -> None:
    """Print one line (or, with ``multiline``, a block of lines) through :func:`printable`."""
    click.echo(printable(text, multiline=multiline), err=err)


def echo_json(data: Any, *, err: bool = False) -> None:
    """Print ``data`` as canonical JSON, every control character escaped the JSON way.

    The encoder escapes C0 controls already; DEL, the C1 controls and the bidirectional
    characters it leaves as they are. They can only stand inside a string, so ``\\uXXXX``
    keeps the JSON valid and its value unchanged."""
    click.echo(_SINGLE_LINE.sub(_json_escape, to_json(data)), err=err)

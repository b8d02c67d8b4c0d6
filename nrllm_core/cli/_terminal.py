"""What a command prints, made inert for the terminal that shows it.

A terminal obeys the control characters it is sent: ESC starts sequences that move the cursor,
repaint the screen (an approval prompt could be redrawn to say something else), set the window
title or, in some terminals, write to the clipboard; BEL rings; a C1 control (U+0080 to U+009F,
U+009B being CSI) acts like an ESC sequence in some; a carriage return overwrites the start of
a line; the bidirectional overrides and isolates reorder what is shown. Text from a tool, a
model, a plugin, a database or a URL can hold any of them, so every command prints through
:func:`echo` or :func:`echo_json` and shows each such character as an escape (``\\x1b``,
``\\u202e``) instead of its effect. The errors a command reports are shown the same way by
:class:`PrintableGroup`, the ``nrllm`` group's class: a message can quote a file name, a
configuration value, an argument or a server's answer.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Iterator
from typing import Any, Final

import click

from nrllm_core._serde import to_json

__all__ = ["PrintableGroup", "echo", "echo_json", "printable", "status_line"]

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


def status_line(text: str | None) -> None:
    """Redraw the one line of standard error that shows what is going on (a terminal's only),
    ``text`` through :func:`printable`; ``None`` clears it.

    The line is cut to the terminal's width: a line that wraps cannot be redrawn in place.
    The carriage return and the erase-line sequence are the command's own, never the text's.
    """
    import shutil

    width = max(shutil.get_terminal_size().columns - 1, 1)
    shown = "" if text is None else printable(text)[:width]
    # color: click drops ANSI sequences it sees going elsewhere than a terminal (a test).
    click.echo(f"\r\x1b[K{shown}", nl=False, err=True, color=True)


def echo_json(data: Any, *, err: bool = False) -> None:
    """Print ``data`` as canonical JSON, every control character escaped the JSON way.

    The encoder escapes C0 controls already; DEL, the C1 controls and the bidirectional
    characters it leaves as they are. They can only stand inside a string, so ``\\uXXXX``
    keeps the JSON valid and its value unchanged."""
    click.echo(_SINGLE_LINE.sub(_json_escape, to_json(data)), err=err)


class PrintableGroup(click.Group):
    """A command group whose errors, its own and its commands', are shown through
    :func:`printable`, with the exit status click gives them.

    click prints a :class:`click.ClickException` as it is, and the message of one can quote
    anything: a file name, a configuration value, an argument, what a server answered. The
    root group parses its own options in :meth:`make_context` and resolves, parses and runs
    every subcommand in :meth:`invoke`, so it is the one place that sees every error: click's
    own (an unknown option) as well as a command's or a plugin's. The error is shown there and
    click is left only the exit status: a caller that runs the group with
    ``standalone_mode=False`` gets that status back, not the exception.
    """

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        with _errors_shown():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        with _errors_shown():
            return super().invoke(ctx)


class _Report(io.StringIO):
    """What click prints for an error, collected to be shown through :func:`printable`.

    It passes for a terminal: off one click strips the ANSI sequences it knows of (and leaves
    the rest), and every escape is to be shown, not some dropped."""

    def isatty(self) -> bool:
        return True


@contextlib.contextmanager
def _errors_shown() -> Iterator[None]:
    try:
        yield
    except click.ClickException as error:
        report = _Report()
        error.show(report)
        # Multi-line: a usage error's report is the usage, the hint and the message.
        echo(report.getvalue().rstrip("\n"), multiline=True, err=True)
        raise click.exceptions.Exit(error.exit_code) from error

"""A running tool's question to the person at the terminal (``ToolContext.ask_person``).

The question and its field names are text a tool's server wrote: shown through
:func:`~nrllm_core.cli._terminal.echo`, on standard error (standard output stays the command's
result), and never answered without the person saying so.
"""

from __future__ import annotations

from typing import Any

import click

from nrllm_core._ask_values import PersonAnswer, Question, flat_fields
from nrllm_core.cli._terminal import echo, printable

__all__ = ["ask_on_terminal"]


def ask_on_terminal(question: Question) -> PersonAnswer:
    """Show ``question``, ask whether to answer it, then ask for each field of its schema (a
    flat object of strings, numbers, integers, booleans and enumerations, as MCP allows);
    a schema of another shape is declined."""
    fields = flat_fields(question.schema)
    echo(f"tool {question.tool} asks:", err=True)
    echo(question.message, multiline=True, err=True)
    if fields is None:
        echo("(it asks for an answer this terminal cannot give: declined)", err=True)
        return PersonAnswer.declined()
    if not click.confirm("Answer it?", default=False, err=True):
        return PersonAnswer.declined()
    content: dict[str, Any] = {}
    for name, field in fields.items():
        label = printable(name)
        kind = field.get("type")
        choices = field.get("enum")
        if isinstance(choices, list) and all(isinstance(c, str) for c in choices):
            # Shown as the terminal can print them; answered with the choice itself.
            shown = {printable(c): c for c in choices}
            picked = click.prompt(label, type=click.Choice(list(shown)), err=True)
            content[name] = shown[picked]
        elif kind == "boolean":
            content[name] = click.confirm(label, default=False, err=True)
        elif kind == "integer":
            content[name] = click.prompt(label, type=int, err=True)
        elif kind == "number":
            content[name] = click.prompt(label, type=float, err=True)
        else:
            content[name] = click.prompt(label, type=str, err=True)
    return PersonAnswer.accepted(content)

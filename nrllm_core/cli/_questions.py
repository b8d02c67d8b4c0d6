"""A running tool's question to the person at the terminal (``ToolContext.ask_person``).

The question and its field names are text a tool's server wrote: shown through
:func:`~nrllm_core.cli._terminal.echo`, on standard error (standard output stays the command's
result), and never answered without the person saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import click

from nrllm_core._ask_values import PersonAnswer, Question
from nrllm_core.cli._terminal import echo, printable

__all__ = ["ask_on_terminal"]

# The most fields one question may ask for: a schema is the server's, a terminal is a person's.
_MAX_FIELDS: Final = 20


def ask_on_terminal(question: Question) -> PersonAnswer:
    """Show ``question``, ask whether to answer it, then ask for each field of its schema (a
    flat object of strings, numbers, integers, booleans and enumerations, as MCP allows);
    a schema of another shape is declined."""
    fields = _fields(question.schema)
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
            content[name] = click.prompt(
                label, type=click.Choice([printable(c) for c in choices]), err=True
            )
        elif kind == "boolean":
            content[name] = click.confirm(label, default=False, err=True)
        elif kind == "integer":
            content[name] = click.prompt(label, type=int, err=True)
        elif kind == "number":
            content[name] = click.prompt(label, type=float, err=True)
        else:
            content[name] = click.prompt(label, type=str, err=True)
    return PersonAnswer.accepted(content)


def _fields(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]] | None:
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping) or len(properties) > _MAX_FIELDS:
        return None
    fields: dict[str, Mapping[str, Any]] = {}
    for name, field in properties.items():
        if not isinstance(name, str) or not isinstance(field, Mapping):
            return None
        if field.get("type") not in ("string", "number", "integer", "boolean"):
            return None
        fields[name] = field
    return fields

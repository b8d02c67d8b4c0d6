"""Hostile table names, column names and values, checked against the reflected schema.

A name reaches SQL only after it was found among the reflected ones, and a value only as a
bound parameter of the column's own type.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

from nrllm_builtin._cells import format_cell
from nrllm_builtin._database import connect, reflect_table, table_names
from nrllm_builtin._policy import TablePolicy
from nrllm_builtin._settings import settings_or_error
from nrllm_core import ToolContext, ToolResult
from nrllm_core.log import logger

if TYPE_CHECKING:
    from sqlalchemy import Column, Connection, Table

__all__ = [
    "Refusal",
    "bounded_int",
    "check_columns",
    "check_values",
    "coerce_value",
    "id_column",
    "listing",
    "readable_columns",
    "records_call",
    "resolve_table",
]

_INTEGER: Final = re.compile(r"-?[0-9]{1,18}")
_NUMBER: Final = re.compile(r"-?[0-9]{1,30}(?:\.[0-9]{1,30})?")


class Refusal(Exception):
    """A request the tool turns down; the message is safe to show the model."""


def listing(names: list[str]) -> str:
    """Names for the model's text, each through the cell formatter: one line, masked."""
    return ", ".join(format_cell(name) for name in names) if names else "none"


def resolve_table(
    connection: Connection, policy: TablePolicy, name: object, *, write: bool = False
) -> Table:
    """The reflected table called ``name`` if the policy lets this call use it."""
    names = table_names(connection)
    if write:
        allowed = policy.writable_tables(names)
        if not isinstance(name, str) or name not in allowed:
            raise Refusal(
                "Table not found or not open for writing. Writable tables: "
                f"{listing(allowed)} (the host lists them in [builtin] write_tables)."
            )
    else:
        allowed = policy.readable_tables(names)
        if not isinstance(name, str) or name not in allowed:
            raise Refusal(f"Table not found or not readable. Readable tables: {listing(allowed)}.")
    return reflect_table(connection, name)


def readable_columns(policy: TablePolicy, table: Table) -> list[str]:
    # Plain ``str``: reflected names are a ``str`` subclass the JSON encoder refuses.
    return [str(c.name) for c in table.columns if policy.can_read_column(table.name, c.name)]


def id_column(policy: TablePolicy, table: Table) -> str | None:
    """The single primary-key column if it is readable; a composite key has no one id."""
    keys = list(table.primary_key.columns)
    if len(keys) == 1 and policy.can_read_column(table.name, keys[0].name):
        return str(keys[0].name)
    return None


def check_columns(
    policy: TablePolicy, table: Table, names: object, argument: str, *, max_items: int
) -> list[str]:
    """``names`` as readable columns of ``table``, in order without repeats."""
    readable = readable_columns(policy, table)
    if not isinstance(names, list | tuple) or len(names) > max_items:
        raise Refusal(f"{argument}: expected a list of at most {max_items} column names.")
    unknown = [n for n in names if not isinstance(n, str) or n not in readable]
    if unknown:
        shown = ", ".join(repr(n)[:66] for n in unknown[:5])
        raise Refusal(
            f"{argument}: unknown or unreadable column(s) {shown} in table "
            f"{format_cell(table.name)}. "
            f"Readable columns: {listing(readable)}."
        )
    return list(dict.fromkeys(str(n) for n in names))


def _python_type(column: Column[Any]) -> type | None:
    try:
        kind: type = column.type.python_type
    except NotImplementedError:
        return None
    return kind


def coerce_value(column: Column[Any], value: object, argument: str) -> object:
    """``value`` as the column's Python type, or a refusal saying what the column takes."""
    if value is None:
        return None
    if not isinstance(value, str | int | float | bool):
        raise Refusal(f"{argument}: the value for {column.name} must be a string, number or bool.")
    kind = _python_type(column)
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise Refusal(f"{argument}: the value for {column.name} must be true or false.")
    if kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
            return int(value.strip())
        raise Refusal(f"{argument}: the value for {column.name} must be an integer.")
    if kind in (float, decimal.Decimal):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            return decimal.Decimal(value.strip()) if kind is decimal.Decimal else float(value)
        raise Refusal(f"{argument}: the value for {column.name} must be a number.")
    if kind is str:
        if isinstance(value, bool):
            raise Refusal(f"{argument}: the value for {column.name} must be a string.")
        return str(value)
    # Dates and other types: a string, which the database itself parses as a bound value.
    if isinstance(value, str):
        return value
    raise Refusal(f"{argument}: the value for {column.name} must be a string.")


def check_values(
    policy: TablePolicy, table: Table, values: object, argument: str, *, max_items: int
) -> dict[str, object]:
    """``values`` keyed by readable columns, each coerced to its column's type."""
    if not isinstance(values, Mapping) or len(values) > max_items:
        raise Refusal(f"{argument}: expected an object of at most {max_items} column: value pairs.")
    columns = check_columns(policy, table, list(values), argument, max_items=max_items)
    return {name: coerce_value(table.c[name], values[name], argument) for name in columns}


def records_call(
    tool: str,
    context: ToolContext,
    run: Callable[[Connection, TablePolicy], ToolResult],
    *,
    writes: bool = False,
) -> ToolResult:
    """Run ``run`` on one connection with the call's settings and policy.

    A refusal is ordinary text for a reading tool and an error for a writing one.
    """
    from sqlalchemy.exc import SQLAlchemyError

    settings = settings_or_error(context, tool)
    if isinstance(settings, ToolResult):
        return settings
    try:
        with connect(settings, write=writes) as connection:
            return run(connection, TablePolicy.from_settings(settings))
    except Refusal as refusal:
        return ToolResult.error(f"Error: {refusal}") if writes else ToolResult.text(str(refusal))
    except SQLAlchemyError:
        # Driver messages can hold the URL's password or row data: the log only.
        logger().error("nrllm.builtin.database_failed", tool=tool, exc_info=True)
        return ToolResult.error(
            "Error: the records database failed; the host's log has the details."
        )


def bounded_int(arguments: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    """An integer argument within ``[low, high]``; anything else is refused, never clamped."""
    value = arguments.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise Refusal(f"{key}: expected an integer from {low} to {high}.")
    return value

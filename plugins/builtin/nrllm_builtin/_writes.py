"""Writing the host's records on write-listed tables: create_record_draft, update_record."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from nrllm_builtin._access import (
    Refusal,
    check_values,
    coerce_value,
    id_column,
    readable_columns,
    records_call,
    resolve_table,
)
from nrllm_builtin._cells import format_cell
from nrllm_builtin._database import connect
from nrllm_builtin._policy import TablePolicy
from nrllm_builtin._settings import settings_or_error
from nrllm_core import Effect, Integrity, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from sqlalchemy import Connection, Table

__all__ = ["CreateRecordDraft", "UpdateRecord"]

MAX_VALUES: Final = 50
_NAME: Final = {"type": "string", "minLength": 1, "maxLength": 128}
_VALUES: Final = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": MAX_VALUES,
    "additionalProperties": {"type": ["string", "number", "integer", "boolean", "null"]},
}


def _writable(connection: Connection, policy: TablePolicy, name: object) -> tuple[Table, str]:
    table = resolve_table(connection, policy, name, write=True)
    key = id_column(policy, table)
    if key is None:
        raise Refusal(f"Table {table.name} has no single readable primary key to name a record by.")
    return table, key


def _new_values(
    policy: TablePolicy, table: Table, key: str, arguments: dict[str, Any]
) -> dict[str, object]:
    values = check_values(policy, table, arguments.get("values"), "values", max_items=MAX_VALUES)
    if not values:
        raise Refusal("values: name at least one column to write.")
    if key in values:
        raise Refusal(f"values: the primary key {key} is not written by this tool.")
    return values


def _preview(
    tool: str, context: ToolContext, build: Callable[[Connection, TablePolicy], list[str]]
) -> list[str]:
    from sqlalchemy.exc import SQLAlchemyError

    settings = settings_or_error(context, tool)
    if isinstance(settings, ToolResult):
        return [settings.content]
    try:
        with connect(settings) as connection:
            return build(connection, TablePolicy.from_settings(settings))
    except Refusal as refusal:
        return [f"Refused: {refusal}"]
    except SQLAlchemyError:
        return ["The records database could not be read for a preview."]


class CreateRecordDraft(Tool):
    name = "create_record_draft"
    description = (
        "Insert one new record into a table the host opened for writing. Give the column "
        "values; the database assigns the id. A person approves the insert first."
    )
    group = "editing"
    effect = Effect.NON_IDEMPOTENT_WRITE
    requires_approval = True
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {"table": _NAME, "values": _VALUES},
            "required": ["table", "values"],
            "additionalProperties": False,
        }
    )
    # Its answer is its own confirmation, not the record's text.
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return records_call(
            self.name, context, lambda conn, policy: _create(conn, policy, arguments), writes=True
        )

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        def build(connection: Connection, policy: TablePolicy) -> list[str]:
            table, key = _writable(connection, policy, arguments.get("table"))
            values = _new_values(policy, table, key, arguments)
            lines = [f"Insert a new record into {table.name}:"]
            return lines + [f"  {name}: {format_cell(value)}" for name, value in values.items()]

        return _preview(self.name, context, build)


def _create(connection: Connection, policy: TablePolicy, arguments: dict[str, Any]) -> ToolResult:
    table, key = _writable(connection, policy, arguments.get("table"))
    values = _new_values(policy, table, key, arguments)
    result = connection.execute(table.insert().values(values))
    inserted = result.inserted_primary_key
    if inserted is None:
        raise Refusal(f"The database did not report the new record's id in {table.name}.")
    new_id = format_cell(inserted[0])
    return ToolResult.text(f"Created {table.name}:{new_id} with {', '.join(values)}.")


class UpdateRecord(Tool):
    name = "update_record"
    description = (
        "Set column values of one record, named by its id, in a table the host opened for "
        "writing. A person approves the change first, seeing the row before and after."
    )
    group = "editing"
    effect = Effect.IDEMPOTENT_WRITE
    requires_approval = True
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {
                "table": _NAME,
                "id": {"type": ["integer", "string"], "maxLength": 128},
                "values": _VALUES,
            },
            "required": ["table", "id", "values"],
            "additionalProperties": False,
        }
    )
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return records_call(
            self.name, context, lambda conn, policy: _update(conn, policy, arguments), writes=True
        )

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        def build(connection: Connection, policy: TablePolicy) -> list[str]:
            table, key, record_id, values = _update_request(connection, policy, arguments)
            before = _current_row(connection, policy, table, key, record_id)
            after = {**before, **values}
            lines = [f"Update {table.name}:{format_cell(record_id)}", "Before:"]
            lines += [f"  {name}: {format_cell(value)}" for name, value in before.items()]
            lines.append("After:")
            return lines + [f"  {name}: {format_cell(value)}" for name, value in after.items()]

        return _preview(self.name, context, build)


def _update_request(
    connection: Connection, policy: TablePolicy, arguments: dict[str, Any]
) -> tuple[Table, str, object, dict[str, object]]:
    table, key = _writable(connection, policy, arguments.get("table"))
    record_id = coerce_value(table.c[key], arguments.get("id"), "id")
    if record_id is None:
        raise Refusal("id: name the record to update.")
    return table, key, record_id, _new_values(policy, table, key, arguments)


def _current_row(
    connection: Connection, policy: TablePolicy, table: Table, key: str, record_id: object
) -> dict[str, object]:
    from sqlalchemy import select

    columns = readable_columns(policy, table)
    query = select(*(table.c[name] for name in columns)).where(table.c[key] == record_id)
    row = connection.execute(query).first()
    if row is None:
        raise Refusal(f"No record {table.name}:{format_cell(record_id)}.")
    return dict(zip(columns, row, strict=True))


def _update(connection: Connection, policy: TablePolicy, arguments: dict[str, Any]) -> ToolResult:
    table, key, record_id, values = _update_request(connection, policy, arguments)
    result = connection.execute(table.update().where(table.c[key] == record_id).values(values))
    if result.rowcount == 0:
        raise Refusal(f"No record {table.name}:{format_cell(record_id)}.")
    return ToolResult.text(
        f"Updated {table.name}:{format_cell(record_id)}: set {', '.join(values)}."
    )

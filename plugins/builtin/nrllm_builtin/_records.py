"""Reading the host's records: read_records, search_records, list_tables, get_table_schema."""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from nrllm_builtin._access import (
    Refusal,
    bounded_int,
    check_columns,
    check_values,
    id_column,
    listing,
    readable_columns,
    records_call,
    resolve_table,
)
from nrllm_builtin._cells import RecordTable, fit_lines, format_cell, shows_whole
from nrllm_builtin._database import reflect_table, table_names
from nrllm_builtin._policy import TablePolicy
from nrllm_core import CONTENT_MAX_BYTES, Integrity, Tool, ToolArtifact, ToolContext, ToolResult

if TYPE_CHECKING:
    from sqlalchemy import Column, Connection, Table

__all__ = ["GetTableSchema", "ListTables", "ReadRecords", "SearchRecords"]

DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 50
MAX_OFFSET: Final = 10_000
MAX_FILTERS: Final = 5
MAX_COLUMNS: Final = 50
MAX_SEARCH_HITS: Final = 50
MAX_TERM_CHARS: Final = 200
_NAME: Final = {"type": "string", "minLength": 1, "maxLength": 128}
_SCALAR: Final = {"type": ["string", "number", "integer", "boolean", "null"]}


class ReadRecords(Tool):
    name = "read_records"
    description = (
        "Read records of one table with equality filters (no SQL). Returns the id column and "
        "every readable column, or the columns you list. Credential-like columns and tables "
        "are never returned; values are masked and capped at 300 characters."
    )
    group = "content"
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {
                "table": _NAME,
                "columns": {"type": "array", "items": _NAME, "maxItems": MAX_COLUMNS},
                "where_equals": {
                    "type": "object",
                    "maxProperties": MAX_FILTERS,
                    "additionalProperties": _SCALAR,
                    "description": f"column: value pairs, at most {MAX_FILTERS}",
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": 20},
                "offset": {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0},
            },
            "required": ["table"],
            "additionalProperties": False,
        }
    )
    # Rows hold what the application's users typed, not only its own people.
    integrity = Integrity.UNTRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return records_call(self.name, context, lambda conn, policy: _read(conn, policy, arguments))


def _read(connection: Connection, policy: TablePolicy, arguments: dict[str, Any]) -> ToolResult:
    from sqlalchemy import select

    table = resolve_table(connection, policy, arguments.get("table"))
    key = id_column(policy, table)
    requested = arguments.get("columns")
    if requested:
        chosen = check_columns(policy, table, requested, "columns", max_items=MAX_COLUMNS)
    else:
        chosen = readable_columns(policy, table)
    if not chosen:
        raise Refusal(f"Table {format_cell(table.name)} has no readable columns.")
    shown = list(dict.fromkeys(([key] if key else []) + chosen))
    filters = check_values(
        policy, table, arguments.get("where_equals", {}), "where_equals", max_items=MAX_FILTERS
    )
    limit = bounded_int(arguments, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT)
    offset = bounded_int(arguments, "offset", 0, 0, MAX_OFFSET)
    # Filtered columns are fetched even when not shown, to check what a match would confirm.
    fetched = list(dict.fromkeys(shown + list(filters)))
    query = select(*(table.c[name] for name in fetched))
    for name, value in filters.items():
        query = query.where(table.c[name].is_(None) if value is None else table.c[name] == value)
    query = query.order_by(*(table.c[name] for name in shown[:1])).limit(limit).offset(offset)
    checked = [fetched.index(name) for name in filters]
    # A row matched on a value the reader sees masked, capped or as binary would confirm
    # what the mask hides: such a row is dropped, and the answer is as if it did not match.
    kept = [
        (position, row[: len(shown)])
        for position, row in enumerate(connection.execute(query).all())
        if all(shows_whole(row[index]) for index in checked)
    ]
    name = format_cell(table.name)
    if not kept:
        return ToolResult.text(f"No records in {name} for the given filters.")
    records = RecordTable(table.name, shown, key, max_bytes=_rows_budget(name))
    for _, row in kept:
        if not records.add(row):
            break
    lines = [f"Records in {name} ({records.count}, offset {offset}):", *records.lines]
    if records.count < len(kept):
        # The offset of the first row left out, counted among the rows the query matched.
        next_offset = offset + kept[records.count][0]
        lines.append(_more_rows(len(kept) - records.count, next_offset))
    return ToolResult.text("\n".join(lines), records.artifact(f"{name} records"))


def _more_rows(count: int, next_offset: int) -> str:
    return f"… {count} more rows not shown (text limit); continue with offset {next_offset}."


def _rows_budget(table: str) -> int:
    """The bytes left for the rows once the longest header and closing line are counted."""
    header = f"Records in {table} ({MAX_LIMIT}, offset {MAX_OFFSET}):"
    closing = _more_rows(MAX_LIMIT, MAX_OFFSET + MAX_LIMIT)
    return CONTENT_MAX_BYTES - len(header.encode()) - len(closing.encode()) - 1


class SearchRecords(Tool):
    name = "search_records"
    description = (
        "Search for a term (case-insensitive substring) in the readable text columns of the "
        "readable tables, or of the tables you list. Values are masked and capped at 300 "
        "characters; a match hidden by the mask is not reported."
    )
    group = "content"
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {
                "term": {"type": "string", "minLength": 1, "maxLength": MAX_TERM_CHARS},
                "tables": {"type": "array", "items": _NAME, "maxItems": 20},
            },
            "required": ["term"],
            "additionalProperties": False,
        }
    )
    integrity = Integrity.UNTRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return records_call(
            self.name, context, lambda conn, policy: _search(conn, policy, arguments)
        )


def _search(connection: Connection, policy: TablePolicy, arguments: dict[str, Any]) -> ToolResult:
    term = arguments.get("term")
    if not isinstance(term, str) or not term.strip() or len(term) > MAX_TERM_CHARS:
        raise Refusal(f"term: expected a non-empty string of at most {MAX_TERM_CHARS} characters.")
    readable = policy.readable_tables(table_names(connection))
    wanted = arguments.get("tables")
    if wanted:
        if not isinstance(wanted, list) or not all(t in readable for t in wanted):
            raise Refusal(
                f"tables: unknown or unreadable table. Readable tables: {listing(readable)}."
            )
        readable = [t for t in readable if t in wanted]
    hits: list[list[str]] = []
    for name in readable:
        table = reflect_table(connection, name)
        hits.extend(_search_table(connection, policy, table, term, MAX_SEARCH_HITS - len(hits)))
        if len(hits) >= MAX_SEARCH_HITS:
            break
    if not hits:
        return ToolResult.text(f"No matches for {format_cell(term)!r}.")
    lines = [f"Matches for {format_cell(term)!r} ({len(hits)}):"]
    lines += [f"- {table}:{key} {column}: {cell}" for table, key, column, cell in hits]
    artifact = ToolArtifact.table(["table", "id", "column", "value"], hits, label="Search matches")
    return ToolResult.text("\n".join(lines), artifact)


def _search_table(
    connection: Connection, policy: TablePolicy, table: Table, term: str, room: int
) -> list[list[str]]:
    from sqlalchemy import String, func, or_, select

    key = id_column(policy, table)
    texts = [
        name
        for name in readable_columns(policy, table)
        if isinstance(table.c[name].type, String) and name != key
    ]
    if key is None or not texts:
        return []
    needle = term.lower()
    query = (
        select(table.c[key], *(table.c[name] for name in texts))
        .where(or_(*(func.lower(table.c[n]).contains(needle, autoescape=True) for n in texts)))
        .order_by(table.c[key])
        .limit(room)
    )
    hits = []
    for row in connection.execute(query):
        key_cell = format_cell(row[0])
        for name, value in zip(texts, row[1:], strict=True):
            cell = format_cell(value)
            # Matching ran on the raw value; only a match the reader can see is reported, so
            # the search cannot confirm a secret one guessed character at a time.
            if value is not None and needle in cell.lower():
                hits.append([str(table.name), key_cell, name, cell])
    return hits[:room]


class ListTables(Tool):
    name = "list_tables"
    description = "List the tables the records tools may read, with their readable columns."
    group = "structure"
    # The schema is the host's own.
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return records_call(self.name, context, _list_tables)


def _list_tables(connection: Connection, policy: TablePolicy) -> ToolResult:
    names = policy.readable_tables(table_names(connection))
    if not names:
        return ToolResult.text("No readable tables.")
    rows = []
    for name in names:
        columns = readable_columns(policy, reflect_table(connection, name))
        rows.append(
            [
                format_cell(name),
                ", ".join(format_cell(column) for column in columns),
                "yes" if policy.can_write(name) else "no",
            ]
        )
    lines, rows = fit_lines(
        f"Readable tables ({len(rows)}):",
        [f"- {name}: {columns} (writable: {w})" for name, columns, w in rows],
        rows,
        max_bytes=CONTENT_MAX_BYTES,
    )
    artifact = ToolArtifact.table(["table", "columns", "writable"], rows, label="Tables")
    return ToolResult.text("\n".join(lines), artifact)


class GetTableSchema(Tool):
    name = "get_table_schema"
    description = (
        "Describe one readable table: each readable column's type, nullability, primary key "
        "and the column it references."
    )
    group = "structure"
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {"table": _NAME},
            "required": ["table"],
            "additionalProperties": False,
        }
    )
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return records_call(
            self.name, context, lambda conn, policy: _schema(conn, policy, arguments)
        )


def _schema(connection: Connection, policy: TablePolicy, arguments: dict[str, Any]) -> ToolResult:
    table = resolve_table(connection, policy, arguments.get("table"))
    readable = set(readable_columns(policy, table))
    rows = []
    for column in table.columns:
        if column.name not in readable:
            continue
        rows.append(
            [
                format_cell(column.name),
                _type_name(column.type, connection),
                "yes" if column.nullable else "no",
                "yes" if column.primary_key else "no",
                ", ".join(_reference(policy, fk.column) for fk in column.foreign_keys),
            ]
        )
    withheld = len(table.columns) - len(rows)
    name = format_cell(table.name)
    described = []
    for column_name, kind, nullable, primary, refs in rows:
        notes = [kind] + (["primary key"] if primary == "yes" else [])
        notes += [] if nullable == "yes" else ["not null"]
        notes += [f"references {refs}"] if refs else []
        described.append(f"- {column_name}: {', '.join(notes)}")
    note = f"{withheld} column(s) withheld as credential-like or denied."
    lines, rows = fit_lines(
        f"Table {name} ({len(rows)} readable columns):",
        described,
        rows,
        max_bytes=CONTENT_MAX_BYTES - (len(note.encode()) + 1 if withheld else 0),
    )
    if withheld:
        lines.append(note)
    artifact = ToolArtifact.table(
        ["column", "type", "nullable", "primary_key", "references"],
        rows,
        label=f"{name} schema",
    )
    return ToolResult.text("\n".join(lines), artifact)


def _reference(policy: TablePolicy, target: Column[Any]) -> str:
    """The referenced column's name, only if the reader could read that column itself."""
    table = str(target.table.name)
    if policy.can_read(table) and policy.can_read_column(table, str(target.name)):
        return f"{format_cell(table)}.{format_cell(target.name)}"
    return "(a column that is not readable)"


def _type_name(kind: Any, connection: Connection) -> str:
    try:
        return str(kind.compile(dialect=connection.dialect))
    except Exception:
        # Some reflected types cannot render on every dialect; their class name still informs.
        return type(kind).__name__

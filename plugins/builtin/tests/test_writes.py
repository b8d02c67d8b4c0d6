"""The write tools: writes needing approval, previewed, on write-listed tables only."""

from __future__ import annotations

import pytest

from nrllm_builtin._writes import CreateRecordDraft, UpdateRecord
from nrllm_core import Actor, Effect, ToolContext


def context_for(records, **extra):
    return ToolContext(
        run_id="r",
        call_id="c",
        actor=Actor(id="t"),
        settings=records.settings(**extra),
    )


def test_write_tools_are_classified_as_writes_needing_approval():
    create, update = CreateRecordDraft(), UpdateRecord()

    assert (create.group, create.effect) == ("editing", Effect.NON_IDEMPOTENT_WRITE)
    assert (update.group, update.effect) == ("editing", Effect.IDEMPOTENT_WRITE)
    assert create.requires_approval
    assert update.requires_approval


def test_create_record_draft_inserts_and_names_the_record(records):
    answer = records.call(
        "create_record_draft",
        {"table": "drafts", "values": {"title": "Autumn", "body": "New text", "page_id": 1}},
        write_tables=["drafts"],
    )

    assert not answer.is_error
    assert answer.content == "Created drafts:2 with title, body, page_id."
    assert records.scalar("SELECT title FROM drafts WHERE id = 2") == "Autumn"


def test_create_record_draft_previews_the_row_to_insert(records):
    preview = CreateRecordDraft().preview(
        {"table": "drafts", "values": {"title": "Autumn", "body": "mail me at a@example.com"}},
        context_for(records, write_tables=["drafts"]),
    )

    assert preview == [
        "Insert a new record into drafts:",
        "  title: Autumn",
        "  body: mail me at ***",
    ]
    assert records.scalar("SELECT COUNT(*) FROM drafts") == 1


def test_update_record_updates_and_names_the_record(records):
    answer = records.call(
        "update_record",
        {"table": "drafts", "id": 1, "values": {"title": "Summer update, reviewed"}},
        write_tables=["drafts"],
    )

    assert answer.content == "Updated drafts:1: set title."
    assert records.scalar("SELECT title FROM drafts WHERE id = 1") == "Summer update, reviewed"


def test_update_record_previews_the_row_before_and_after(records):
    preview = UpdateRecord().preview(
        {"table": "drafts", "id": "1", "values": {"title": "New title"}},
        context_for(records, write_tables=["drafts"]),
    )

    assert preview == [
        "Update drafts:1",
        "Before:",
        "  id: 1",
        "  page_id: 2",
        "  title: Summer update",
        "  body: Draft text, not yet reviewed.",
        "After:",
        "  id: 1",
        "  page_id: 2",
        "  title: New title",
        "  body: Draft text, not yet reviewed.",
    ]
    assert records.scalar("SELECT title FROM drafts WHERE id = 1") == "Summer update"


def test_update_record_of_a_missing_record_is_an_error(records):
    answer = records.call(
        "update_record",
        {"table": "drafts", "id": 99, "values": {"title": "x"}},
        write_tables=["drafts"],
    )

    assert answer.is_error
    assert answer.content == "Error: No record drafts:99."


@pytest.mark.parametrize("write_tables", [[], ["drafts"], ["users", "sessions", "drafts"]])
@pytest.mark.parametrize("table", ["users", "pages", "content_elements"])
def test_writes_are_refused_on_tables_not_listed_for_writing(records, write_tables, table):
    for tool, arguments in [
        ("create_record_draft", {"table": table, "values": {"title": "x"}}),
        ("update_record", {"table": table, "id": 1, "values": {"title": "x"}}),
    ]:
        answer = records.call(tool, arguments, write_tables=write_tables)
        assert answer.is_error
        assert answer.content.startswith("Error: Table not found or not open for writing.")
    assert records.scalar("SELECT COUNT(*) FROM users") == 2
    assert records.scalar("SELECT title FROM pages WHERE id = 1") == "Home"


def test_a_denied_table_stays_unwritable_even_when_listed(records):
    preview = UpdateRecord().preview(
        {"table": "users", "id": 1, "values": {"username": "x"}},
        context_for(records, write_tables=["users"]),
    )

    assert preview == [
        "Refused: Table not found or not open for writing. Writable tables: none "
        "(the host lists them in [builtin] write_tables)."
    ]


@pytest.mark.parametrize(
    ("values", "problem"),
    [
        ({"id": 5, "title": "x"}, "values: the primary key id is not written by this tool."),
        ({"password": "x"}, "unknown or unreadable column(s) 'password'"),
        ({"title; DROP TABLE users": "x"}, "unknown or unreadable column(s)"),
        ({"page_id": "two"}, "values: the value for page_id must be an integer."),
    ],
)
def test_write_values_are_checked_against_the_schema(records, values, problem):
    answer = records.call(
        "create_record_draft", {"table": "drafts", "values": values}, write_tables=["drafts"]
    )

    assert answer.is_error
    assert problem in answer.content
    assert records.scalar("SELECT COUNT(*) FROM drafts") == 1


def test_sql_injection_through_write_values_and_ids_is_bound(records):
    created = records.call(
        "create_record_draft",
        {"table": "drafts", "values": {"title": "x'); DROP TABLE users; --"}},
        write_tables=["drafts"],
    )
    assert created.content == "Created drafts:2 with title."
    refused = records.call(
        "update_record",
        {"table": "drafts", "id": "1 OR 1=1", "values": {"title": "y"}},
        write_tables=["drafts"],
    )
    assert refused.content == "Error: id: the value for id must be an integer."
    assert records.scalar("SELECT title FROM drafts WHERE id = 2") == "x'); DROP TABLE users; --"
    assert records.scalar("SELECT COUNT(*) FROM users") == 2
    assert records.scalar("SELECT title FROM drafts WHERE id = 1") == "Summer update"


def test_a_constraint_violation_is_an_error_without_driver_text(records):
    answer = records.call(
        "create_record_draft",
        {"table": "drafts", "values": {"title": None}},
        write_tables=["drafts"],
    )

    assert answer.content == "Error: the records database failed; the host's log has the details."

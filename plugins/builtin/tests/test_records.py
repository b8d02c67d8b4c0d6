"""The read tools on the sample database, on SQLite and on PostgreSQL, and injection attempts."""

from __future__ import annotations

import pytest


def cells_in_text(answer) -> None:
    """Every artifact cell appears in the model's text: the artifact never shows more."""
    for row in answer.table()["rows"]:
        for cell in row:
            assert cell in answer.content


def test_read_records_text_and_artifact_from_the_same_cells(records):
    answer = records.call("read_records", {"table": "pages", "limit": 2})

    assert not answer.is_error
    assert answer.content == (
        "Records in pages (2, offset 0):\n"
        "- pages:1\n  title: Home\n  slug: /\n  description: Welcome to the demo site.\n"
        "- pages:2\n  title: About us\n  slug: /about\n  description: Who we are."
    )
    table = answer.table()
    assert table["columns"] == ["id", "title", "slug", "description"]
    assert table["rows"] == [
        ["1", "Home", "/", "Welcome to the demo site."],
        ["2", "About us", "/about", "Who we are."],
    ]
    assert answer.artifacts[0].label == "pages records"


def test_read_records_masks_secrets_and_emails_in_both_channels(records):
    answer = records.call("read_records", {"table": "content_elements", "where_equals": {"id": 3}})

    assert "sk-FAKEsampleKEY" not in answer.content
    assert "bodytext: <div data-key='sk-***'>map</div>" in answer.content
    assert answer.table()["rows"] == [
        ["3", "3", "html", "Map widget", answer.table()["rows"][0][4]]
    ]
    assert "sk-FAKEsampleKEY" not in answer.table()["rows"][0][4]
    pages = records.call("read_records", {"table": "pages", "where_equals": {"slug": "/contact"}})
    assert "press@example.org" not in pages.content
    assert "press@example.org" not in str(pages.table())
    cells_in_text(pages)


def test_read_records_collapses_line_breaks_so_a_cell_stays_on_its_line(records):
    answer = records.call("read_records", {"table": "content_elements", "columns": ["bodytext"]})

    assert "  bodytext: Our new site is live. Read on for the details." in answer.content
    assert answer.table()["columns"] == ["id", "bodytext"]
    cells_in_text(answer)


def test_read_records_columns_filters_limit_and_offset(records):
    answer = records.call(
        "read_records",
        {
            "table": "content_elements",
            "columns": ["header", "header"],
            "where_equals": {"ctype": "text"},
            "limit": 1,
            "offset": 1,
        },
    )

    assert (
        answer.content
        == "Records in content_elements (1, offset 1):\n- content_elements:2\n  header: Our team"
    )
    assert answer.table() == {"columns": ["id", "header"], "rows": [["2", "Our team"]]}


def test_read_records_filters_on_null_and_on_an_integer_given_as_text(records):
    nulls = records.call("read_records", {"table": "pages", "where_equals": {"description": None}})
    assert nulls.content == "No records in pages for the given filters."
    assert nulls.artifacts == ()
    by_text = records.call("read_records", {"table": "pages", "where_equals": {"id": "2"}})
    assert by_text.table()["rows"][0][0] == "2"


@pytest.mark.parametrize("table", ["users", "sessions", "no_such_table", "Pages"])
def test_read_records_unknown_or_denied_table_names_what_is_allowed(records, table):
    answer = records.call("read_records", {"table": table})

    assert not answer.is_error
    assert answer.content == (
        "Table not found or not readable. Readable tables: content_elements, drafts, pages."
    )
    assert answer.artifacts == ()


def test_read_records_unknown_column_names_the_readable_columns(records):
    answer = records.call("read_records", {"table": "pages", "columns": ["title", "secret"]})

    assert answer.content == (
        "columns: unknown or unreadable column(s) 'secret' in table pages. "
        "Readable columns: id, title, slug, description."
    )


def test_read_records_refuses_a_denied_column_in_a_filter(records):
    answer = records.call(
        "read_records", {"table": "pages", "where_equals": {"slug": "/"}}, deny_columns=["slug"]
    )

    assert "unknown or unreadable column(s) 'slug'" in answer.content
    assert "Readable columns: id, title, description." in answer.content


def test_read_records_refuses_a_value_of_the_wrong_type(records):
    answer = records.call("read_records", {"table": "pages", "where_equals": {"id": "one"}})

    assert answer.content == "where_equals: the value for id must be an integer."


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"table": "pages", "limit": 51}, "limit"),
        ({"table": "pages", "limit": 0}, "limit"),
        ({"table": "pages", "offset": 10_001}, "offset"),
        ({"table": "pages", "where_equals": {f"c{i}": 1 for i in range(6)}}, "where_equals"),
        ({"table": "pages", "where_equals": {"id": [1]}}, "where_equals"),
        ({"table": "pages", "bogus": 1}, "bogus"),
    ],
)
def test_read_records_arguments_outside_the_schema_never_reach_the_tool(
    records, arguments, problem
):
    answer = records.call("read_records", arguments)

    assert answer.is_error
    assert answer.content.startswith('Error: invalid arguments for tool "read_records"')
    assert problem in answer.content


def test_read_records_checks_bounds_itself_when_called_directly(sqlite_records):
    from nrllm_builtin._records import ReadRecords
    from nrllm_core import Actor, ToolContext

    context = ToolContext(
        run_id="r",
        call_id="c",
        actor=Actor(id="t"),
        settings=sqlite_records.settings(),
    )
    tool = ReadRecords()
    too_many = tool.execute({"table": "pages", "limit": 500}, context)
    assert too_many.content == "limit: expected an integer from 1 to 50."
    as_bool = tool.execute({"table": "pages", "offset": True}, context)
    assert as_bool.content == "offset: expected an integer from 0 to 10000."
    filters = tool.execute(
        {"table": "pages", "where_equals": {str(i): 1 for i in range(6)}}, context
    )
    assert filters.content == "where_equals: expected an object of at most 5 column: value pairs."


INJECTIONS = [
    "pages; DROP TABLE users; --",
    'pages" --',
    "pages WHERE 1=1",
    "users--",
    "(SELECT password_hash FROM users)",
]


@pytest.mark.parametrize("name", INJECTIONS)
def test_sql_injection_through_table_names_is_refused(records, name):
    for tool, arguments in [
        ("read_records", {"table": name}),
        ("get_table_schema", {"table": name}),
        ("search_records", {"term": "a", "tables": [name]}),
    ]:
        answer = records.call(tool, arguments)
        assert not answer.is_error
        assert "Readable tables: content_elements, drafts, pages." in answer.content
    assert records.scalar("SELECT COUNT(*) FROM users") == 2


@pytest.mark.parametrize("name", ["title FROM pages; DROP TABLE users; --", 'title"', "*", "1"])
def test_sql_injection_through_column_names_is_refused(records, name):
    for arguments in [
        {"table": "pages", "columns": [name]},
        {"table": "pages", "where_equals": {name: "x"}},
    ]:
        answer = records.call("read_records", arguments)
        assert "unknown or unreadable column(s)" in answer.content
    assert records.scalar("SELECT COUNT(*) FROM users") == 2


@pytest.mark.parametrize("value", ["' OR '1'='1", "Home' --", "%", "Home'; DROP TABLE users; --"])
def test_sql_injection_through_values_is_a_bound_parameter(records, value):
    answer = records.call("read_records", {"table": "pages", "where_equals": {"title": value}})

    assert answer.content == "No records in pages for the given filters."
    assert records.scalar("SELECT COUNT(*) FROM users") == 2


@pytest.mark.parametrize("term", ["%", "_", "' OR 1=1 --", "\\", "x'; DROP TABLE pages; --"])
def test_sql_injection_and_wildcards_through_the_search_term_match_literally(records, term):
    answer = records.call("search_records", {"term": term})

    assert answer.content.startswith("No matches for")
    assert records.scalar("SELECT COUNT(*) FROM pages") == 3


def test_search_records_finds_terms_across_readable_tables(records):
    answer = records.call("search_records", {"term": "SITE"})

    assert answer.content == (
        "Matches for 'SITE' (2):\n"
        "- content_elements:1 bodytext: Our new site is live. Read on for the details.\n"
        "- pages:1 description: Welcome to the demo site."
    )
    assert answer.table() == {
        "columns": ["table", "id", "column", "value"],
        "rows": [
            ["content_elements", "1", "bodytext", "Our new site is live. Read on for the details."],
            ["pages", "1", "description", "Welcome to the demo site."],
        ],
    }


def test_search_records_limits_to_the_tables_given(records):
    answer = records.call("search_records", {"term": "site", "tables": ["pages"]})

    assert [row[0] for row in answer.table()["rows"]] == ["pages"]


def test_search_records_never_searches_denied_tables_or_columns(records):
    assert records.call("search_records", {"term": "admin"}).content == "No matches for 'admin'."
    assert records.call("search_records", {"term": "ghp_"}).content == "No matches for 'ghp_'."
    refused = records.call("search_records", {"term": "a", "tables": ["users"]})
    assert refused.content.startswith("tables: unknown or unreadable table.")


def test_search_records_does_not_confirm_a_masked_secret(records):
    # The raw value holds "sk-FAKEsample"; the reader only ever sees "sk-***".
    answer = records.call("search_records", {"term": "FAKEsample"})

    assert answer.content == "No matches for 'FAKEsample'."


def test_list_tables_lists_readable_tables_and_columns(records):
    answer = records.call("list_tables", {}, write_tables=["drafts"])

    assert answer.content == (
        "Readable tables (3):\n"
        "- content_elements: id, page_id, ctype, header, bodytext (writable: no)\n"
        "- drafts: id, page_id, title, body (writable: yes)\n"
        "- pages: id, title, slug, description (writable: no)"
    )
    assert answer.table()["columns"] == ["table", "columns", "writable"]


def test_list_tables_honours_read_tables_and_deny_tables(records):
    answer = records.call(
        "list_tables", {}, read_tables=["pages", "drafts", "users"], deny_tables=["drafts"]
    )

    assert answer.table()["rows"] == [["pages", "id, title, slug, description", "no"]]


def test_get_table_schema_as_text_and_table(records):
    answer = records.call("get_table_schema", {"table": "content_elements"})

    rows = answer.table()["rows"]
    assert [row[0] for row in rows] == ["id", "page_id", "ctype", "header", "bodytext"]
    assert rows[0][2:4] == ["no", "yes"]
    assert rows[1][4] == "pages.id"
    assert "- page_id: INTEGER, not null, references pages.id" in answer.content
    assert answer.artifacts[0].label == "content_elements schema"


def test_get_table_schema_withholds_denied_columns_and_hides_denied_tables(records):
    answer = records.call(
        "get_table_schema", {"table": "pages"}, deny_columns=["pages.description"]
    )

    assert [row[0] for row in answer.table()["rows"]] == ["id", "title", "slug"]
    assert "1 column(s) withheld" in answer.content
    denied = records.call("get_table_schema", {"table": "users"})
    assert denied.content.startswith("Table not found or not readable.")


def test_a_broken_records_url_is_an_error_without_the_url(call):
    secret_url = "postgresql+psycopg://admin:hunter2@127.0.0.1:1/none"
    answer = call("read_records", {"table": "pages"}, {"records_url": secret_url})

    assert answer.is_error
    assert answer.content == "Error: the records database failed; the host's log has the details."
    assert "hunter2" not in answer.content


def test_a_filter_never_confirms_a_value_the_text_masks(records):
    masked = "Write to press@example.org for interviews."
    shown = records.call(
        "read_records", {"table": "pages", "where_equals": {"description": masked}}
    )
    hidden = records.call(
        "read_records",
        {"table": "pages", "columns": ["title"], "where_equals": {"description": masked}},
    )
    wrong = records.call(
        "read_records", {"table": "pages", "where_equals": {"description": "press@example.com"}}
    )

    # A right guess and a wrong one answer alike.
    for answer in (shown, hidden, wrong):
        assert answer.content == "No records in pages for the given filters."
    plain = records.call("read_records", {"table": "pages", "where_equals": {"slug": "/contact"}})
    assert plain.content.startswith("Records in pages (1, offset 0):")


def test_get_table_schema_names_no_reference_to_a_denied_column(records):
    answer = records.call(
        "get_table_schema", {"table": "content_elements"}, deny_columns=["pages.id"]
    )

    assert "pages.id" not in answer.content
    assert "- page_id: INTEGER, not null, references (a column that is not readable)" in (
        answer.content
    )
    assert answer.table()["rows"][1][4] == "(a column that is not readable)"


def _notes_database(tmp_path, rows):
    import sqlite3

    path = tmp_path / "notes.db"
    columns = ["c" * 60 + suffix for suffix in "abcd"]
    with sqlite3.connect(path) as connection:
        connection.execute(
            f"create table notes(id integer primary key, {', '.join(c + ' text' for c in columns)})"
        )
        for number in range(1, rows + 1):
            value = f"r{number:02d}" + "x" * 197
            connection.execute("insert into notes values (?, ?, ?, ?, ?)", (number, *[value] * 4))
    connection.close()
    return f"sqlite+pysqlite:///{path}"


def test_read_records_stops_both_channels_before_the_content_cap(call, tmp_path):
    from nrllm_core import CONTENT_MAX_BYTES

    url = _notes_database(tmp_path, 50)
    answer = call("read_records", {"table": "notes", "limit": 50}, {"records_url": url})

    assert len(answer.content.encode()) <= CONTENT_MAX_BYTES
    assert "truncated" not in answer.content
    ids = [row[0] for row in answer.table()["rows"]]
    assert ids == [str(n) for n in range(1, len(ids) + 1)]
    assert len(ids) < 50
    assert answer.content.startswith(f"Records in notes ({len(ids)}, offset 0):")
    assert answer.content.endswith(
        f"\n… {50 - len(ids)} more rows not shown (text limit); continue with offset {len(ids)}."
    )
    cells_in_text(answer)
    shown = [line for line in answer.content.splitlines() if line.startswith("- notes:")]
    assert shown == [f"- notes:{n}" for n in ids]
    rest = call(
        "read_records", {"table": "notes", "limit": 50, "offset": len(ids)}, {"records_url": url}
    )
    assert rest.table()["rows"][0][0] == str(len(ids) + 1)


def test_reflected_names_reach_the_text_on_one_line(call, tmp_path):
    import sqlite3

    path = tmp_path / "odd.db"
    with sqlite3.connect(path) as connection:
        connection.execute('create table "odd\nname" (id integer primary key, "evil\ncolumn" text)')
        connection.execute("insert into \"odd\nname\" values (1, 'v')")
    connection.close()
    settings = {"records_url": f"sqlite+pysqlite:///{path}"}

    schema = call("get_table_schema", {"table": "odd\nname"}, settings)
    assert schema.content == (
        "Table odd name (2 readable columns):\n- id: INTEGER, primary key\n- evil column: TEXT"
    )
    assert [row[0] for row in schema.table()["rows"]] == ["id", "evil column"]
    listed = call("list_tables", {}, settings)
    assert listed.content == "Readable tables (1):\n- odd name: id, evil column (writable: no)"
    read = call("read_records", {"table": "odd\nname"}, settings)
    assert read.content == "Records in odd name (1, offset 0):\n- odd name:1\n  evil column: v"


def test_schema_tools_never_show_more_rows_in_the_table_than_in_the_text(tmp_path, call):
    import sqlite3

    from nrllm_core import CONTENT_MAX_BYTES

    path = tmp_path / "wide.db"
    connection = sqlite3.connect(path)
    columns = ", ".join(f"column_{i:04d}_{'y' * 40} TEXT" for i in range(1_500))
    connection.execute(f"create table wide (id integer primary key, {columns})")
    for t in range(400):
        connection.execute(f"create table t{t:03d}_{'x' * 90} (id integer primary key, v text)")
    connection.close()
    settings = {"records_url": f"sqlite+pysqlite:///{path}"}

    for name, arguments in [("get_table_schema", {"table": "wide"}), ("list_tables", {})]:
        answer = call(name, arguments, settings)
        assert len(answer.content.encode()) <= CONTENT_MAX_BYTES
        assert "more not shown (text limit)." in answer.content
        shown = [line for line in answer.content.splitlines() if line.startswith("- ")]
        (artifact,) = answer.artifacts
        if artifact.type == "table":
            assert len(artifact.data["rows"]) == len(shown)
        else:
            # Too large as JSON even so: the seam omits it whole, never in part.
            assert artifact.label == "Artifacts omitted"

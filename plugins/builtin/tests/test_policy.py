"""Default denials, and host lists that can only extend them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import nrllm_builtin
from nrllm_builtin._policy import (
    TablePolicy,
    is_nrllm_table,
    is_sensitive_column,
    is_sensitive_table,
)
from nrllm_builtin._settings import BuiltinSettings, SettingsError, load_settings
from nrllm_core import Actor, ToolContext, invoke, make_plugin_manager


@pytest.mark.parametrize(
    "name",
    [
        "users", "user", "be_users", "fe_users", "UserAccounts", "sessions", "user_sessions",
        "api_tokens", "credentials", "passwords", "secrets", "sys_log", "logs", "audit_log",
        "changelog", "api_keys", "oauth_refreshtokens", "members", "admins", "customers",
        "profiles", "people", "accounts", "member", "shop_customers", "UserProfiles",
    ],
)  # fmt: skip
def test_sensitive_tables_are_denied_by_default(name):
    assert is_sensitive_table(name)
    assert not TablePolicy.from_settings(BuiltinSettings(read_tables=(name,))).can_read(name)


@pytest.mark.parametrize("name", ["pages", "content_elements", "drafts", "blog_posts", "catalog"])
def test_ordinary_tables_are_readable(name):
    assert not is_sensitive_table(name)
    assert TablePolicy.from_settings(BuiltinSettings()).can_read(name)


@pytest.mark.parametrize(
    "name",
    [
        "password", "password_hash", "passwd", "api_token", "apiKey", "salt",
        "secret", "client_secret", "mfa_secret", "private_key", "refreshToken", "dsn",
        "pass", "pw", "pin", "hashed", "hashed_pw", "hash_pw", "hashedPw", "digest", "totp",
        "otp", "jwt", "bearer", "auth", "recovery", "mfa", "recovery_codes", "PIN", "auth_code",
    ],
)  # fmt: skip
def test_sensitive_columns_are_denied_by_default(name):
    assert is_sensitive_column(name)
    assert not TablePolicy.from_settings(BuiltinSettings()).can_read_column("pages", name)


@pytest.mark.parametrize(
    "name",
    [
        "title", "header", "bodytext", "user_id", "page_id", "slug", "author", "pinned",
        "passenger", "compass", "hashtag", "spinner",
    ],
)  # fmt: skip
def test_ordinary_columns_are_readable(name):
    assert not is_sensitive_column(name)


def test_host_lists_extend_the_defaults_and_never_replace_them():
    policy = TablePolicy.from_settings(
        BuiltinSettings(
            read_tables=("pages", "users", "drafts"),
            deny_tables=("drafts",),
            deny_columns=("pages.slug", "title"),
            write_tables=("users", "pages", "drafts"),
        )
    )

    assert policy.readable_tables(["pages", "users", "drafts", "content_elements"]) == ["pages"]
    assert policy.writable_tables(["pages", "users", "drafts"]) == ["pages"]
    assert not policy.can_read_column("pages", "slug")
    assert policy.can_read_column("drafts", "slug")
    assert not policy.can_read_column("drafts", "title")
    assert not policy.can_read_column("pages", "password")


def test_write_tables_default_to_none():
    assert TablePolicy.from_settings(BuiltinSettings()).writable_tables(["pages"]) == []


def test_settings_are_checked_with_the_key_named():
    with pytest.raises(SettingsError) as caught:
        load_settings({"deny_tables": "users", "records_url": 3, "colour": "blue"})
    message = str(caught.value)
    assert "builtin.colour: unknown key" in message
    assert "builtin.deny_tables: expected an array of strings, got a string" in message
    assert "builtin.records_url: expected a string, got an integer" in message
    assert load_settings({}) == BuiltinSettings()


def test_bad_settings_fail_a_hosts_call_with_the_key_named(call):
    with pytest.raises(SettingsError, match=r"builtin\.write_tables: expected an array of str"):
        call("read_records", {"table": "pages"}, {"write_tables": "drafts"})


def test_bad_settings_in_a_context_built_by_hand_make_every_tool_answer_with_an_error():
    # By hand, not through the nrllm fixture: a host checks the section when its configuration
    # loads (above), so only a context built by hand still carries a raw, bad table.
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(nrllm_builtin, name="builtin")
    context = ToolContext(
        run_id="r", call_id="c", actor=Actor(id="t"), settings={"builtin": {"write_tables": "d"}}
    )

    answer = invoke(pm, "read_records", {"table": "pages"}, context=context)

    assert answer.is_error
    assert answer.content == (
        "Error: the host's [builtin] settings are invalid: "
        "builtin.write_tables: expected an array of strings, got a string"
    )


ROOT = Path(__file__).resolve().parents[3]


def _literal(node: ast.expr, path: Path) -> str:
    assert isinstance(node, ast.Constant), f"{path}: a table named by an expression"
    assert isinstance(node.value, str)
    return node.value


def nrllm_tables() -> list[str]:
    """Every table core's and the first-party plugins' migrations create (or rename to), and
    each one's version table, read from the migrations themselves: a new one is judged here
    the day it is written."""
    tables = {"alembic_version"}  # core's, alembic's default name
    migrations = [
        *ROOT.glob("nrllm_core/store/migrations/versions/*.py"),
        *ROOT.glob("plugins/*/*/migrations/versions/*.py"),
    ]
    for path in migrations:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr == "create_table":
                    tables.add(_literal(node.args[0], path))
                elif node.func.attr == "rename_table":
                    tables.add(_literal(node.args[1], path))
    # A plugin's migrations keep their version in a table of their own, its VERSION_TABLE.
    for path in ROOT.glob("plugins/*/nrllm_*/*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name)
                and node.target.id == "VERSION_TABLE"
                and node.value is not None
            ):
                tables.add(_literal(node.value, path))
    return sorted(tables)


NRLLM_TABLES = nrllm_tables()


def test_the_tables_of_every_first_party_migration_are_found():
    # The migrations are read by their place in the repository: a move must not leave the
    # tests below judging nothing.
    assert {
        "runs", "consumed_approvals", "audit_keys", "mcp_pins", "repurpose_jobs",
        "nrllm_mcp_alembic_version", "nrllm_repurpose_alembic_version",
    } <= set(NRLLM_TABLES)  # fmt: skip


@pytest.mark.parametrize("name", [*NRLLM_TABLES, "nrllm_runs", "Run_Steps"])
def test_nrllm_tables_are_denied_even_when_the_host_lists_them(name):
    policy = TablePolicy.from_settings(
        BuiltinSettings(read_tables=(name, "pages"), write_tables=(name, "pages"))
    )

    assert is_nrllm_table(name)
    assert not policy.can_read(name)
    assert not policy.can_write(name)
    assert policy.readable_tables([name, "pages"]) == ["pages"]
    assert policy.writable_tables([name, "pages"]) == ["pages"]


@pytest.fixture
def shared_database(tmp_path):
    """A host database that holds nrllm's tables beside its own ``notes``, every one of them
    listed for reading and writing, each with a readable primary key and a plain column."""
    from sqlalchemy import create_engine, text

    url = f"sqlite+pysqlite:///{tmp_path / 'shared.db'}"
    engine = create_engine(url)
    listed = [*NRLLM_TABLES, "notes"]
    with engine.begin() as connection:
        for name in listed:
            connection.execute(text(f'CREATE TABLE "{name}" (id INTEGER PRIMARY KEY, title TEXT)'))
            connection.execute(text(f"INSERT INTO \"{name}\" VALUES (1, 'kept')"))
    engine.dispose()
    return {"records_url": url, "read_tables": listed, "write_tables": listed}


REFUSED = (
    "Readable tables: notes.",
    "Writable tables: notes (the host lists them in [builtin] write_tables).",
)


@pytest.mark.parametrize("name", NRLLM_TABLES)
def test_the_record_tools_refuse_each_nrllm_table(call, shared_database, name):
    calls = [
        ("read_records", {"table": name}),
        ("search_records", {"term": "kept", "tables": [name]}),
        ("get_table_schema", {"table": name}),
        ("create_record_draft", {"table": name, "values": {"title": "new"}}),
        ("update_record", {"table": name, "id": 1, "values": {"title": "changed"}}),
    ]
    for tool, arguments in calls:
        answer = call(tool, arguments, shared_database)
        # Refused, and the tables offered instead are the host's alone.
        assert answer.content.endswith(REFUSED), (tool, answer.content)
    listed = call("list_tables", {}, shared_database)
    assert name not in listed.content.split()
    # The same calls on the host's own table do what they say.
    read = call("read_records", {"table": "notes"}, shared_database)
    assert read.content == "Records in notes (1, offset 0):\n- notes:1\n  title: kept"

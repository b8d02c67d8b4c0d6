"""Default denials, and host lists that can only extend them."""

from __future__ import annotations

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
        "password", "password_hash", "passwd", "api_token", "apiKey", "session_id", "salt",
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


@pytest.mark.parametrize(
    "name",
    [
        "runs", "run_steps", "gate_decisions", "suspensions", "repurpose_jobs",
        "repurpose_job_artifacts", "alembic_version", "nrllm_repurpose_alembic_version",
        "nrllm_runs",
    ],
)  # fmt: skip
def test_nrllm_tables_are_denied_even_when_the_host_lists_them(name):
    policy = TablePolicy.from_settings(
        BuiltinSettings(read_tables=(name, "pages"), write_tables=(name, "pages"))
    )

    assert is_nrllm_table(name)
    assert not policy.can_read(name)
    assert not policy.can_write(name)
    assert policy.readable_tables([name, "pages"]) == ["pages"]
    assert policy.writable_tables([name, "pages"]) == ["pages"]

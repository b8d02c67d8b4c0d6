"""Column and table names that hold credentials: glued, camel-cased, look-alike letters, and
the allow-list mode for hosts that want certainty instead of a heuristic."""

from __future__ import annotations

import pytest

from nrllm_builtin._policy import TablePolicy, is_sensitive_column, is_sensitive_table
from nrllm_builtin._settings import BuiltinSettings, SettingsError, load_settings

CYRILLIC_A = "\u0430"

DENIED = [
    # Glued and camel-cased fragments.
    "pwhash", "privkey", "hmackey", "signingkey", "otpseed", "userPwHash", "mfaSeed",
    "totpSecret", "cardnumber", "creditCard", "iban", "ssn", "user_ssn", "recoverySeed",
    "walletseed", "keyhash", "pwsalt", "monkeyhash", "keywordhash", "PRIVKEY", "HmacKey",
    # Look-alikes: Cyrillic and Greek letters, compatibility forms, accents, zero-width.
    f"p{CYRILLIC_A}ssword", "\u0440assword", "\u03a4\u039f\u039a\u0395\u039d",
    "\uff50\uff41\uff53\uff53\uff57\uff4f\uff52\uff44", "pa\u0301ssword", "to\u200bken",
    "pass\u00adword",
    # Payment and identity numbers, refresh tokens and key material, however abbreviated.
    "cvv", "cvc", "card_cvv2", "card_number", "pan", "user_pan", "refresh_tok",
    "social_security", "tax_id", "taxId", "cert_pem", "rsa",
    # A name spelled with separators between its letters.
    "p_a_s_s_w_o_r_d", "P-A-S-S-W-O-R-D", "s.e.c.r.e.t", "t o k e n", "s_s_n", "c_v_v",
    "user_p_a_n",
]  # fmt: skip

# Ordinary words that contain a fragment: the rule blanks them out before looking.
ORDINARY = [
    "keyword", "keywords", "passenger", "passengers", "hashtag", "compass", "monkey",
    "hockey_team", "privacy_level", "cardinality", "title", "description", "page_id",
    "author", "spinner", "company", "span", "panel", "pancake", "japan", "stock", "tokyo",
    "universal", "conversation", "syntax_id", "tax", "security_level", "a_b_c", "x_y",
]  # fmt: skip


@pytest.mark.parametrize("name", DENIED)
def test_a_credential_name_is_denied_however_it_is_spelled(name):
    assert is_sensitive_column(name)
    assert is_sensitive_table(name)
    assert not TablePolicy.from_settings(BuiltinSettings()).can_read_column("pages", name)


@pytest.mark.parametrize("name", ORDINARY)
def test_an_ordinary_word_with_a_fragment_in_it_stays_readable(name):
    assert not is_sensitive_column(name)
    assert TablePolicy.from_settings(BuiltinSettings()).can_read_column("pages", name)


@pytest.fixture
def widgets(tmp_path):
    from sqlalchemy import create_engine, text

    url = f"sqlite+pysqlite:///{tmp_path / 'widgets.db'}"
    engine = create_engine(url)
    columns = ["pwhash", "privkey", "hmackey", "signingkey", "otpseed", f"p{CYRILLIC_A}ssword"]
    with engine.begin() as connection:
        connection.execute(
            text(
                "CREATE TABLE widgets (id INTEGER PRIMARY KEY, title TEXT, keyword TEXT, "
                + ", ".join(f'"{name}" TEXT' for name in columns)
                + ")"
            )
        )
        values = ", ".join(f"'{value}'" for value in ["Lamp", "light", *columns])
        connection.execute(text(f"INSERT INTO widgets VALUES (1, {values})"))
    engine.dispose()
    return {"records_url": url, "write_tables": ["widgets"]}, columns


def test_credential_columns_are_neither_read_nor_written(call, widgets):
    settings, columns = widgets

    read = call("read_records", {"table": "widgets"}, settings)
    schema = call("get_table_schema", {"table": "widgets"}, settings)

    assert read.content == (
        "Records in widgets (1, offset 0):\n- widgets:1\n  title: Lamp\n  keyword: light"
    )
    assert "6 column(s) withheld" in schema.content
    for column in columns:
        written = call(
            "update_record", {"table": "widgets", "id": 1, "values": {column: "x"}}, settings
        )
        assert written.is_error
        assert "unknown or unreadable column" in written.content
        assert column not in read.content


def test_allow_columns_shows_only_the_listed_columns_of_their_table():
    policy = TablePolicy.from_settings(
        BuiltinSettings(allow_columns=("widgets.id", "widgets.title", "widgets.pwhash"))
    )

    assert policy.can_read_column("widgets", "title")
    assert policy.can_read_column("widgets", "id")
    assert not policy.can_read_column("widgets", "keyword")
    # A denial still wins over an allowance; other tables keep the default rules.
    assert not policy.can_read_column("widgets", "pwhash")
    assert policy.can_read_column("pages", "keyword")
    assert policy.can_read_column("widget", "keyword")


def test_allow_columns_in_a_call(call, widgets):
    settings, _ = widgets

    answer = call(
        "read_records", {"table": "widgets"}, {**settings, "allow_columns": ["widgets.title"]}
    )

    # The id column is not listed: the row has no id to show.
    assert answer.content == "Records in widgets (1, offset 0):\n- widgets row 1\n  title: Lamp"


@pytest.mark.parametrize("entry", ["widgets", ".title", "widgets."])
def test_allow_columns_entries_are_table_dot_column(entry):
    with pytest.raises(SettingsError) as caught:
        load_settings({"allow_columns": [entry]})

    assert str(caught.value) == "builtin.allow_columns: expected table.column entries"


# Issue 33, item 5: credential columns in other languages and in other words were shown to
# the model; ordinary columns sharing a word with a credential were withheld.
IN_OTHER_WORDS = [
    "contraseña", "senha", "clave", "kennwort", "wachtwoord", "parola", "hasło", "пароль",
    "密码", "cc_number", "ccnum", "pincode", "access_code", "verification_code", "reset_code",
    "account_number", "connection_string", "security_answer",
    # More of the same vocabulary, written the ways column names are.
    "mot_de_passe", "Passwort", "userKennwort", "haslo_uzytkownika", "パスワード", "用户密码",
    "clave_acceso", "ADMIN_PIN", "smtp_creds", "connStr", "CcNum",
]  # fmt: skip
ORDINARY_COLUMNS = [
    "prompt_tokens", "completion_tokens", "total_tokens", "session_id", "is_private",
    "sort_key", "cache_key", "commit_hash", "pass_rate", "card_id", "secretary",
    "country_code", "phone_number", "twitter_card", "promptTokens", "max_tokens",
    "partition_key", "file_hash", "auth_type",
]  # fmt: skip


@pytest.mark.parametrize("name", IN_OTHER_WORDS)
def test_a_credential_column_is_withheld_in_any_language(name):
    assert is_sensitive_column(name)
    assert not TablePolicy.from_settings(BuiltinSettings()).can_read_column("pages", name)


@pytest.mark.parametrize("name", ORDINARY_COLUMNS)
def test_a_column_sharing_a_word_with_a_credential_is_readable(name):
    assert not is_sensitive_column(name)
    assert TablePolicy.from_settings(BuiltinSettings()).can_read_column("pages", name)


def test_sessions_tables_stay_withheld_when_a_session_id_column_is_readable():
    assert is_sensitive_table("sessions")
    assert is_sensitive_table("user_sessions")
    assert not is_sensitive_column("session_id")


def test_read_records_shows_ordinary_columns_and_withholds_credentials_in_any_language(
    call, tmp_path
):
    from sqlalchemy import create_engine, text

    url = f"sqlite+pysqlite:///{tmp_path / 'usage.db'}"
    engine = create_engine(url)
    secret = ["contraseña", "senha", "пароль", "密码", "ccnum", "reset_code", "security_answer"]
    shown = ["prompt_tokens", "session_id", "sort_key", "commit_hash", "pass_rate", "secretary"]
    with engine.begin() as connection:
        connection.execute(
            text(
                "CREATE TABLE usage (id INTEGER PRIMARY KEY, "
                + ", ".join(f'"{name}" TEXT' for name in [*secret, *shown])
                + ")"
            )
        )
        values = ", ".join(f"'v{index}'" for index in range(len(secret) + len(shown)))
        connection.execute(text(f"INSERT INTO usage VALUES (1, {values})"))
    engine.dispose()

    read = call("read_records", {"table": "usage"}, {"records_url": url})

    start = len(secret)
    assert read.content == "Records in usage (1, offset 0):\n- usage:1\n" + "\n".join(
        f"  {name}: v{start + index}" for index, name in enumerate(shown)
    )

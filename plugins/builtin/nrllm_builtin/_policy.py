"""Which tables and columns the record tools may touch: defaults the host can only extend."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from typing import Final, final

import attrs

from nrllm_builtin._settings import BuiltinSettings
from nrllm_core.redact import names_a_credential

__all__ = ["TablePolicy", "is_nrllm_table", "is_sensitive_column", "is_sensitive_table"]

# Before a name is judged it is reduced to what it looks like: compatibility forms folded
# (NFKC: a fullwidth ``pass`` is ``pass``), accents, zero-width and other format characters
# dropped, and the Cyrillic and Greek letters that look like Latin ones read as those
# (``p\u0430ssword`` with a Cyrillic ``\u0430`` is a password).
_CONFUSABLES: Final = str.maketrans(
    "аеорсухіјѕԁԛԝһкмнтвьүӏгпАВЕКМНОРСТУХІЈЅαβγεικνορτυχωΑΒΕΖΗΙΚΜΝΟΡΤΥΧıɑ",
    "aeopcyxijsdqwhkmhtbbylrnABEKMHOPCTYXIJSabyeikvoptuxwABEZHIKMNOPTYXia",
)
_DROPPED_CATEGORIES: Final = frozenset({"Mn", "Me", "Cf"})
# A name spelled out one letter at a time (``p_a_s_s_w_o_r_d``, ``s.s.n``) reads as the word
# its letters make.
_SPELLED_OUT: Final = re.compile(
    r"(?<![A-Za-z0-9])[A-Za-z0-9](?:[^A-Za-z0-9]+[A-Za-z0-9](?![A-Za-z0-9]))+"
)
_SEPARATORS: Final = re.compile(r"[^A-Za-z0-9]+")

# Names are split into words on anything that is not a letter or digit and on camelCase
# boundaries, so ``fe_users``, ``UserSessions`` and ``api-keys`` are judged word by word.
_WORD_BOUNDARY: Final = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")

# Words that make a whole table sensitive: people, accounts and logs, besides the credential
# words.
_ACCOUNT_OR_LOG_WORD: Final = re.compile(
    r"(?:be|fe)?users?|accounts?|logins?|members?|admins?|customers?|profiles?|people|sessions?"
    r"|\w*logs?|logging"
)
# Ordinary words ending in "log" that are not logs.
_NOT_LOGS: Final = frozenset({"blog", "blogs", "catalog", "catalogs", "dialog", "dialogs"})
# nrllm's own tables, every one that core's and the first-party plugins' migrations create
# (the audit, its chain key, the approvals claimed, the jobs, the MCP pins and listed
# servers): a model must never read or rewrite its own trail or what governs it, even when
# they share the host's database and a host lists them. Listed by name, not left to a word
# in the name; a test reads the migrations and fails on a table missing here.
_NRLLM_TABLES: Final = frozenset(
    {
        "runs",
        "run_steps",
        "gate_decisions",
        "suspensions",
        "consumed_approvals",
        "audit_keys",
        "repurpose_jobs",
        "repurpose_job_artifacts",
        "mcp_pins",
        "mcp_servers",
    }
)


def _looks_like(name: str) -> str:
    """``name`` as it reads: NFKC, without marks or format characters, confusables folded,
    letters spelled out one at a time joined."""
    decomposed = unicodedata.normalize("NFKD", name)
    kept = "".join(c for c in decomposed if unicodedata.category(c) not in _DROPPED_CATEGORIES)
    folded = unicodedata.normalize("NFKC", kept).translate(_CONFUSABLES)
    return _SPELLED_OUT.sub(lambda spelled: _SEPARATORS.sub("", spelled[0]), folded)


def _words(name: str) -> list[str]:
    return [w.lower() for w in _WORD_BOUNDARY.split(name) if w]


def _has_secret_shape(name: str) -> bool:
    # Read as written (``пароль``, ``contraseña``) and as it looks (``p\u0430ssword``).
    return names_a_credential(name) or names_a_credential(_looks_like(name))


def is_sensitive_column(name: str) -> bool:
    """Whether a column name is named with a credential word (core's vocabulary, in any of the
    languages it knows), as written or as its look-alike letters read."""
    return _has_secret_shape(name)


def is_sensitive_table(name: str) -> bool:
    """Whether a table name looks like users, sessions, credentials, tokens or logs."""
    if _has_secret_shape(name):
        return True
    return any(
        _ACCOUNT_OR_LOG_WORD.fullmatch(word) and word not in _NOT_LOGS
        for word in _words(_looks_like(name))
    )


def is_nrllm_table(name: str) -> bool:
    """Whether a table is one of nrllm's own (its audit, its jobs, any migration version)."""
    lowered = _looks_like(name).lower()
    return (
        lowered in _NRLLM_TABLES
        or lowered.startswith("nrllm_")
        or lowered.endswith("alembic_version")
    )


@final
@attrs.frozen(kw_only=True)
class TablePolicy:
    """The host's lists on top of the defaults; a denial always wins over an allowance."""

    read_tables: frozenset[str] | None
    deny_tables: frozenset[str]
    # ``table.column`` entries, and bare ``column`` entries that apply to every table.
    deny_columns: frozenset[str]
    write_tables: frozenset[str]
    # ``table.column`` entries; a table named in one is in allow-list mode: only its listed
    # columns are readable, and the denials still apply to them.
    allow_columns: frozenset[str] = frozenset()

    @classmethod
    def from_settings(cls, settings: BuiltinSettings) -> TablePolicy:
        return cls(
            read_tables=None if settings.read_tables is None else frozenset(settings.read_tables),
            deny_tables=frozenset(settings.deny_tables),
            deny_columns=frozenset(settings.deny_columns),
            write_tables=frozenset(settings.write_tables),
            allow_columns=frozenset(settings.allow_columns),
        )

    def can_read(self, table: str) -> bool:
        if table in self.deny_tables or is_sensitive_table(table) or is_nrllm_table(table):
            return False
        return self.read_tables is None or table in self.read_tables

    def can_write(self, table: str) -> bool:
        return table in self.write_tables and self.can_read(table)

    def can_read_column(self, table: str, column: str) -> bool:
        qualified = f"{table}.{column}"
        if column in self.deny_columns or qualified in self.deny_columns:
            return False
        if qualified not in self.allow_columns and self._allow_listed(table):
            return False
        return not is_sensitive_column(column)

    def _allow_listed(self, table: str) -> bool:
        return any(entry.startswith(f"{table}.") for entry in self.allow_columns)

    def readable_tables(self, tables: Iterable[str]) -> list[str]:
        return sorted(t for t in tables if self.can_read(t))

    def writable_tables(self, tables: Iterable[str]) -> list[str]:
        return sorted(t for t in tables if self.can_write(t))

"""detect-secrets as an oracle: over a corpus of realistic files, and over samples made from
every detect-secrets plugin's own patterns, every secret it reports is masked by
``nrllm_core.redact``."""

from __future__ import annotations

import base64
import json
import random
import re
import string
from collections.abc import Callable, Iterator
from pathlib import Path
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser as sre_parse  # type: ignore[attr-defined]
from typing import Any

import pytest
from detect_secrets import SecretsCollection
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.plugins import keyword
from detect_secrets.plugins.base import BasePlugin, RegexBasedDetector
from detect_secrets.plugins.high_entropy_strings import HighEntropyStringsPlugin
from detect_secrets.settings import transient_settings
from detect_secrets.util.filetype import determine_file_type

from nrllm_core.redact import mask_secrets

# Fake credentials are assembled from pieces so that no scanner of this repository mistakes
# this file for a leak; the corpus files are written at test time.
AWS_ID = "AKIA" + "Z7QK4RTX2MBN5WLC"
AWS_SECRET = "hK3f9Qx/2mLp8Rz" + "T5vW1yB7nC4dF6gJ0sA+eU"
GITHUB = "ghp_" + "R8mK2pQ9xL4vN7bT1zW5cY3hJ6fD0sA8gE2u"
STRIPE = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
SLACK = "xoxb-" + "2049375612-4811306792-Ht7Kq2mZ9pX4vL8nB3cR6wYe"
SLACK_HOOK = "https://hooks.slack.com/services/" + "T0ABC1234/B0DEF5678/Kq2mZ9pX4vL8nB3cR6wYeHt7"
SENDGRID = "SG." + "Ht7Kq2mZ9pX4vL8nB3cR6w" + "." + "Ye5Tg1Uj0Ik9Ol8Pm7Qn6Rb5Sc4Td3Ue2Vf1Wg0Xh9Yi"
JWT = "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiIsIm5hbWUiOiJBZGEifQ.Qm9ndXNTaWc"
OPENAI = "sk-" + "proj-Ht7Kq2mZ9pX4vL8nB3cR6wYeT5vW1yB7nC4dF6gJ0s"
MAILCHIMP = "f3a9c2e7b1d84a6f9e0c3b5a7d2e4f61" + "-us14"
NPM = "npm_" + "Ht7Kq2mZ9pX4vL8nB3cR6wYeT5vW1yB7nC4d"
TWILIO = "SK" + "2f9c4e7a1b3d5f8e0a6c9b2d4f7e1a3c"
GITLAB = "glpat-" + "Ht7Kq2mZ9pX4vL8nB3cR"
HUGGING = "hf_" + "HtKqmZpXvLnBcRwYeTvWyBnCdFgJsAeUkQ"
AZURE = (
    "Xq8vT2mK9pL4zR7wN1bY5cH3fJ6dG0sA" + "8gE2uV4iO7lP9kM1nB3cX5zQ7wE9rT1yU3iO5pA7sD9fG1hJ3kL5mN7=="
)
AZURE_CONNECTION = (
    f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE};EndpointSuffix=core.net"
)
BODY = [
    "MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi2aEXGQnPLc7ztk9mXrOJJQOXl",
    "q2kEeBeUPd0vL4Cw7cJdYo6N3hLPUaTn2P0wT4bWQ8eJ5ZxA1sX9kR6cF3mG2vD7",
    "yH8nM1qL0pK9jB5tV4rC6wE2uI7oA3sD5fG8hJ1kZ4xN6bM9vQ2wR5tY8uI1oP==",
]
PASSWORDS = [f"Zq8-hunter{n}-Wx4k" for n in range(40)]


def _corpus() -> dict[str, str]:
    pw = iter(PASSWORDS)
    return {
        "settings.py": f'''"""Deployment settings."""
import os

DEBUG = False
DATABASE = {{"ENGINE": "postgres", "NAME": "app", "USER": "app", "PASSWORD": "{next(pw)}"}}
SECRET_KEY = "{next(pw)}"
AWS_ACCESS_KEY_ID = "{AWS_ID}"
AWS_SECRET_ACCESS_KEY = "{AWS_SECRET}"
STRIPE_API_KEY = '{STRIPE}'
GITHUB_TOKEN = os.environ.get("GITHUB_TOKEN", "{GITHUB}")
client = OpenAI(api_key="{OPENAI}")
db = connect(host="db.internal", password="{next(pw)}")
headers = {{"Authorization": "Bearer {JWT}"}}
if password == "{next(pw)}":
    pass
''',
        "client.js": f"""// API client
const API_KEY = "{next(pw)}";
let dbPassword = "{next(pw)}";
const config = {{
  slackToken: "{SLACK}",
  webhook: "{SLACK_HOOK}",
  sendgrid: "{SENDGRID}",
  secret: '{next(pw)}',
}};
fetch(url, {{ headers: {{ "Authorization": "Basic dXNlcjp{next(pw)}" }} }});
module.exports = {{ mailchimpKey: "{MAILCHIMP}" }};
""",
        "Main.java": f"""package com.example;

public class Main {{
    private static final String PASSWORD = "{next(pw)}";
    private static final String DB_URL = "jdbc:postgresql://db:5432/app";
    private String apiKey = "{next(pw)}";
    private String twilioKey = "{TWILIO}";

    void connect() {{
        System.setProperty("db.password", "{next(pw)}");
        ds.setPassword("{next(pw)}");
    }}
}}
""",
        "config.php": f"""<?php
define('DB_PASSWORD', '{next(pw)}');
define('AUTH_KEY', '{next(pw)}');
$db_password = "{next(pw)}";
$config = [
    'secret' => '{next(pw)}',
    'api_key' => "{next(pw)}",
    'gitlab_token' => '{GITLAB}',
];
""",
        "main.go": f"""package main

const apiKey = "{next(pw)}"

func main() {{
	password := "{next(pw)}"
	client := New(Config{{Secret: "{next(pw)}", Token: "{HUGGING}"}})
	var dbPassword string = "{next(pw)}"
	_ = client
}}
""",
        ".env": f"""APP_ENV=production
DB_PASSWORD={next(pw)}
export SECRET_KEY={next(pw)}
NPM_TOKEN={NPM}
AWS_SECRET_ACCESS_KEY={AWS_SECRET}
MAILER_PASSWORD="{next(pw)}"
API_KEY='{next(pw)}'
""",
        "config.yaml": f"""database:
  host: db.internal
  password: {next(pw)}
  pwd: "{next(pw)}"
service:
  api_key: {next(pw)}
  client_secret: '{next(pw)}'
  private_key: {next(pw)}
  slack: {SLACK}
""",
        "appsettings.xml": f"""<?xml version="1.0" encoding="utf-8"?>
<configuration>
  <appSettings>
    <add key="ApiKey" value="{next(pw)}" />
    <add key="StorageConnection" value="{AZURE_CONNECTION}" />
  </appSettings>
  <connectionStrings>
    <add name="Main" connectionString="Server=db;Database=app;User Id=sa;Password={next(pw)};" />
  </connectionStrings>
  <smtp host="mail.internal" password="{next(pw)}" />
  <mailer>
    <password>{next(pw)}</password>
    <secret>{next(pw)}</secret>
  </mailer>
</configuration>
""",
        "connections.ini": f"""[database]
url = postgres://app:{next(pw)}@db.internal:5432/app
password = {next(pw)}
passwd = {next(pw)}

[azure]
connection = DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE}
sql = Server=tcp:db.example.net,1433;Initial Catalog=app;User ID=app;Password={next(pw)};
""",
        "deploy_key.pem": "\n".join(
            ["-----BEGIN RSA PRIVATE KEY-----", *BODY, "-----END RSA PRIVATE KEY-----", ""]
        ),
    }


def _every_plugin() -> list[dict[str, str]]:
    # Public IP addresses are not credentials; every other detector takes part, with the
    # high-entropy and keyword detectors, and no heuristic filter excuses a finding.
    return [
        {"name": plugin.__name__}
        for plugin in get_mapping_from_secret_type_to_class().values()
        if plugin.__name__ != "IPPublicDetector"
    ]


@pytest.fixture(scope="module")
def findings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[tuple[int, str, str]]]:
    folder = tmp_path_factory.mktemp("corpus")
    for name, text in _corpus().items():
        (folder / name).write_text(text, encoding="utf-8")
    found: dict[str, list[tuple[int, str, str]]] = {name: [] for name in _corpus()}
    with transient_settings({"plugins_used": _every_plugin(), "filters_used": []}):
        collection = SecretsCollection()
        for name in _corpus():
            collection.scan_file(str(folder / name))
    for filename, secret in collection:
        assert secret.secret_value is not None
        found[Path(filename).name].append((secret.line_number, secret.type, secret.secret_value))
    return found


def test_the_oracle_is_demanding(findings: dict[str, list[tuple[int, str, str]]]) -> None:
    types = {kind for found in findings.values() for _, kind, _ in found}

    assert all(findings.values()), "every corpus file holds secrets the oracle finds"
    assert {"Secret Keyword", "Base64 High Entropy String", "Private Key"} <= types
    assert sum(len(found) for found in findings.values()) >= 50


def test_no_planted_secret_survives_anywhere_in_the_corpus() -> None:
    # Stricter than the oracle, which reads none of the XML forms, for instance.
    planted = [*PASSWORDS, *BODY, AWS_ID, AWS_SECRET, GITHUB, STRIPE, SLACK, SENDGRID, JWT]
    planted += [OPENAI[3:], MAILCHIMP, NPM, TWILIO, GITLAB, HUGGING, AZURE, SLACK_HOOK[8:]]
    corpus = "\n".join(_corpus().values())
    planted = [secret for secret in planted if secret in corpus]
    masked = "\n".join(mask_secrets(text) for text in _corpus().values())

    assert len(planted) >= 50
    assert [secret for secret in planted if secret in masked] == []


@pytest.mark.parametrize("name", list(_corpus()))
def test_every_secret_the_oracle_reports_is_masked(
    name: str, findings: dict[str, list[tuple[int, str, str]]]
) -> None:
    lines = mask_secrets(_corpus()[name]).splitlines()

    leaks = [
        (number, kind, lines[number - 1])
        for number, kind, value in findings[name]
        if value in lines[number - 1]
    ]

    assert leaks == []


# --- every plugin, from its own patterns -----------------------------------------------------
#
# Each detect-secrets plugin is asked for samples: a pattern-based detector's patterns are
# walked (every branch of every alternation at least once, classes filled from a fixed
# random pool), the keyword detector's per-file-type patterns likewise, and a high-entropy
# detector's values are put under the names secrets go by. A plugin of any other kind fails
# the test until it is given samples, so a new detect-secrets plugin cannot slip past.

_ALPHABET = string.ascii_letters + string.digits
_POOL = "".join(random.Random(21).choices(_ALPHABET, k=8192))
# For classes that hold no letter or digit.
_PUNCTUATION = " =:-_/+.@\t\"'"
_CHARS = _ALPHABET + _PUNCTUATION
_MEMBERS: dict[str, set[str]] = {}
_CATEGORIES = {
    sre.CATEGORY_DIGIT: r"\d", sre.CATEGORY_NOT_DIGIT: r"\D", sre.CATEGORY_SPACE: r"\s",
    sre.CATEGORY_NOT_SPACE: r"\S", sre.CATEGORY_WORD: r"\w", sre.CATEGORY_NOT_WORD: r"\W",
}  # fmt: skip
_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT)


def _in_class(items: Any, char: str) -> bool:
    found, negate = False, False
    for op, value in items:
        if op is sre.NEGATE:
            negate = True
        elif op is sre.LITERAL:
            found |= char == chr(value)
        elif op is sre.RANGE:
            found |= value[0] <= ord(char) <= value[1]
        elif op is sre.CATEGORY:
            found |= re.fullmatch(_CATEGORIES[value], char) is not None
        else:
            raise AssertionError(f"no sample for class item {op}")
    return found != negate


class _Walk:
    """One sample of a parsed pattern: ``variant`` picks the branch of every alternation."""

    def __init__(self, variant: int) -> None:
        self.variant = variant
        self.at = variant * 97
        self.groups: dict[int, str] = {}

    def char(self, accepts: Callable[[str], bool]) -> str:
        accepted = {char for char in _ALPHABET if accepts(char)}
        if not accepted:
            return next(char for char in _PUNCTUATION if accepts(char))
        while _POOL[self.at % len(_POOL)] not in accepted:
            self.at += 1
        self.at += 1
        return _POOL[(self.at - 1) % len(_POOL)]

    def items(self, items: Any) -> str:
        return "".join(self.item(op, value) for op, value in items)

    def item(self, op: Any, value: Any) -> str:
        if op is sre.LITERAL:
            return chr(value)
        if op is sre.NOT_LITERAL:
            return self.char(lambda char: char != chr(value))
        if op is sre.ANY:
            # Patterns write ``.`` for a dot more often than for "anything".
            return "."
        if op is sre.IN:
            members = _MEMBERS.setdefault(repr(value), {c for c in _CHARS if _in_class(value, c)})
            return self.char(members.__contains__)
        if op is sre.BRANCH:
            return self.items(value[1][self.variant % len(value[1])])
        if op is sre.SUBPATTERN:
            text = self.items(value[3])
            if value[0] is not None:
                self.groups[value[0]] = text
            return text
        if op is sre.ATOMIC_GROUP:
            return self.items(value)
        if op in _REPEATS:
            low, high, pattern = value
            return "".join(self.items(pattern) for _ in range(self.count(low, high, pattern)))
        if op is sre.GROUPREF:
            return self.groups.get(value, "")
        if op in (sre.AT, sre.ASSERT, sre.ASSERT_NOT):
            return ""
        raise AssertionError(f"no sample for {op}")

    def count(self, low: int, high: int, pattern: Any) -> int:
        """Key-like classes run long (40, or 8 where optional); others once or not at all."""
        op, value = pattern[0] if len(pattern) == 1 else (None, None)
        wide = op is sre.NOT_LITERAL or (
            op is sre.IN and (_in_class(value, "a") or _in_class(value, "0"))
        )
        if low == high:
            return low
        if low == 0:
            return min(high, 8) if wide else self.variant % 2
        return max(low, min(high, 40 if wide else 1))


def _branches(items: Any) -> Iterator[int]:
    for op, value in items:
        if op is sre.BRANCH:
            yield len(value[1])
            for branch in value[1]:
                yield from _branches(branch)
        elif op is sre.SUBPATTERN:
            yield from _branches(value[3])
        elif op in _REPEATS:
            yield from _branches(value[2])


def _walked(pattern: re.Pattern[str], variant: int) -> str:
    return _Walk(variant).items(sre_parse.parse(pattern.pattern, pattern.flags))


def _samples(pattern: re.Pattern[str]) -> list[str]:
    parsed = sre_parse.parse(pattern.pattern, pattern.flags)
    variants = max([2, *_branches(parsed)])
    return sorted({_walked(pattern, variant) for variant in range(variants)})


def _jwt(claims: dict[str, str]) -> str:
    def part(value: dict[str, str]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'HS256', 'typ': 'JWT'})}.{part(claims)}.{_POOL[:43]}"


# Where a pattern alone cannot make a finding: a private key marker stands in its armour, and
# the JWT detector decodes what it finds.
_FRAMED: dict[str, Callable[[str], str]] = {
    "PrivateKeyDetector": lambda s: f"{s}: ssh-rsa" if s.startswith("PuTTY") else f"-----{s}-----",
}
_EXTRA: dict[str, list[str]] = {
    "JwtTokenDetector": [_jwt({"sub": "42"}), "Authorization: " + _jwt({"name": "Ada"})],
}
# The names high-entropy secrets go by, and the forms they are written in.
_SECRET_NAMES = (
    "signature", "sig", "salt", "secret", "token", "key", "auth", "credential", "passphrase",
)  # fmt: skip
# Extensions whose file types the keyword detector reads with different patterns.
_KEYWORD_EXTENSIONS = (
    ".txt", ".py", ".go", ".m", ".cs", ".cpp", ".java", ".js", ".yaml", ".ini", ".toml", ".cfg",
)  # fmt: skip


def _entropy_files(name: str, plugin: HighEntropyStringsPlugin) -> dict[str, str]:
    variants = iter(range(10_000))

    def quoted() -> str:
        return _walked(plugin.regex, next(variants))

    def bare() -> str:
        return quoted()[1:-1]

    return {
        f"{name}.py": "".join(
            f'{k} = {quoted()}\nconfig = {{"{k}": {quoted()}}}\ncall({k}={quoted()})\n'
            for k in _SECRET_NAMES
        ),
        f"{name}.yaml": "".join(f"{k}: {bare()}\n" for k in _SECRET_NAMES),
        f"{name}.ini": "[section]\n" + "".join(f"{k} = {bare()}\n" for k in _SECRET_NAMES),
        f"{name}.txt": "".join(
            f'--{k} {quoted()}\n{{\\"{k}\\": \\"{bare()}\\"}}\n"{k}={bare()}"\n'
            for k in _SECRET_NAMES
        ),
    }


def _plugin_files(plugin_class: type[BasePlugin]) -> dict[str, str]:
    name = plugin_class.__name__
    if issubclass(plugin_class, RegexBasedDetector):
        frame = _FRAMED.get(name, str)
        lines = [frame(s) for pattern in plugin_class.denylist for s in _samples(pattern)]
        return {f"{name}.txt": "\n".join([*lines, *_EXTRA.get(name, [])]) + "\n"}
    if issubclass(plugin_class, HighEntropyStringsPlugin):
        return _entropy_files(name, plugin_class())  # type: ignore[call-arg]
    if plugin_class is keyword.KeywordDetector:
        files = {}
        for extension in _KEYWORD_EXTENSIONS:
            table = keyword.REGEX_BY_FILETYPE.get(
                determine_file_type(f"x{extension}"),
                keyword.QUOTES_REQUIRED_DENYLIST_REGEX_TO_GROUP,
            )
            lines = [sample for pattern in table for sample in _samples(pattern)]
            files[f"{name}{extension}"] = "\n".join(lines) + "\n"
        return files
    raise AssertionError(f"no samples for the detect-secrets plugin {name}: give it some")


def _plugin_corpus() -> dict[str, str]:
    return {
        filename: text
        for plugin in get_mapping_from_secret_type_to_class().values()
        if plugin.__name__ != "IPPublicDetector"
        for filename, text in _plugin_files(plugin).items()
    }


# A detect-secrets finding: file name, line number, secret type and the value it reports.
Finding = tuple[str, int, str, str]


def _scan(folder: Path, files: dict[str, str]) -> set[Finding]:
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    with transient_settings({"plugins_used": _every_plugin(), "filters_used": []}):
        collection = SecretsCollection()
        for name in files:
            collection.scan_file(str(folder / name))
    return {
        (Path(filename).name, secret.line_number, secret.type, secret.secret_value or "")
        for filename, secret in collection
    }


@pytest.fixture(scope="module")
def plugin_corpus() -> dict[str, str]:
    return _plugin_corpus()


@pytest.fixture(scope="module")
def plugin_findings(
    tmp_path_factory: pytest.TempPathFactory, plugin_corpus: dict[str, str]
) -> tuple[set[Finding], set[Finding]]:
    masked = {name: mask_secrets(text) for name, text in plugin_corpus.items()}
    return (
        _scan(tmp_path_factory.mktemp("plugins"), plugin_corpus),
        _scan(tmp_path_factory.mktemp("masked"), masked),
    )


def test_every_plugin_finds_secrets_in_its_own_samples(
    plugin_findings: tuple[set[Finding], set[Finding]],
) -> None:
    found, _ = plugin_findings
    plugins = get_mapping_from_secret_type_to_class().values()
    expected = {plugin.secret_type for plugin in plugins if plugin.__name__ != "IPPublicDetector"}

    by_plugin = {
        kind for name, _, kind, _ in found for p in plugins
        if name.startswith(f"{p.__name__}.") and p.secret_type == kind
    }  # fmt: skip

    assert by_plugin == expected
    assert len(found) >= 500


def test_no_finding_of_any_plugin_survives_masking(
    plugin_corpus: dict[str, str], plugin_findings: tuple[set[Finding], set[Finding]]
) -> None:
    found, found_after_masking = plugin_findings
    corpus = plugin_corpus
    masked = {name: mask_secrets(text).splitlines() for name, text in corpus.items()}

    # A finding survives when the masked line still holds it, or detect-secrets still reports
    # it there. Some detectors report a pattern's first group (``ghp``, or nothing), which
    # ordinary text holds too: those count only through the second test.
    survivors = sorted(
        (name, number, kind, corpus[name].splitlines()[number - 1])
        for name, number, kind, value in found
        if (name, number, kind, value) in found_after_masking
        or (len(value) >= 8 and value in masked[name][number - 1])
    )

    assert survivors == []

"""detect-secrets as an oracle: over a corpus of realistic files, every secret it reports is
masked by ``nrllm_core.redact``."""

from __future__ import annotations

from pathlib import Path

import pytest
from detect_secrets import SecretsCollection
from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.settings import transient_settings

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

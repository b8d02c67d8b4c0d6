"""OpenAI-compatible gateways: an ``openai`` section's ``headers`` (each value read from an
environment variable) and ``query`` (added to every request's URL), checked at the load and
shown by ``nrllm config check`` without a secret."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest
from click.testing import CliRunner

from nrllm_core import (
    ChatMessage,
    ConfigError,
    ProviderAnswer,
    ProviderConfigError,
    ProviderError,
    load_config,
)
from nrllm_core.cli import _common, cli
from nrllm_core.providers import OpenAIProvider

HELLO = [ChatMessage.user("hi")]
KEY = "sk-gateway-secret-0123456789"
ORG = "org-hidden-value-42"


def azure(server_url: str, **extra: Any) -> dict[str, Any]:
    return {
        "providers": {
            "az": {
                "kind": "openai",
                "model": "m",
                "base_url": f"{server_url}/openai/deployments/d",
                "headers": {"api-key": "AZ_KEY", "X-Org": "AZ_ORG"},
                "query": {"api-version": "2024-10-21", "note": "a b&c=d/é"},
                **extra,
            }
        }
    }


def built(data: dict[str, Any], environ: dict[str, str]) -> OpenAIProvider:
    section = load_config(data=data).providers["az"].section()
    return OpenAIProvider.from_settings("az", section, environ=environ)


TARGET = "/openai/deployments/d/chat/completions?api-version=2024-10-21&note=a%20b%26c%3Dd%2F%C3%A9"


@pytest.mark.parametrize("call", ["complete", "stream", "acomplete"])
def test_a_gateway_gets_its_headers_from_the_environment_and_its_query_in_the_url(
    server, plain_answer, call
):
    server.answer(plain_answer("openai"))
    provider = built(azure(server.url), {"AZ_KEY": KEY, "AZ_ORG": ORG})

    async def acomplete() -> ProviderAnswer:
        try:
            return await provider.acomplete(HELLO, [])
        finally:
            await provider.aclose()

    if call == "complete":
        answer = provider.complete(HELLO, [])
    elif call == "stream":
        answer = provider.stream(HELLO, [], on_delta=lambda delta: None)
    else:
        answer = anyio.run(acomplete)
    provider.close()

    assert answer.content == "ok"
    assert server.targets == [TARGET]
    headers = server.headers[0]
    assert (headers["api-key"], headers["x-org"]) == (KEY, ORG)
    # No api_key_env: no Authorization header.
    assert "authorization" not in headers
    assert KEY not in repr(provider)
    assert KEY not in repr(provider._http)


def test_headers_go_beside_the_key_of_api_key_env(server, plain_answer):
    server.answer(plain_answer("openai"))
    data = azure(server.url, api_key_env="OPENAI_KEY", query={})
    provider = built(data, {"AZ_KEY": KEY, "AZ_ORG": ORG, "OPENAI_KEY": "sk-other"})

    provider.complete(HELLO, [])
    provider.close()

    assert server.targets == ["/openai/deployments/d/chat/completions"]
    assert server.headers[0]["authorization"] == "Bearer sk-other"
    assert server.headers[0]["api-key"] == KEY


def test_a_header_value_is_redacted_from_an_error_excerpt(server):
    server.answer({"error": {"message": f"bad key {KEY} for org {ORG}"}}, status=401)
    provider = built(azure(server.url), {"AZ_KEY": KEY, "AZ_ORG": ORG})

    with pytest.raises(ProviderError) as caught:
        provider.complete(HELLO, [])
    provider.close()

    assert "401" in str(caught.value)
    assert KEY not in str(caught.value)
    assert ORG not in str(caught.value)


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AZ_ORG": ORG}, 'provider "az": the api-key variable AZ_KEY is not set'),
        ({"AZ_KEY": "", "AZ_ORG": ORG}, 'provider "az": the api-key variable AZ_KEY is not set'),
        (
            {"AZ_KEY": f"{KEY}\n", "AZ_ORG": ORG},
            'provider "az": the api-key variable AZ_KEY holds what a header cannot carry',
        ),
        (
            {"AZ_KEY": KEY, "AZ_ORG": "orgé"},
            'provider "az": the X-Org variable AZ_ORG holds what a header cannot carry',
        ),
    ],
)
def test_a_header_variable_missing_or_unsendable_is_refused_by_name(environ, message):
    with pytest.raises(ProviderConfigError) as caught:
        built(azure("http://127.0.0.1:9"), environ)

    assert str(caught.value).startswith(message)
    assert KEY not in str(caught.value)
    assert "orgé" not in str(caught.value)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"headers": {"api key": "AZ_KEY"}},
            "providers.az.headers: 'api key' is not a header name",
        ),
        ({"headers": {"": "AZ_KEY"}}, "providers.az.headers: '' is not a header name"),
        ({"headers": {"api-key": 5}}, "providers.az.headers.api-key: expected a string"),
        ({"headers": "AZ_KEY"}, "providers.az.headers: expected a table"),
        (
            {"headers": {"Content-Type": "CT"}},
            "providers.az.headers.Content-Type: is written by the HTTP client",
        ),
        ({"headers": {"host": "H"}}, "providers.az.headers.host: is written by the HTTP client"),
        (
            {"headers": {"Authorization": "TOKEN"}, "api_key_env": "OPENAI_KEY"},
            "providers.az.headers.Authorization: is sent with the key of api_key_env",
        ),
        (
            {"headers": {"api-key": "A", "API-Key": "B"}},
            "providers.az.headers.API-Key: repeats api-key (header names ignore case)",
        ),
        (
            {"headers": {"api-key": KEY}},
            "providers.az.headers.api-key: must name an environment variable",
        ),
        ({"query": {"api-version": 2024}}, "providers.az.query.api-version: expected a string"),
        ({"query": {"": "x"}}, "providers.az.query: a parameter's name must not be empty"),
        ({"base_url": ""}, "providers.az.base_url: must not be empty"),
        ({"api_key_env": ""}, "providers.az.api_key_env: must not be empty"),
    ],
)
def test_a_bad_header_or_query_is_refused_at_the_load(extra, message):
    data = {"providers": {"az": {"kind": "openai", "model": "m", **extra}}}

    with pytest.raises(ConfigError) as caught:
        load_config(data=data)

    assert message in str(caught.value)
    # A key pasted where a variable's name belongs is never repeated.
    assert KEY not in str(caught.value)


def test_authorization_is_a_header_of_its_own_without_api_key_env(server, plain_answer):
    server.answer(plain_answer("openai"))
    data = {"providers": {"az": {"kind": "openai", "model": "m", "base_url": server.url}}}
    data["providers"]["az"]["headers"] = {"Authorization": "GATEWAY_AUTH"}

    provider = built(data, {"GATEWAY_AUTH": "Basic dXNlcjpwYXNz"})
    provider.complete(HELLO, [])
    provider.close()

    assert server.headers[0]["authorization"] == "Basic dXNlcjpwYXNz"


def test_config_check_shows_each_url_and_the_names_of_its_variables_never_a_value(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    for variable in ("AZ_KEY", "OPENROUTER_API_KEY", "OR_TITLE"):
        monkeypatch.setenv(variable, f"{KEY}-{variable}")
    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: __import__("nrllm_core").make_plugin_manager(load_entry_points=False),
    )
    config = tmp_path / "nrllm.toml"
    config.write_text(
        textwrap.dedent(
            """
            [providers.azure]
            kind = "openai"
            model = "gpt-4o"
            base_url = "https://res.openai.azure.com/openai/deployments/gpt-4o/"
            headers = { "api-key" = "AZ_KEY" }
            query = { "api-version" = "2024-10-21" }

            [providers.router]
            kind = "openai"
            model = "openai/gpt-4o"
            base_url = "https://openrouter.ai/api/v1"
            api_key_env = "OPENROUTER_API_KEY"
            headers = { "X-Title" = "OR_TITLE" }

            [providers.local]
            kind = "openai"
            model = "llama3.1"
            base_url = "http://user:hunter2@127.0.0.1:11434/v1"
            """
        ),
        encoding="utf-8",
    )

    result = CliRunner().invoke(cli, ["--config", str(config), "config", "check"])

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        "provider azure url: "
        "https://res.openai.azure.com/openai/deployments/gpt-4o/chat/completions"
        "?api-version=2024-10-21"
    ) in lines
    assert "provider azure environment: AZ_KEY (api-key)" in lines
    assert (
        'provider azure openai settings: {"headers":{"api-key":"AZ_KEY"},'
        '"query":{"api-version":"2024-10-21"}}'
    ) in lines
    assert "provider router url: https://openrouter.ai/api/v1/chat/completions" in lines
    assert (
        "provider router environment: OPENROUTER_API_KEY (authorization), OR_TITLE (X-Title)"
    ) in lines
    assert "provider local url: http://user:***@127.0.0.1:11434/v1/chat/completions" in lines
    assert "provider local environment: -" in lines
    assert not re.search(f"{KEY}|hunter2", result.output)


DOCS = Path(__file__).parents[2] / "docs" / "reference" / "providers.md"


def test_the_documented_gateways_load_and_config_check_prints_what_the_docs_show(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
):
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: __import__("nrllm_core").make_plugin_manager(load_entry_points=False),
    )
    section = DOCS.read_text(encoding="utf-8").split("### Gateways", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    shown = section.split("besides its settings; it reads no variable:\n\n```\n", 1)[1]
    config = tmp_path / "nrllm.toml"
    config.write_text(example, encoding="utf-8")

    result = CliRunner().invoke(cli, ["--config", str(config), "config", "check"])

    assert result.exit_code == 0, result.output
    assert sorted(load_config(path=config).providers) == ["azure", "ollama", "router", "vllm"]
    for line in shown.split("```", 1)[0].splitlines():
        assert line in result.stdout.splitlines()


def test_an_api_key_a_header_cannot_carry_is_refused_at_the_build_by_name():
    # A key read from a file often keeps its newline; it would fail only at the request.
    from nrllm_core.providers import AnthropicProvider

    section = {"model": "m", "api_key_env": "OPENAI_KEY"}
    with pytest.raises(ProviderConfigError) as openai:
        OpenAIProvider.from_settings("gpt", section, environ={"OPENAI_KEY": f"{KEY}\n"})
    with pytest.raises(ProviderConfigError) as anthropic:
        AnthropicProvider.from_settings("c", {"model": "m"}, environ={"ANTHROPIC_API_KEY": " k"})

    assert "the API key variable OPENAI_KEY holds what a header cannot carry" in str(openai.value)
    assert "ANTHROPIC_API_KEY holds what a header cannot carry" in str(anthropic.value)
    assert KEY not in str(openai.value)

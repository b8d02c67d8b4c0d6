"""Provider settings in the configuration: request fields, params, the checks every command
shares, the empty prompt, and what the command line shows of an answer."""

from __future__ import annotations

import datetime
import json
import re
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice
from openai.types.completion_usage import PromptTokensDetails

from nrllm_core import ChatMessage, ConfigError, Host, ProviderConfigError, load_config
from nrllm_core._manager import PluginManager
from nrllm_core.cli import _common, cli
from nrllm_core.providers import AnthropicProvider, OpenAIProvider

HELLO = [ChatMessage.user("hi")]


def completion(content: str, finish: Any = "stop", cached: int = 0) -> str:
    return ChatCompletion(
        id="c",
        object="chat.completion",
        created=1,
        model="m",
        choices=[
            Choice(
                index=0,
                finish_reason=finish,
                message=ChatCompletionMessage(role="assistant", content=content),
            )
        ],
        usage=CompletionUsage(
            prompt_tokens=50,
            completion_tokens=5,
            total_tokens=55,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        ),
    ).model_dump_json()


# -- request settings ----------------------------------------------------------------------------


def test_temperature_and_max_tokens_are_accepted_and_sent(server, openai_oracle):
    config = load_config(
        data={"providers": {"gpt": {"kind": "openai", "temperature": 0.2, "max_tokens": 300}}}
    )
    assert (config.providers["gpt"].temperature, config.providers["gpt"].max_tokens) == (0.2, 300)
    settings = {"model": "m", "base_url": f"{server.url}/v1", "temperature": 0.2}
    server.answer(completion("ok"))

    OpenAIProvider.from_settings("gpt", settings | {"max_tokens": 300}, environ={}).complete(
        HELLO, []
    )

    openai_oracle(server.bodies[0])
    assert (server.bodies[0]["temperature"], server.bodies[0]["max_tokens"]) == (0.2, 300)


def test_openai_sends_max_completion_tokens_alone(server, openai_oracle):
    settings = {"model": "o4-mini", "base_url": f"{server.url}/v1", "max_completion_tokens": 800}
    server.answer(completion("ok"))

    OpenAIProvider.from_settings("o", settings, environ={}).complete(HELLO, [])

    openai_oracle(server.bodies[0])
    assert server.bodies[0]["max_completion_tokens"] == 800
    assert "max_tokens" not in server.bodies[0]


def test_max_tokens_and_max_completion_tokens_together_are_refused():
    both = {"kind": "openai", "max_tokens": 1, "max_completion_tokens": 2}
    with pytest.raises(ConfigError, match=r"providers\.o: set max_tokens or max_completion_tokens"):
        load_config(data={"providers": {"o": both}})
    with pytest.raises(ProviderConfigError, match="not both"):
        OpenAIProvider.from_settings("o", both | {"model": "m"}, environ={})


def test_anthropic_refuses_max_completion_tokens():
    with pytest.raises(ProviderConfigError, match="max_completion_tokens"):
        AnthropicProvider.from_settings(
            "c", {"model": "m", "max_completion_tokens": 5}, environ={"ANTHROPIC_API_KEY": "k"}
        )


def test_params_are_sent_as_they_are(server, openai_oracle, anthropic_oracle, plain_answer):
    openai_params = {"top_p": 0.9, "seed": 7, "parallel_tool_calls": False}
    config = load_config(data={"providers": {"gpt": {"kind": "openai", "params": openai_params}}})
    assert dict(config.providers["gpt"].params) == openai_params
    anthropic_params = {
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "metadata": {"user_id": "u-1"},
        "stop_sequences": ["ENDE"],
    }
    server.answer(completion("ok"), plain_answer("anthropic"))

    gpt = {"model": "m", "base_url": f"{server.url}/v1", "params": openai_params}
    OpenAIProvider.from_settings("gpt", gpt, environ={}).complete(HELLO, [])
    claude = {"model": "m", "base_url": server.url, "params": anthropic_params}
    AnthropicProvider.from_settings("claude", claude, environ={"ANTHROPIC_API_KEY": "k"}).complete(
        HELLO, []
    )

    sent_openai, sent_anthropic = server.bodies
    openai_oracle(sent_openai)
    anthropic_oracle(sent_anthropic)
    assert {k: sent_openai[k] for k in openai_params} == openai_params
    assert {k: sent_anthropic[k] for k in anthropic_params} == anthropic_params


ANTHROPIC_REFUSED = {
    "max-completion-tokens": (
        {"max_completion_tokens": 5},
        "max_completion_tokens",
        "is OpenAI's; the Messages API takes max_tokens",
    ),
    "budget-at-max-tokens": (
        {"max_tokens": 2048, "params": {"thinking": {"type": "enabled", "budget_tokens": 2048}}},
        "params.thinking.budget_tokens",
        r"must be less than max_tokens \(2048\)",
    ),
    "budget-above-the-default-max-tokens": (
        {"params": {"thinking": {"type": "enabled", "budget_tokens": 8000}}},
        "params.thinking.budget_tokens",
        r"must be less than max_tokens \(4096\)",
    ),
    "budget-below-the-minimum": (
        {"params": {"thinking": {"type": "enabled", "budget_tokens": 512}}},
        "params.thinking.budget_tokens",
        "must be at least 1024",
    ),
    "budget-no-integer": (
        {"params": {"thinking": {"type": "enabled", "budget_tokens": "2048"}}},
        "params.thinking.budget_tokens",
        "must be an integer",
    ),
    "stream-options": (
        {"params": {"stream_options": {"include_usage": True}}},
        "params.stream_options",
        "belongs to streaming, which the adapter owns",
    ),
}


@pytest.mark.parametrize("case", sorted(ANTHROPIC_REFUSED))
def test_what_the_messages_api_refuses_is_refused_by_every_check(case, tmp_path):
    section, key, problem = ANTHROPIC_REFUSED[case]
    data = {"providers": {"claude": {"kind": "anthropic", **section}}}
    where = rf"providers\.claude\.{re.escape(key)}: {problem}"

    with pytest.raises(ConfigError, match=where):
        load_config(data=data)
    with pytest.raises(ConfigError, match=where):
        Host.from_config(data=data, load_entry_points=False, data_dir=tmp_path)
    with pytest.raises(
        ProviderConfigError, match=rf'^provider "claude": {re.escape(key)} {problem}'
    ):
        AnthropicProvider.from_settings(
            "claude", {"model": "m", **section}, environ={"ANTHROPIC_API_KEY": "k"}
        )


def test_a_thinking_budget_below_max_tokens_is_sent(server, anthropic_oracle, plain_answer):
    thinking = {"type": "enabled", "budget_tokens": 4095}
    settings = {"model": "m", "base_url": server.url, "params": {"thinking": thinking}}
    assert load_config(data={"providers": {"c": {"kind": "anthropic", **settings}}})
    server.answer(plain_answer("anthropic"))

    AnthropicProvider.from_settings("c", settings, environ={"ANTHROPIC_API_KEY": "k"}).complete(
        HELLO, []
    )

    anthropic_oracle(server.bodies[0])
    assert (server.bodies[0]["thinking"], server.bodies[0]["max_tokens"]) == (thinking, 4096)


def test_openai_params_may_not_set_stream_options():
    data = {"providers": {"gpt": {"kind": "openai", "params": {"stream_options": {}}}}}
    with pytest.raises(ConfigError, match=r"params\.stream_options: belongs to streaming"):
        load_config(data=data)
    with pytest.raises(ProviderConfigError, match=r"params\.stream_options belongs to streaming"):
        OpenAIProvider.from_settings("gpt", {"model": "m", **data["providers"]["gpt"]}, environ={})


@pytest.mark.parametrize("key", ["model", "messages", "system", "tools", "tool_choice", "stream"])
def test_params_may_not_set_what_the_adapter_writes(key):
    data = {"providers": {"gpt": {"kind": "openai", "params": {key: "x"}}}}
    with pytest.raises(ConfigError, match=rf"providers\.gpt\.params\.{key}: is written by"):
        load_config(data=data)
    with pytest.raises(ProviderConfigError, match=rf"params\.{key} is written by"):
        OpenAIProvider.from_settings("gpt", {"model": "m", "params": {key: "x"}}, environ={})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (datetime.date(2026, 1, 1), "must be a JSON value"),
        ({"deep": [datetime.time(1, 2)]}, "must be a JSON value"),
        (float("nan"), "must be a JSON value"),
    ],
)
def test_params_must_be_json(value, problem):
    with pytest.raises(ConfigError, match=rf"providers\.gpt\.params\.when: {problem}"):
        load_config(data={"providers": {"gpt": {"kind": "openai", "params": {"when": value}}}})


def test_params_do_not_repeat_a_setting_of_their_own():
    data = {"providers": {"gpt": {"kind": "openai", "params": {"temperature": 1}}}}
    with pytest.raises(ConfigError, match=r"params\.temperature: has its own setting"):
        load_config(data=data)


def test_params_in_a_toml_file(tmp_path):
    path = tmp_path / "nrllm.toml"
    path.write_text(
        '[providers.gpt]\nkind = "openai"\ntemperature = 0\n'
        '[providers.gpt.params]\nseed = 1\nreasoning_effort = "low"\n'
        "when = 2026-01-01\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"providers\.gpt\.params\.when: must be a JSON value"):
        load_config(path)


# -- the command line ---------------------------------------------------------------------------


@pytest.fixture
def cli_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], Path]:
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)

    def plugin_manager(**_: object) -> PluginManager:
        from nrllm_core import make_plugin_manager

        return make_plugin_manager(load_entry_points=False)

    monkeypatch.setattr(_common, "plugin_manager", plugin_manager)

    def write(text: str) -> Path:
        path = tmp_path / "conf" / "nrllm.toml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


def nrllm(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args])


def test_config_check_shows_the_merged_request_settings(cli_home):
    config = cli_home(
        """
        [providers.gpt]
        kind = "openai"
        temperature = 0.5
        max_completion_tokens = 900
        [providers.gpt.params]
        top_p = 0.9
        parallel_tool_calls = false
        [providers.plain]
        kind = "openai"
        """
    )

    result = nrllm(config, "config", "check")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        'provider gpt request: {"temperature":0.5,"max_completion_tokens":900,'
        '"top_p":0.9,"parallel_tool_calls":false}'
    ) in lines
    assert "provider plain request: -" in lines


BROKEN = {
    "anthropic-max-completion-tokens": (
        '[providers.claude]\nkind = "anthropic"\nmax_completion_tokens = 900\n',
        "providers.claude.max_completion_tokens: is OpenAI's; the Messages API takes max_tokens",
    ),
    "stream-options": (
        '[providers.gpt]\nkind = "openai"\n[providers.gpt.params]\n'
        "stream_options = { include_usage = false }\n",
        "providers.gpt.params.stream_options: belongs to streaming, which the adapter owns",
    ),
    "thinking-budget": (
        '[providers.claude]\nkind = "anthropic"\nmax_tokens = 2048\n'
        '[providers.claude.params]\nthinking = { type = "enabled", budget_tokens = 2048 }\n',
        "providers.claude.params.thinking.budget_tokens: must be less than max_tokens (2048)",
    ),
    "unknown-kind": (
        '[providers.odd]\nkind = "weird"\n',
        'providers.odd.kind: unknown kind "weird"',
    ),
    "no-script": (
        '[providers.demo]\nkind = "scripted"\n',
        'providers.demo.script: provider "demo": "script" must name a script file',
    ),
    "missing-script": (
        '[providers.demo]\nkind = "scripted"\nscript = "gone.toml"\n',
        'providers.demo.script: provider "demo": the script gone.toml cannot be read',
    ),
    "invalid-script": (
        '[providers.demo]\nkind = "scripted"\nscript = "bad.toml"\n',
        'providers.demo.script: provider "demo": the script bad.toml needs a list "turns"',
    ),
}
COMMANDS = [
    ["config", "check"],
    ["tools"],
    ["run", "hello"],
    ["runs"],
    ["invoke", "anything"],
    ["purge"],
]


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_provider_section_fails_every_command_alike(case, cli_home, tmp_path):
    text, expected = BROKEN[case]
    config = cli_home(text)
    (config.parent / "bad.toml").write_text('turns = "no"\n', encoding="utf-8")

    results = [nrllm(config, *command) for command in COMMANDS]

    assert [r.exit_code for r in results] == [2] * len(COMMANDS)
    messages = {r.stderr for r in results}
    assert len(messages) == 1
    (message,) = messages
    assert message.startswith(f"Error: invalid configuration: {config}: {expected}")
    # Refused before anything opened the store: no run was recorded as failed.
    assert not (tmp_path / "home").exists()


def test_host_from_config_refuses_an_unknown_kind(tmp_path):
    with pytest.raises(ConfigError, match=r'providers\.odd\.kind: unknown kind "weird"'):
        Host.from_config(
            data={"providers": {"odd": {"kind": "weird"}}},
            load_entry_points=False,
            data_dir=tmp_path,
        )


@pytest.mark.parametrize("prompt", ["", "   ", "\n\t"])
def test_an_empty_prompt_is_refused_before_any_request(prompt, cli_home, server, tmp_path):
    config = cli_home(
        f'[providers.gpt]\nkind = "openai"\nmodel = "m"\nbase_url = "{server.url}/v1"\n'
    )

    result = nrllm(config, "run", "--provider", "gpt", prompt)

    assert result.exit_code == 2
    assert "the prompt is empty" in result.stderr
    host = Host.from_config(config, load_entry_points=False, data_dir=tmp_path / "home")
    with pytest.raises(ValueError, match="the prompt is empty"):
        host.run(prompt, provider="gpt")
    assert server.bodies == []
    assert host.runs() == []


def test_run_json_and_the_runs_view_show_truncation_and_billed_tokens(cli_home, server):
    config = cli_home(
        f'[defaults]\nprovider = "gpt"\n'
        f'[providers.gpt]\nkind = "openai"\nmodel = "m"\nbase_url = "{server.url}/v1"\n'
    )
    server.answer(completion("Die Antwort ist", finish="length", cached=32))

    ran = nrllm(config, "run", "--json", "hallo")

    assert ran.exit_code == 0, ran.output
    outcome = json.loads(ran.stdout)
    assert (outcome["status"], outcome["termination_reason"]) == ("completed", "truncated")
    assert outcome["truncated"] is True
    assert outcome["usage"] == {
        "prompt_tokens": 50,
        "completion_tokens": 5,
        "cached_tokens": 32,
        "reasoning_tokens": 0,
    }
    shown = nrllm(config, "runs", "show", outcome["run_id"], "--json")
    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.stdout)
    assert view["truncated"] is True
    assert view["usage"] == outcome["usage"]
    text = nrllm(config, "runs", "show", outcome["run_id"]).stdout.splitlines()
    assert text[1] == (
        "  usage: prompt_tokens 50, completion_tokens 5, cached_tokens 32, reasoning_tokens 0;"
        " truncated: true"
    )


# -- a loaded section builds as written ----------------------------------------------------------


def test_a_loaded_section_without_base_url_or_api_key_env_takes_the_defaults():
    # A loaded section carries every core key, None where the file set none: None is unset.
    config = load_config(
        data={"providers": {"gpt": {"kind": "openai"}, "claude": {"kind": "anthropic"}}}
    )
    gpt = OpenAIProvider.from_settings(
        "gpt", config.providers["gpt"].section() | {"model": "m"}, environ={}
    )
    claude = AnthropicProvider.from_settings(
        "claude",
        config.providers["claude"].section() | {"model": "m"},
        environ={"ANTHROPIC_API_KEY": "k"},
    )

    assert gpt._http.url == "https://api.openai.com/v1/chat/completions"
    assert claude._http.url == "https://api.anthropic.com/v1/messages"
    assert claude._http.headers["x-api-key"] == "k"


def test_params_that_are_not_a_table_are_refused_by_key():
    with pytest.raises(
        ConfigError, match=r"providers\.gpt\.params: expected a table, got a string"
    ):
        load_config(data={"providers": {"gpt": {"kind": "openai", "params": "top_p"}}})

"""The ``bedrock`` kind as a host meets it: registered by its entry point, its settings in
``[providers.NAME]`` and its check, a governed run with an approval, and what it loads."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import nrllm_bedrock
from nrllm_bedrock import BedrockProvider, BedrockSettings
from nrllm_bedrock._settings import INFERENCE_PARAMS, PARAMS, WRITTEN, bedrock_check
from nrllm_core import (
    ConfigError,
    DataClass,
    Effect,
    Host,
    ProviderConfigError,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    load_config,
    make_plugin_manager,
)

ROOT = Path(__file__).resolve().parents[3]
MODEL = "anthropic.claude-sonnet-4-v1:0"
KEY = "ABSKQmVkcm9ja0FQSUtleS10ZXN0"
SIGNATURE = "EqQBCkYIARgCIkD-signed-reasoning"


def kinds() -> Any:
    return make_plugin_manager(plugins=[nrllm_bedrock], load_entry_points=False).provider_registry()


def section(**keys: Any) -> dict[str, Any]:
    return {"providers": {"p": {"kind": "bedrock", "model": MODEL, **keys}}}


# -- registration and settings --------------------------------------------------------------------


def test_the_entry_point_registers_the_kind_with_its_check_and_settings():
    registry = make_plugin_manager(load_entry_points=True).provider_registry()
    kind = registry.kind("bedrock")
    assert kind is not None
    assert (kind.factory, kind.check, kind.settings) == (
        BedrockProvider.factory,
        bedrock_check,
        BedrockSettings,
    )


def test_region_and_endpoint_url_are_the_kinds_own_keys():
    config = load_config(
        data=section(region="eu-central-1", endpoint_url="https://vpce.example"),
        provider_kinds=kinds().registered,
    )
    assert config.providers["p"].options == BedrockSettings(
        region="eu-central-1", endpoint_url="https://vpce.example"
    )


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"region": "eu-central-1", "zone": "x"}, "providers.p.zone: unknown key"),
        ({"region": 5}, "providers.p.region: expected a string, got an integer"),
        ({"options": {"region": "x"}}, "providers.p.options: unknown key"),
        ({}, "providers.p.region: must be set (or endpoint_url)"),
        ({"region": "Europe"}, "providers.p.region: must be an AWS region's name"),
        ({"region": "us-east-1", "temperature": 1.5}, "temperature: must be between 0 and 1"),
        ({"region": "us-east-1", "max_completion_tokens": 9}, "is OpenAI's"),
        ({"region": "us-east-1", "params": {"topK": 5}}, "params.topK: is no Converse request"),
        ({"region": "us-east-1", "params": {"toolConfig": {}}}, "written by the adapter"),
        (
            {"region": "us-east-1", "params": {"inferenceConfig": {"maxTokens": 5}}},
            "params.inferenceConfig.maxTokens: has its own setting: set it as max_tokens",
        ),
        (
            {"region": "us-east-1", "params": {"inferenceConfig": {"topP": 2}}},
            "params.inferenceConfig.topP: must be a number between 0 and 1",
        ),
        ({"endpoint_url": "vpce.example"}, "providers.p.endpoint_url: must be an http(s) URL"),
    ],
)
def test_what_the_api_or_the_endpoint_refuses_is_refused_at_load(keys, message):
    with pytest.raises(ConfigError, match=re_escape(message)):
        load_config(data=section(**keys), provider_kinds=kinds().registered)


def re_escape(text: str) -> str:
    import re

    return re.escape(text)


def test_without_the_plugin_its_keys_are_unknown():
    with pytest.raises(ConfigError, match=r"providers\.p\.region: unknown key"):
        load_config(data={"providers": {"p": {"kind": "openai", "region": "us-east-1"}}})


def test_the_params_fields_are_the_converse_requests_own():
    import botocore.session

    service = botocore.session.get_session().get_service_model("bedrock-runtime")
    shape = service.operation_model("Converse").input_shape
    assert set(shape.members) == PARAMS | WRITTEN
    assert set(shape.members["inferenceConfig"].members) == INFERENCE_PARAMS | {
        "maxTokens",
        "temperature",
    }


def test_the_endpoint_is_the_regions_unless_told_otherwise():
    def url(**keys: Any) -> str:
        options = BedrockSettings(**{k: keys.pop(k) for k in list(keys) if k != "base_url"})
        provider = BedrockProvider.from_settings(
            "p",
            {"model": MODEL, "options": options, **keys},
            environ={"AWS_BEARER_TOKEN_BEDROCK": KEY},
        )
        # Where it would post: nothing is sent.
        return provider._http.url

    escaped = MODEL.replace(":", "%3A")
    assert url(region="eu-west-3") == (
        f"https://bedrock-runtime.eu-west-3.amazonaws.com/model/{escaped}/converse"
    )
    assert (
        url(endpoint_url="https://vpce-1.example/")
        == f"https://vpce-1.example/model/{escaped}/converse"
    )
    assert url(region="eu-west-3", base_url="http://127.0.0.1:9") == (
        f"http://127.0.0.1:9/model/{escaped}/converse"
    )


def test_signing_needs_a_region():
    with pytest.raises(ProviderConfigError, match="region must be set to sign requests"):
        BedrockProvider.from_settings(
            "p",
            {"model": MODEL, "options": BedrockSettings(endpoint_url="https://vpce.example")},
            environ={},
        )


# -- a governed run -------------------------------------------------------------------------------


class Lookup(Tool):
    name = "lookup"
    description = "Find a page by its title."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"q": {"type": "string"}},
        "required": ["q"],
    }

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text(f"Seite {arguments['q']} gefunden")


class WriteNote(Tool):
    name = "write_note"
    description = "Write a note."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    effect = Effect.NON_IDEMPOTENT_WRITE
    requires_approval = True
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"text": {"type": "string"}},
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult.text("noted")


class Tools:
    def __init__(self, *tools: Tool) -> None:
        self.tools = tools

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        for t in self.tools:
            registry.register(t)


def make_host(tmp_path: Path, server: Any, *tools: Tool, privacy: str = "full") -> Host:
    provider = {
        "kind": "bedrock",
        "model": MODEL,
        "trust_zone": "local",
        "region": "eu-central-1",
        "base_url": server.url,
    }
    return Host.from_config(
        data={
            "providers": {"model": provider},
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
            "privacy": {"level": privacy},
        },
        plugins=[nrllm_bedrock, Tools(*tools)],
        load_entry_points=False,
        data_dir=tmp_path / "home",
        environ={"AWS_BEARER_TOKEN_BEDROCK": KEY},
    )


def reply(*blocks: dict[str, Any], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": list(blocks)}},
        "stopReason": stop,
        "usage": {"inputTokens": 20, "outputTokens": 5, "totalTokens": 25},
        "metrics": {"latencyMs": 3},
    }


THINKING = {"reasoningContent": {"reasoningText": {"text": "Notieren.", "signature": SIGNATURE}}}
CALLING = reply(
    THINKING,
    {"toolUse": {"toolUseId": "tooluse_w1", "name": "write_note", "input": {"text": "Grüße"}}},
    stop="tool_use",
)


def test_a_suspended_turn_goes_back_with_its_reasoning_after_approval(tmp_path, server, oracle):
    note = WriteNote()
    server.answer(CALLING, reply({"text": "Fertig."}))
    host = make_host(tmp_path, server, note)
    suspended = host.run("Schreib eine Notiz.")
    assert suspended.status == "awaiting_approval"

    outcome = host.approve(
        suspended.run_id, approve=True, approver="alice", turn_digest=suspended.turn_digest
    )

    assert (outcome.status, outcome.final_content) == ("completed", "Fertig.")
    assert note.calls == [{"text": "Grüße"}]
    for body in server.bodies:
        oracle.validate(MODEL, body)
    sent = server.bodies[1]["messages"]
    assert sent[1] == {"role": "assistant", "content": CALLING["output"]["message"]["content"]}
    assert sent[2] == {
        "role": "user",
        "content": [{"toolResult": {"toolUseId": "tooluse_w1", "content": [{"text": "noted"}]}}],
    }
    assert [h["authorization"] for h in server.headers] == [f"Bearer {KEY}"] * 2


@pytest.mark.parametrize("level", ["none", "metadata", "redacted", "full"])
def test_reasoning_reaches_the_audit_only_at_full(level, tmp_path, server):
    server.answer(
        reply(
            THINKING,
            {"toolUse": {"toolUseId": "tooluse_l1", "name": "lookup", "input": {"q": "a"}}},
            stop="tool_use",
        ),
        reply({"text": "Fertig."}),
    )
    host = make_host(tmp_path, server, Lookup(), privacy=level)
    run_id = host.run("Such.").run_id
    detail = host.store.get_run(run_id)
    host.store.close()
    assert detail is not None
    recorded = json.dumps([s.payload for s in detail.steps])
    assert (SIGNATURE in recorded) is (level == "full")
    assert KEY not in recorded


# -- what loads what ------------------------------------------------------------------------------


def test_core_never_imports_the_plugin_or_botocore():
    for path in (ROOT / "nrllm_core").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.startswith(("nrllm_bedrock", "botocore")) for n in names), path


def test_importing_the_plugin_and_building_a_provider_loads_neither_botocore_nor_httpx():
    code = (
        "import sys, nrllm_bedrock\n"
        "from nrllm_bedrock import BedrockProvider, BedrockSettings\n"
        "BedrockProvider.from_settings('b', {'model': 'm', 'options': "
        "BedrockSettings(region='us-east-1')}, environ={})\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('botocore', 'httpx')))\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert loaded.strip() == "[]"


# -- nrllm config check ---------------------------------------------------------------------------


@pytest.fixture
def config_check(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from nrllm_core.cli import _common, cli

    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: make_plugin_manager(plugins=[nrllm_bedrock], load_entry_points=False),
    )

    def check(text: str) -> Any:
        config = tmp_path / "nrllm.toml"
        config.write_text(text, encoding="utf-8")
        return CliRunner().invoke(cli, ["--config", str(config), "config", "check"])

    return check


def test_config_check_prints_the_settings_the_url_and_the_variables(config_check):
    result = config_check(
        '[providers.claude]\nkind = "bedrock"\nmodel = "eu.anthropic.claude-v1:0"\n'
        'region = "eu-central-1"\n\n'
        '[providers.vpc]\nkind = "bedrock"\nmodel = "amazon.nova-pro-v1:0"\nregion = "us-east-1"\n'
        'endpoint_url = "https://vpce.example"\napi_key_env = "NOVA_KEY"\n'
    )

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert (
        'provider claude bedrock settings: {"region":"eu-central-1","endpoint_url":null}' in lines
    )
    assert (
        "provider claude url: https://bedrock-runtime.eu-central-1.amazonaws.com/model/"
        "eu.anthropic.claude-v1%3A0/converse"
    ) in lines
    assert (
        "provider claude environment: AWS_BEARER_TOKEN_BEDROCK (authorization, when set), "
        "AWS_ACCESS_KEY_ID (else SigV4 for eu-central-1 with the AWS credential chain)"
    ) in lines
    assert "provider vpc url: https://vpce.example/model/amazon.nova-pro-v1%3A0/converse" in lines
    assert "provider vpc environment: NOVA_KEY (authorization)" in lines


def test_config_check_refuses_what_the_api_would(config_check):
    result = config_check(
        '[providers.claude]\nkind = "bedrock"\nmodel = "m"\nregion = "eu-central-1"\n'
        "[providers.claude.params]\ntopK = 5\n"
    )
    assert result.exit_code == 2
    assert "providers.claude.params.topK: is no Converse request field" in result.stderr

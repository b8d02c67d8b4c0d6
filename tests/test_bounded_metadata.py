"""Provider-controlled strings at the ``none`` and ``metadata`` levels are stored bounded, and a
direct call keeps the actor's rights (``requiresAdmin``)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from nrllm_core import (
    Actor,
    ChatMessage,
    DataClass,
    ProviderAnswer,
    ProviderRegistry,
    Tool,
    ToolCall,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    Usage,
    hookimpl,
    make_plugin_manager,
)
from nrllm_core._host import Host
from nrllm_core._privacy import CALL_ID_MAX_CHARS, PrivacyLevel
from nrllm_core.cli import cli
from nrllm_core.redact import LEAF_MAX_CHARS, TRUNCATION_MARKER

LONG_ID = "id-" + "7" * 5000
LONG_NAME = "n" * 60_000


class Echo(Tool):
    name = "echo"
    description = "Echo."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    parameters = {"type": "object", "properties": {}}  # noqa: RUF012 - read once

    def __init__(self, *, requires_admin: bool = False) -> None:
        self.requires_admin = requires_admin
        self.calls = 0

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls += 1
        return ToolResult.text("echoed")


class Hostile:
    """A provider whose server answers with free text where metadata is expected."""

    def __init__(self, finish_reason: str) -> None:
        self.finish_reason = finish_reason

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(Echo())

    @hookimpl
    def nrllm_register_providers(self, registry: ProviderRegistry) -> None:
        registry.register("hostile", lambda *args, **kwargs: self)

    def complete(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Any:
        turn = sum(1 for m in messages if m.role.value == "assistant")
        calls = (
            (ToolCall(id=LONG_ID, name="echo"), ToolCall(id="c2", name=LONG_NAME))
            if turn == 0
            else ()
        )
        return ProviderAnswer(
            content="ok", tool_calls=calls, usage=Usage(), finish_reason=self.finish_reason
        )


@pytest.fixture
def run_at(tmp_path: Path) -> Iterator[Any]:
    hosts: list[Host] = []

    def run(level: PrivacyLevel, finish_reason: str) -> list[Any]:
        host = Host.from_config(
            data={
                "providers": {"p": {"kind": "hostile", "trust_zone": "local"}},
                "defaults": {"provider": "p"},
                "privacy": {"level": level.value},
            },
            plugins=[Hostile(finish_reason)],
            load_entry_points=False,
            data_dir=tmp_path / level.value,
            environ={},
        )
        hosts.append(host)
        outcome = host.run("go")
        assert outcome.status == "completed", outcome.error
        return list(host.store.get_run(outcome.run_id).steps)

    yield run
    for host in hosts:
        host.store.close()


LEVELS = [PrivacyLevel.NONE, PrivacyLevel.METADATA]


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize(
    ("sent", "stored"),
    [
        ("tool_calls", "tool_calls"),
        ("end_turn", "end_turn"),
        ("stop", "stop"),
        ("please store this sentence: sk-live-0123456789abcdef", "other"),
        ("x" * 100_000, "other"),
        # Gemini's own word is known as it writes it; a case it does not write is not.
        ("STOP", "STOP"),
        ("Stop", "other"),
    ],
)
def test_finish_reason_is_a_known_value_or_other(run_at, level, sent, stored):
    steps = run_at(level, sent)

    assert [s.payload["finish_reason"] for s in steps if s.kind == "llm"] == [stored, stored]


@pytest.mark.parametrize("level", LEVELS)
def test_call_ids_are_stored_at_most_128_characters(run_at, level):
    steps = run_at(level, "stop")

    ids = [s.payload["tool_call_id"] for s in steps if s.kind == "tool"]
    assert ids == [LONG_ID[:CALL_ID_MAX_CHARS], "c2"]
    assert CALL_ID_MAX_CHARS == 128


@pytest.mark.parametrize("level", LEVELS)
def test_model_chosen_tool_names_are_bounded(run_at, level):
    steps = run_at(level, "stop")

    bounded = LONG_NAME[:LEAF_MAX_CHARS] + TRUNCATION_MARKER
    (llm, _) = [s for s in steps if s.kind == "llm"]
    assert llm.payload["requested_tool_names"] == ["echo", bounded]
    assert [s.payload["tool_name"] for s in steps if s.kind == "tool"] == ["echo", bounded]


def test_above_metadata_the_finish_reason_is_kept(run_at):
    steps = run_at(PrivacyLevel.REDACTED, "a provider's own reason")

    assert {s.payload["finish_reason"] for s in steps if s.kind == "llm"} == {
        "a provider's own reason"
    }


# -- a direct call keeps the actor's rights ------------------------------------------------------


@pytest.fixture
def admin_tool() -> Echo:
    return Echo(requires_admin=True)


@pytest.fixture
def host(tmp_path: Path, admin_tool: Echo, tools_plugin: Any) -> Iterator[Host]:
    made = Host.from_config(
        data={"actor": {"id": "ann"}},
        plugins=[tools_plugin(admin_tool)],
        load_entry_points=False,
        data_dir=tmp_path,
        environ={},
    )
    yield made
    made.store.close()


def test_a_direct_call_of_an_admin_tool_by_a_non_admin_is_refused(host, admin_tool):
    wire = host.invoke("echo", {})

    assert wire.is_error
    assert wire.content == 'Error: tool "echo" not permitted (requiresAdmin)'
    assert admin_tool.calls == 0
    (info,) = host.runs()
    tool_step = host.store.get_run(info.run_id).steps[-2]
    assert tool_step.payload["tool_is_error"] is True


def test_a_direct_call_of_an_admin_tool_by_an_admin_runs(host, admin_tool):
    wire = host.invoke("echo", {}, actor=Actor(id="root", admin=True))

    assert (wire.is_error, wire.content) == (False, "echoed")
    assert admin_tool.calls == 1


def test_nrllm_invoke_refuses_an_admin_tool_to_a_non_admin(
    tmp_path, monkeypatch, admin_tool, tools_plugin
):
    config = tmp_path / "nrllm.toml"
    config.write_text('[actor]\nid = "ann"\n', encoding="utf-8")
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(
        "nrllm_core.cli._common.plugin_manager",
        lambda **_: make_plugin_manager(
            plugins=[tools_plugin(admin_tool)], load_entry_points=False
        ),
    )

    with capture_logs():
        result = CliRunner().invoke(
            cli, ["--config", str(config), "invoke", "echo", "--args", "{}", "--json"]
        )

    assert result.exit_code == 0, result.output
    wire = json.loads(result.stdout)["wire"]
    assert (wire["is_error"], wire["content"]) == (
        True,
        'Error: tool "echo" not permitted (requiresAdmin)',
    )
    assert admin_tool.calls == 0

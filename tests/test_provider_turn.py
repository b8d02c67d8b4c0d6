"""A provider kind is told which run and round each request answers for (``turn=``), on both
drivers, asked to complete or to stream; a provider that takes no ``turn`` is called as ever."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    Finished,
    Host,
    ProviderAnswer,
    RunTurn,
    TextDelta,
    ToolCall,
    ToolRegistry,
    ToolResult,
    Usage,
    hookimpl,
    make_plugin_manager,
    tool,
)

pytestmark = pytest.mark.usefixtures("driven")


@tool(group="content")
def lookup(term: str) -> ToolResult:
    """Look a term up."""
    return ToolResult.text(f"{term}: found")


class Turned:
    """Asks for one lookup, then answers; keeps every turn it is told."""

    def __init__(self, told: list[RunTurn]) -> None:
        self.told = told

    def complete(self, messages: Any, tools: Any, *, turn: RunTurn) -> ProviderAnswer:
        self.told.append(turn)
        if len(self.told) == 1:
            call = ToolCall(id="c1", name="lookup", arguments={"term": "x"})
            return ProviderAnswer(
                content="", tool_calls=(call,), usage=Usage(), finish_reason="tool_calls"
            )
        return ProviderAnswer(content="done", tool_calls=(), usage=Usage(), finish_reason="stop")

    def stream(
        self, messages: Any, tools: Any, *, tool_choice: str, on_delta: Any, turn: RunTurn
    ) -> ProviderAnswer:
        answer = self.complete(messages, tools, turn=turn)
        if answer.content:
            on_delta(TextDelta(text=answer.content))
        return answer


class Plugin:
    def __init__(self) -> None:
        self.told: list[RunTurn] = []

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(lookup)

    @hookimpl
    def nrllm_register_providers(self, registry: Any) -> None:
        registry.register("turned", lambda *a, **k: Turned(self.told))


def _host(tmp_path: Path, plugin: Plugin) -> Host:
    return Host.from_config(
        data={
            "providers": {"t": {"kind": "turned", "trust_zone": "local"}},
            "defaults": {"provider": "t"},
            "actor": {"id": "alice"},
        },
        pm=make_plugin_manager(plugins=[plugin], load_entry_points=False),
        data_dir=tmp_path,
        environ={},
    )


def test_a_provider_is_told_the_run_and_round_of_each_request(tmp_path):
    plugin = Plugin()
    host = _host(tmp_path, plugin)
    try:
        outcome = host.run("look x up")
    finally:
        host.store.close()

    assert outcome.final_content == "done"
    assert plugin.told == [
        RunTurn(run_id=outcome.run_id, round=1),
        RunTurn(run_id=outcome.run_id, round=2),
    ]


def test_a_streaming_provider_is_told_too(tmp_path):
    plugin = Plugin()
    host = _host(tmp_path, plugin)
    try:
        events = list(host.stream("look x up"))
    finally:
        host.store.close()

    (finished,) = [e for e in events if isinstance(e, Finished)]
    assert [t.round for t in plugin.told] == [1, 2]
    assert {t.run_id for t in plugin.told} == {finished.outcome.run_id}


def test_a_provider_that_takes_no_turn_is_called_as_ever(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "plain"}]}), encoding="utf-8")
    host = Host.from_config(
        data={
            "providers": {"s": {"kind": "scripted", "script": str(script), "trust_zone": "local"}},
            "defaults": {"provider": "s"},
            "actor": {"id": "alice"},
        },
        pm=make_plugin_manager(load_entry_points=False),
        data_dir=tmp_path,
        environ={},
    )
    try:
        assert host.run("hi").final_content == "plain"
    finally:
        host.store.close()

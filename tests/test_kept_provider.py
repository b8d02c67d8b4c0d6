"""A provider instance is kept across its run's segments in one process: built once for a run
that suspends and is approved here (``approve`` or ``run(approve=...)``), closed once the run
ends; rebuilt when its section changed, for a run resumed by another host, or after it was let
go (a cancelled run, a host past its limit). On both drivers, through public names only."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    Effect,
    Host,
    ProviderAnswer,
    RunTurn,
    ToolCall,
    ToolRegistry,
    ToolResult,
    Usage,
    hookimpl,
    make_plugin_manager,
    tool,
)

pytestmark = pytest.mark.usefixtures("driven")


@tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE)
def write_note(text: str) -> ToolResult:
    """Write a note."""
    return ToolResult.text(f"wrote {text}")


class Model:
    """Asks for one write, then answers; counts its requests and closes."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.asked: list[RunTurn] = []
        self.closes = 0

    def complete(self, messages: Any, tools: Any, *, turn: RunTurn) -> ProviderAnswer:
        self.asked.append(turn)
        if turn.round == 1:
            call = ToolCall(id="c1", name="write_note", arguments={"text": "hi"})
            return ProviderAnswer(
                content="", tool_calls=(call,), usage=Usage(), finish_reason="tool_calls"
            )
        return ProviderAnswer(
            content=f"done by model {self.number}",
            tool_calls=(),
            usage=Usage(),
            finish_reason="stop",
        )

    def close(self) -> None:
        self.closes += 1


class Plugin:
    """Registers the tool and a provider kind that builds a new :class:`Model` each time."""

    def __init__(self) -> None:
        self.built: list[Model] = []

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(write_note)

    @hookimpl
    def nrllm_register_providers(self, registry: Any) -> None:
        registry.register("counted", self.build)

    def build(self, *args: Any, **kwargs: Any) -> Model:
        self.built.append(Model(len(self.built) + 1))
        return self.built[-1]


def _config(temperature: float = 0.0) -> dict[str, Any]:
    return {
        "providers": {
            "m": {
                "kind": "counted",
                "trust_zone": "local",
                "temperature": temperature,
            }
        },
        "defaults": {"provider": "m"},
        "actor": {"id": "alice"},
    }


def _host(tmp_path: Path, plugin: Plugin, config: dict[str, Any] | None = None) -> Host:
    return Host.from_config(
        data=config or _config(),
        pm=make_plugin_manager(plugins=[plugin], load_entry_points=False),
        data_dir=tmp_path,
        environ={},
    )


@pytest.fixture
def plugin() -> Plugin:
    return Plugin()


def test_a_run_approved_in_this_process_asks_the_provider_it_suspended_with(tmp_path, plugin):
    host = _host(tmp_path, plugin)
    try:
        waiting = host.run("write hi")
        (model,) = plugin.built
        assert (waiting.status, model.closes) == ("awaiting_approval", 0)

        done = host.approve(waiting.run_id, approver="bob", turn_digest=waiting.turn_digest)
    finally:
        host.store.close()

    assert done.final_content == "done by model 1"
    assert plugin.built == [model]
    assert [t.round for t in model.asked] == [1, 2]
    assert {t.run_id for t in model.asked} == {waiting.run_id}
    assert model.closes == 1


def test_a_run_with_an_approver_callback_builds_its_provider_once(tmp_path, plugin):
    host = _host(tmp_path, plugin)
    try:
        done = host.run("write hi", approve=lambda pending, digest: "bob")
    finally:
        host.store.close()

    assert done.final_content == "done by model 1"
    (model,) = plugin.built
    assert model.closes == 1


def test_a_denied_turn_goes_on_with_the_same_provider(tmp_path, plugin):
    host = _host(tmp_path, plugin)
    try:
        waiting = host.run("write hi")
        done = host.approve(
            waiting.run_id, approve=False, approver="bob", turn_digest=waiting.turn_digest
        )
    finally:
        host.store.close()

    assert done.status == "completed"
    (model,) = plugin.built
    assert model.closes == 1


def test_a_changed_provider_section_builds_a_new_provider(tmp_path, plugin):
    path = tmp_path / "nrllm.toml"
    path.write_text(_toml(0.0), encoding="utf-8")
    host = Host.from_config(
        path,
        pm=make_plugin_manager(plugins=[plugin], load_entry_points=False),
        data_dir=tmp_path,
        environ={},
    )
    try:
        waiting = host.run("write hi")
        # Another size: the host reads the file again, and its section is not the one the
        # kept provider was built from.
        path.write_text(_toml(0.25), encoding="utf-8")
        done = host.approve(waiting.run_id, approver="bob", turn_digest=waiting.turn_digest)
    finally:
        host.store.close()

    assert done.final_content == "done by model 2"
    first, second = plugin.built
    assert (first.closes, second.closes) == (1, 1)


def _toml(temperature: float) -> str:
    return f"""
[providers.m]
kind = "counted"
trust_zone = "local"
temperature = {temperature}

[defaults]
provider = "m"

[actor]
id = "alice"
"""


def test_a_run_resumed_by_another_host_builds_its_own_provider(tmp_path, plugin):
    first_host = _host(tmp_path, plugin)
    try:
        waiting = first_host.run("write hi")
    finally:
        first_host.store.close()
    other = Plugin()
    second_host = _host(tmp_path, other)
    try:
        done = second_host.approve(waiting.run_id, approver="bob", turn_digest=waiting.turn_digest)
    finally:
        second_host.store.close()

    assert done.final_content == "done by model 1"
    (kept,) = plugin.built
    (built,) = other.built
    assert (kept.asked[0].round, built.asked[0].round) == (1, 2)
    assert built.closes == 1
    # The first host keeps its provider while it lives, and closes it as it goes.
    assert kept.closes == 0
    del first_host
    gc.collect()
    assert kept.closes == 1


def test_a_cancelled_suspended_run_closes_its_kept_provider(tmp_path, plugin):
    host = _host(tmp_path, plugin)
    try:
        waiting = host.run("write hi")
        assert host.cancel(waiting.run_id, by="bob")
    finally:
        host.store.close()

    (model,) = plugin.built
    assert model.closes == 1


def test_a_host_keeps_at_most_32_providers_and_lets_the_longest_kept_go_first(tmp_path, plugin):
    host = _host(tmp_path, plugin)
    try:
        waiting = [host.run(f"write {n}") for n in range(33)]
        closes = [model.closes for model in plugin.built]
        done = host.approve(waiting[0].run_id, approver="bob", turn_digest=waiting[0].turn_digest)
    finally:
        host.store.close()

    assert closes == [1] + [0] * 32
    # The run whose provider was let go goes on with a new one, as in another process.
    assert done.final_content == "done by model 34"

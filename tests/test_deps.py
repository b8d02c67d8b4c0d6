"""Per-run dependencies: what a host hands its tools for one run (``deps=``), through public
names only, on both drivers; never sealed, recorded or sent anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from nrllm_core import (
    AsyncHost,
    Effect,
    Host,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
    tool,
)

seen: list[tuple[str, Any]] = []


class Env:
    """A host's per-run object: its repr would leak if anything recorded it."""

    def __init__(self, tenant: str) -> None:
        self.tenant = tenant

    def __repr__(self) -> str:
        return f"Env(secret-{self.tenant})"


@tool(group="content")
async def whoami(context: ToolContext) -> ToolResult:
    """Say which tenant this run is for."""
    env: Env | None = context.deps
    # Two runs at once interleave here.
    await anyio.sleep(0.01)
    seen.append(("whoami", env))
    return ToolResult.text("nobody" if env is None else env.tenant)


@tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE)
def write_note(text: str, context: ToolContext) -> ToolResult:
    """Write a note for the run's tenant."""
    seen.append(("write_note", context.deps))
    return ToolResult.text(f"wrote {text}")


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(whoami)
        registry.register(write_note)


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": "c1", "name": name, "arguments": arguments}]}


def _host(tmp_path: Path, turns: list[dict[str, Any]]) -> Host:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return Host.from_config(
        data={
            "providers": {"m": {"kind": "scripted", "script": str(script), "trust_zone": "local"}},
            "defaults": {"provider": "m"},
            "actor": {"id": "alice"},
            "privacy": {"level": "full"},
        },
        pm=make_plugin_manager(plugins=[Tools()], load_entry_points=False),
        data_dir=tmp_path,
        environ={},
    )


@pytest.fixture(autouse=True)
def _clear() -> None:
    seen.clear()


@pytest.mark.usefixtures("driven")
def test_a_runs_tools_see_the_deps_the_host_passed_and_none_without(tmp_path):
    host = _host(tmp_path, [_call("whoami"), {"content": "done"}] * 2)
    acme = Env("acme")
    try:
        with_deps = host.run("who?", deps=acme)
        without = host.run("who?")
        direct = host.invoke("whoami", {}, deps=acme)
    finally:
        host.store.close()

    assert [d for _, d in seen] == [acme, None, acme]
    assert seen[0][1] is acme
    assert (with_deps.status, without.status, direct.content) == ("completed", "completed", "acme")


@pytest.mark.usefixtures("driven")
def test_deps_are_never_recorded_nor_sealed(tmp_path):
    host = _host(tmp_path, [_call("write_note", text="hi"), {"content": "done"}])
    events: list[Any] = []
    try:
        suspended = host.run("note", deps=Env("acme"), on_event=events.append)
        done = host.approve(
            suspended.run_id,
            approver="bob",
            turn_digest=suspended.turn_digest,
            deps=Env("beta"),
            on_event=events.append,
        )
        stored = host.store.get_run(done.run_id)
    finally:
        host.store.close()

    # The resumed run's tools get what the approval passed, not what the run started with.
    assert [(name, d.tenant) for name, d in seen] == [("write_note", "beta")]
    assert stored is not None
    everything = repr([s.payload for s in stored.steps]) + repr(events)
    assert "secret-" not in everything
    database = (tmp_path / "nrllm.db").read_bytes()
    assert b"secret-" not in database


def test_a_run_resumed_by_another_host_gets_that_hosts_deps(tmp_path):
    first = _host(tmp_path, [_call("write_note", text="hi"), {"content": "done"}])
    try:
        suspended = first.run("note", deps=Env("acme"))
    finally:
        first.store.close()
    other = _host(tmp_path, [_call("write_note", text="hi"), {"content": "done"}])
    try:
        done = other.approve(
            suspended.run_id, approver="bob", turn_digest=suspended.turn_digest, deps=Env("beta")
        )
    finally:
        other.store.close()

    assert done.status == "completed"
    assert [(name, d.tenant) for name, d in seen] == [("write_note", "beta")]


@pytest.mark.anyio
async def test_two_runs_at_once_each_see_their_own_deps(tmp_path):
    host = _host(tmp_path, [_call("whoami"), {"content": "done"}])
    ahost = AsyncHost(host)
    acme, beta = Env("acme"), Env("beta")
    outcomes: dict[str, Any] = {}

    async def run(env: Env) -> None:
        outcomes[env.tenant] = await ahost.run("who?", deps=env)

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(run, acme)
            group.start_soon(run, beta)
        answered = {}
        for tenant, outcome in outcomes.items():
            detail = host.store.get_run(outcome.run_id)
            assert detail is not None
            (step,) = [s for s in detail.steps if s.kind == "tool"]
            answered[tenant] = step.payload["tool_result"]
    finally:
        host.store.close()

    assert sorted(d.tenant for _, d in seen) == ["acme", "beta"]
    assert answered == {"acme": "acme", "beta": "beta"}


def test_the_pytest_plugin_passes_deps_to_runs_calls_and_approvals(nrllm):
    nrllm.load(Tools())
    acme = Env("acme")

    assert nrllm.invoke("whoami", deps=acme).content == "acme"
    nrllm.run("who?", script=[_call("whoami"), {"content": "done"}], deps=acme)
    suspended = nrllm.run("note", script=[_call("write_note", text="x"), {"content": "ok"}])
    nrllm.approve(suspended, deps=Env("beta"))

    assert [(name, d.tenant) for name, d in seen] == [
        ("whoami", "acme"),
        ("whoami", "acme"),
        ("write_note", "beta"),
    ]

"""``Host.run(..., approve=callback)``: a host that decides by policy continues its run in the
same call, under the rules every approval obeys."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    ApprovalRefused,
    Effect,
    Host,
    PendingCall,
    RefusalReason,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
    tool,
)

pytestmark = pytest.mark.usefixtures("driven")

written: list[str] = []


@tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE)
def write_note(text: str) -> ToolResult:
    """Write a note."""
    written.append(text)
    return ToolResult.text(f"wrote {text}")


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(write_note)


def _write(text: str) -> dict[str, Any]:
    return {"tool_calls": [{"id": f"c-{text}", "name": "write_note", "arguments": {"text": text}}]}


def _host(tmp_path: Path, turns: list[dict[str, Any]], **provider: Any) -> Host:
    written.clear()
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    section = {"kind": "scripted", "script": str(script), "trust_zone": "local", **provider}
    return Host.from_config(
        data={"providers": {"m": section}, "defaults": {"provider": "m"}, "actor": {"id": "alice"}},
        pm=make_plugin_manager(plugins=[Tools()], load_entry_points=False),
        data_dir=tmp_path,
        environ={},
    )


def test_a_callback_that_names_an_approver_continues_the_run_in_the_same_call(tmp_path):
    host = _host(tmp_path, [_write("a"), _write("b"), {"content": "done"}])
    asked: list[tuple[list[str], str]] = []

    def approve(pending: tuple[PendingCall, ...], digest: str) -> str | None:
        asked.append(([p.name for p in pending], digest))
        return "bob"

    try:
        outcome = host.run("write twice", approve=approve)
        detail = host.store.get_run(outcome.run_id)
    finally:
        host.store.close()

    assert (outcome.status, outcome.final_content) == ("completed", "done")
    assert written == ["a", "b"]
    assert [names for names, _ in asked] == [["write_note"], ["write_note"]]
    assert detail is not None
    approvals = [s.payload for s in detail.steps if s.kind == "approval"]
    assert [(a["decision"], a["approver"]) for a in approvals] == [("approved", "bob")] * 2
    assert [a["turn_digest"] for a in approvals] == [digest for _, digest in asked]
    assert host.runs()[0].run_id == outcome.run_id


def test_a_callback_that_names_nobody_leaves_the_run_suspended(tmp_path):
    host = _host(tmp_path, [_write("a"), {"content": "done"}])
    try:
        outcome = host.run("write", approve=lambda pending, digest: None)
    finally:
        host.store.close()

    assert outcome.status == "awaiting_approval"
    assert written == []


def test_the_callbacks_approver_is_held_to_four_eyes(tmp_path):
    host = _host(tmp_path, [_write("a"), {"content": "done"}], four_eyes=True)
    try:
        with pytest.raises(ApprovalRefused) as refused:
            host.run("write", approve=lambda pending, digest: "Alice")
        (info,) = host.runs()
    finally:
        host.store.close()

    assert refused.value.reason is RefusalReason.FOUR_EYES
    assert info.status == "awaiting_approval"
    assert written == []

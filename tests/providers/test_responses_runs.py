"""Governed runs through the ``openai-responses`` kind, against a loopback server that answers
as the Responses API does: an approval, the encrypted reasoning that must survive it, and what
the audit keeps of that reasoning."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import Response

from nrllm_core import DataClass, Effect, Tool, ToolContext, ToolResult
from nrllm_core._host import Host

ENCRYPTED = "gAAAAB-sealed-reasoning-state-0123456789"
SUMMARY = "Erst notieren, dann antworten."
PROMPT = "Notiere „Grüße“ und sag Bescheid"


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


REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": SUMMARY}],
    "encrypted_content": ENCRYPTED,
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_w1",
    "name": "write_note",
    "arguments": '{"text": "Grüße"}',
    "status": "completed",
}
FINAL = {
    "type": "message",
    "id": "msg_2",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "Notiert.", "annotations": []}],
}


def response(*output: dict[str, Any]) -> str:
    """A whole answer built with the SDK's ``Response`` model, as the server sends it."""
    return Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1,
            "model": "gpt-test",
            "status": "completed",
            "output": list(output),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 20,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": 10,
                "output_tokens_details": {"reasoning_tokens": 6},
                "total_tokens": 30,
            },
        }
    ).model_dump_json()


@pytest.fixture
def make_host(tmp_path: Path, server: Any, tools_plugin: Any) -> Callable[..., Host]:
    def make(*tools: Tool, privacy: str = "full") -> Host:
        section = {
            "kind": "openai-responses",
            "model": "gpt-test",
            "base_url": server.url,
            "trust_zone": "local",
            "params": {"reasoning": {"effort": "low", "summary": "auto"}},
        }
        return Host.from_config(
            data={
                "providers": {"model": section},
                "defaults": {"provider": "model"},
                "actor": {"id": "alice"},
                "privacy": {"level": privacy},
            },
            plugins=[tools_plugin(*tools)],
            load_entry_points=False,
            data_dir=tmp_path / "home",
            environ={"OPENAI_API_KEY": "sk-proj-test0123456789abcdefghij"},
        )

    return make


def test_an_approved_call_is_answered_and_its_turns_reasoning_goes_back_unchanged(
    make_host, server, responses_oracle
):
    note = WriteNote()
    server.answer(response(REASONING, CALL), response(FINAL))
    suspended = make_host(note).run(PROMPT)
    assert suspended.status == "awaiting_approval"
    assert note.calls == []

    # Another host over the same store resumes it: the turn comes from the sealed record.
    outcome = make_host(note).approve(
        suspended.run_id, approve=True, approver="alice", turn_digest=suspended.turn_digest
    )

    assert (outcome.status, outcome.final_content) == ("completed", "Notiert.")
    assert note.calls == [{"text": "Grüße"}]
    first, second = server.bodies
    for body in (first, second):
        responses_oracle(body)
        assert (body["store"], body["include"]) == (False, ["reasoning.encrypted_content"])
        assert "previous_response_id" not in body
    assert first["input"] == [{"role": "user", "content": PROMPT}]
    assert second["input"] == [
        {"role": "user", "content": PROMPT},
        REASONING,
        CALL,
        {"type": "function_call_output", "call_id": "call_w1", "output": "noted"},
    ]


def _audit(host: Host, run_id: str) -> str:
    detail = host.store.get_run(run_id)
    assert detail is not None
    return json.dumps([s.payload for s in detail.steps], ensure_ascii=False)


@pytest.mark.parametrize("level", ["metadata", "redacted", "full"])
def test_the_encrypted_reasoning_is_in_no_audit_below_full(make_host, server, level):
    server.answer(response(REASONING, CALL), response(FINAL))
    host = make_host(WriteNote(), privacy=level)
    suspended = host.run(PROMPT)
    outcome = host.approve(
        suspended.run_id, approve=True, approver="alice", turn_digest=suspended.turn_digest
    )
    assert outcome.final_content == "Notiert."

    audit = _audit(host, suspended.run_id)

    assert (ENCRYPTED in audit) is (level == "full")
    # The summary is model text: kept (masked at redacted) as the level keeps the thinking.
    assert (SUMMARY in audit) is (level != "metadata")


@pytest.mark.parametrize("level", ["metadata", "redacted"])
def test_the_responses_finish_reasons_are_kept_below_full(make_host, server, level):
    server.answer(response(FINAL))
    host = make_host(privacy=level)

    run_id = host.run(PROMPT).run_id

    detail = host.store.get_run(run_id)
    assert detail is not None
    (llm,) = [s.payload for s in detail.steps if s.kind == "llm"]
    assert llm["finish_reason"] == "completed"

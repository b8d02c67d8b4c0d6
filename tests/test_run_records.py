"""What the audit records carry for a sink that sees only them: each segment's start, its
suspension or finish, tool outcomes and classes, the response id; and the trace context a
suspension keeps next to its sealed state (migration 0005)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect as schema
from sqlalchemy import text
from structlog.testing import capture_logs

from nrllm_core import (
    AuditRecord,
    DataClass,
    Effect,
    Host,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
)
from nrllm_core.store._database import _alembic_config, engine_for, run_upgrade

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


class Write(Tool):
    name = "write_note"
    description = "Writes a note."
    group = "content"
    data_class = DataClass.EDITOR_CONTENT
    effect = Effect.NON_IDEMPOTENT_WRITE
    requires_approval = True
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}}  # noqa: RUF012

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text("written")


class Plugin:
    """Keeps every audit record; answers the trace context it is given."""

    def __init__(self, trace_context: object = None) -> None:
        self.records: list[AuditRecord] = []
        self.trace_context = trace_context
        self.sections: list[Any] = []

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(Write())

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        self.records.append(record)

    @hookimpl
    def nrllm_trace_context(self, run_id: str) -> object:
        return self.trace_context

    @hookimpl
    def nrllm_settings(self, settings: Any) -> None:
        self.sections.append(settings)

    def kinds(self) -> list[str]:
        return [r.kind.value for r in self.records]

    def payload(self, kind: str) -> dict[str, Any]:
        (found,) = [r.payload for r in self.records if r.kind.value == kind]
        return dict(found)


def host_with(tmp_path: Path, plugin: Plugin, turns: list[dict[str, Any]]) -> Host:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    pm = make_plugin_manager(load_entry_points=False)
    pm.register(plugin, name="watcher")
    return Host.from_config(
        data={
            "providers": {
                "model": {
                    "kind": "scripted",
                    "script": str(script),
                    "trust_zone": "local",
                    "model": "tiny-1",
                    "base_url": "https://api.example.org:9443/v1",
                }
            },
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
        },
        pm=pm,
        data_dir=tmp_path / "home",
        environ={},
    )


WRITE_TURN = {
    "content": "",
    "tool_calls": [{"id": "c1", "name": "write_note", "arguments": {"text": "secret text"}}],
}


def test_a_run_starts_and_finishes_in_its_records_with_no_content(tmp_path):
    plugin = Plugin()
    host = host_with(tmp_path, plugin, [{"content": "hello"}])
    outcome = host.run("Hi")
    assert plugin.kinds() == ["start", "gate", "request", "llm", "finish"]
    assert plugin.payload("start") == {
        "kind": "start",
        "round": 0,
        "duration_ms": 0.0,
        "run_kind": "run",
        "provider": "model",
        "provider_kind": "scripted",
        "zone": "local",
        "model": "tiny-1",
        "server_address": "api.example.org",
        "server_port": 9443,
        "privacy_level": "metadata",
        "content_redacted": True,
    }
    assert plugin.payload("finish")["status"] == outcome.status == "completed"
    assert plugin.payload("finish")["termination_reason"] == "completed"
    stored = host.store.get_run(outcome.run_id)
    assert [s.kind for s in stored.steps] == plugin.kinds()
    # Each plugin got its own (here: empty) section before the segment's first record.
    assert [dict(s) for s in plugin.sections] == [{}]
    host.store.close()


def test_the_start_and_gate_records_are_stored_with_the_request_before_the_model_is_asked(
    tmp_path,
):
    stored: dict[str, list[str]] = {}

    class Look(Plugin):
        # Called after the store's sink: what the store holds once it has taken the record.
        @hookimpl
        def nrllm_audit(self, record: AuditRecord) -> None:
            detail = host.store.get_run(record.run_id)
            stored.setdefault(record.kind.value, [s.kind for s in detail.steps])

    plugin = Look()
    host = host_with(tmp_path, plugin, [{"content": "hello"}])
    outcome = host.run("Hi")

    # Nothing has left the process before the request: the first two wait for it. The answer
    # names no call and the finish guards nothing: both wait for the run's settling, which
    # commits them before run() returns.
    assert stored["start"] == stored["gate"] == []
    assert stored["request"] == ["start", "gate", "request"]
    assert stored["llm"] == stored["finish"] == ["start", "gate", "request"]
    detail = host.store.get_run(outcome.run_id)
    assert [s.kind for s in detail.steps] == ["start", "gate", "request", "llm", "finish"]
    assert detail.run.status.value == "completed"
    assert host.store.verify(outcome.run_id).broken == ()
    host.store.close()


def test_a_store_that_cannot_record_the_run_refuses_it_before_anything_is_recorded(
    tmp_path, monkeypatch
):
    # The run's row is committed on its own, first: a store that cannot take it stops the run
    # there (fail closed), before a step is recorded or the model asked. Letting the row ride
    # with the first request measured 4 to 8 % cheaper, but a store that failed then was found
    # only after the run had gone on unaudited (the request's record guards its order, not
    # whether the model is asked): not kept.
    from nrllm_core.store import Store

    def unavailable(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk unplugged")

    plugin = Plugin()
    host = host_with(tmp_path, plugin, [{"content": "hello"}])
    # Every transaction fails, as with a database gone.
    monkeypatch.setattr(Store, "_apply", unavailable)

    with pytest.raises(OSError, match="disk unplugged"):
        host.run("Hi")

    assert plugin.kinds() == []
    host.store.close()


def test_a_run_that_fails_before_its_request_keeps_its_start_and_gate(tmp_path, monkeypatch):
    from nrllm_core.store import Store

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk unplugged")

    monkeypatch.setattr(Store, "record_decisions", broken)
    host = host_with(tmp_path, Plugin(), [{"content": "hello"}])
    outcome = host.run("Hi")

    assert outcome.termination_reason == "internal_error"
    stored = host.store.get_run(outcome.run_id)
    assert [s.kind for s in stored.steps] == ["start", "gate", "finish"]
    assert host.store.verify(outcome.run_id).broken == ()
    host.store.close()


def test_a_suspension_record_and_its_trace_context_next_to_the_sealed_state(tmp_path):
    plugin = Plugin({"traceparent": PARENT})
    host = host_with(tmp_path, plugin, [WRITE_TURN, {"content": "done"}])
    suspended = host.run("Write")
    assert plugin.kinds()[-1] == "suspension"
    assert plugin.payload("suspension") == {
        "kind": "suspension",
        "round": 1,
        "duration_ms": 0.0,
        "turn_digest": suspended.turn_digest,
        "pending_calls": [{"id": "c1", "name": "write_note", "requires_approval": True}],
        "label": {"data_class": "publicContent", "integrity": "trusted", "untrusted_from": []},
        "content_redacted": True,
    }
    assert "secret text" not in json.dumps(plugin.payload("suspension"))
    suspension = host.store.suspension(suspended.run_id)
    assert suspension.trace_context == {"traceparent": PARENT}
    # Not inside the sealed state: the sealed bytes never hold the trace context.
    assert PARENT.encode() not in suspension.sealed
    plugin.records.clear()
    host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)
    assert plugin.kinds()[:3] == ["start", "approval", "tool"]
    assert plugin.payload("start")["trace_context"] == {"traceparent": PARENT}
    approval = plugin.payload("approval")
    assert approval["decision"] == "approved"
    assert approval["decided_at"].endswith("+00:00")
    tool = plugin.payload("tool")
    assert tool["tool_outcome"] == "ok"
    assert tool["tool_data_class"] == "editorContent"
    assert tool["tool_effect"] == "non_idempotent_write"
    host.store.close()


@pytest.mark.parametrize(
    "answer",
    [
        {"traceparent": "not a traceparent"},
        # An all-zero trace id is W3C's "invalid"; an empty answer is no context either.
        {"traceparent": "00-00000000000000000000000000000000-b7ad6b7169203331-01"},
        {},
    ],
)
def test_a_denied_call_is_refused_and_an_invalid_trace_context_is_not_stored(tmp_path, answer):
    plugin = Plugin(answer)
    host = host_with(tmp_path, plugin, [WRITE_TURN, {"content": "done"}])
    with capture_logs() as logs:
        suspended = host.run("Write")
    assert host.store.suspension(suspended.run_id).trace_context is None
    # Refused, and said so: a plugin that answers a malformed context has a defect.
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "nrllm.trace_context.refused"
    ]
    plugin.records.clear()
    host.approve(suspended.run_id, approve=False, approver="bob", turn_digest=suspended.turn_digest)
    assert "trace_context" not in plugin.payload("start")
    assert plugin.payload("tool")["tool_outcome"] == "refused"
    host.store.close()


@pytest.mark.parametrize("key", ["response_id", "response_model"])
def test_the_response_id_and_model_are_bounded_below_redacted(key):
    from nrllm_core import RunStep, StepKind
    from nrllm_core._privacy import PrivacyLevel, privacy_view

    step = RunStep(kind=StepKind.LLM, round=1, duration_ms=1.0, fields={key: "r" * 500})
    assert privacy_view(step, PrivacyLevel.METADATA)[key] == "r" * 128
    assert privacy_view(step, PrivacyLevel.FULL)[key] == "r" * 500


def test_a_tool_step_keeps_the_tools_description_masked_and_bounded(tmp_path):
    from nrllm_core.redact import LEAF_MAX_CHARS

    class Described(Write):
        name = "described"
        description = "Uses ghp_" + "a" * 36 + " to write. " + "x" * 5000
        effect = Effect.READ_ONLY
        requires_approval = False

    class Registers(Plugin):
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(Described())

    plugin = Registers()
    host = host_with(tmp_path, plugin, [])
    host.invoke("described", {"text": "hi"})
    kept = plugin.payload("tool")["tool_description"]
    assert kept.startswith("Uses ")
    assert "ghp_" + "a" * 36 not in kept
    assert len(kept) < LEAF_MAX_CHARS + 100
    host.store.close()


@pytest.mark.parametrize("edited", ['{"evil": 1}', "not json", '{"traceparent": NaN}'])
def test_a_trace_context_edited_in_the_database_reads_as_none(backend, edited):
    store = backend.open()
    store.start_run("r1")
    store.suspend_run("r1", sealed=b"x", turn_digest="d", trace_context={"traceparent": PARENT})
    assert store.suspension("r1").trace_context == {"traceparent": PARENT}
    with store._engine.begin() as connection:
        connection.execute(text("UPDATE suspensions SET trace_context = :v"), {"v": edited})
    suspension = store.suspension("r1")
    # The run is still found waiting, its sealed state whole: only the link to its trace is lost.
    assert (suspension.trace_context, suspension.sealed) == (None, b"x")
    store.close()


def test_migration_0005_adds_the_column_to_a_database_at_0004(tmp_path):
    from alembic import command

    engine = engine_for(None, tmp_path)
    with engine.begin() as connection:
        command.upgrade(_alembic_config(connection, {}), "0004")
    assert "trace_context" not in {c["name"] for c in schema(engine).get_columns("suspensions")}
    run_upgrade(engine, {})
    assert "trace_context" in {c["name"] for c in schema(engine).get_columns("suspensions")}
    engine.dispose()


@pytest.mark.parametrize("answer", [{"traceparent": PARENT, "tracestate": "vendor=1"}])
def test_the_manager_keeps_a_valid_tracestate(answer):
    pm = make_plugin_manager(plugins=[Plugin(answer)], load_entry_points=False)
    assert pm.trace_context("r") == answer

"""The installed plugin on the host's global providers: a run suspended in one process and
approved in another lands in one trace; without the plugin loaded there is no span at all."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HOST = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from nrllm_core import DataClass, Effect, Host, Tool, ToolResult, hookimpl

    # The host configures OpenTelemetry, as a host must; the plugin only uses it.
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    class Write(Tool):
        name = "write_note"
        description = "Writes a note."
        group = "content"
        data_class = DataClass.PUBLIC_CONTENT
        effect = Effect.NON_IDEMPOTENT_WRITE
        requires_approval = True
        parameters = {"type": "object", "properties": {"text": {"type": "string"}}}

        def execute(self, arguments, context):
            return ToolResult.text("written")

    class Tools:
        @hookimpl
        def nrllm_register_tools(self, registry):
            registry.register(Write())

    folder = Path(sys.argv[1])
    host = Host.from_config(folder / "nrllm.toml", plugins=[Tools()], data_dir=folder / "home")
    if sys.argv[2] == "run":
        outcome = host.run("Write it")
    else:
        outcome = host.approve(sys.argv[3], approver="bob", turn_digest=sys.argv[4])
    spans = [
        {
            "name": s.name,
            "trace_id": f"{s.context.trace_id:032x}",
            "span_id": f"{s.context.span_id:016x}",
            "parent": None if s.parent is None else f"{s.parent.span_id:016x}",
            "links": [f"{link.context.span_id:016x}" for link in s.links],
        }
        for s in exporter.get_finished_spans()
    ]
    print(json.dumps({"outcome": outcome.to_dict(), "spans": spans}))
    """
)


@pytest.fixture
def folder(tmp_path: Path, write_config) -> Path:
    call = {"id": "c1", "name": "write_note", "arguments": {"text": "x"}}
    write_config(tmp_path, [{"content": "", "tool_calls": [call]}, {"content": "done"}])
    (tmp_path / "host.py").write_text(HOST, encoding="utf-8")
    return tmp_path


def host(folder: Path, *args: str, load: str | None = None) -> dict:
    environ = {k: v for k, v in os.environ.items() if k != "NRLLM_LOAD_PLUGINS"}
    if load is not None:
        environ["NRLLM_LOAD_PLUGINS"] = load
    done = subprocess.run(
        [sys.executable, str(folder / "host.py"), str(folder), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=environ,
    )
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_run_resumed_in_another_process_continues_the_same_trace(folder):
    first = host(folder, "run")
    outcome = first["outcome"]
    assert outcome["status"] == "awaiting_approval"
    assert [s["name"] for s in first["spans"]] == ["chat tiny-1", "invoke_agent nrllm"]
    suspended = first["spans"][1]
    second = host(folder, "approve", outcome["run_id"], outcome["turn_digest"])
    assert second["outcome"]["status"] == "completed"
    resumed = next(s for s in second["spans"] if s["name"].startswith("invoke_agent"))
    assert {s["trace_id"] for s in second["spans"]} == {suspended["trace_id"]}
    assert resumed["parent"] == suspended["span_id"]
    assert resumed["links"] == [suspended["span_id"]]
    tool = next(s for s in second["spans"] if s["name"] == "execute_tool write_note")
    assert tool["parent"] == resumed["span_id"]


def test_no_span_at_all_when_the_plugin_is_not_loaded(folder):
    assert host(folder, "run")["spans"] != []
    assert host(folder, "run", load="builtin,repurpose")["spans"] == []

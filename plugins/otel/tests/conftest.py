"""A host with a scripted model, and the plugin on local SDK providers (never the globals)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from nrllm_core import (
    DataClass,
    Effect,
    Host,
    Tool,
    ToolArtifact,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
)
from nrllm_otel import OtelSink


class Echo(Tool):
    """Answers with its text and a table artifact holding ``secret``."""

    group = "content"
    data_class = DataClass.SYSTEM_DIAGNOSTICS
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "additionalProperties": False,
    }

    def __init__(
        self,
        name: str = "echo",
        *,
        effect: Effect = Effect.READ_ONLY,
        requires_approval: bool = False,
        artifact: str = "ARTIFACT-CELL",
        fails: bool = False,
    ) -> None:
        self.name = name
        self.description = f"The {name} tool."
        self.effect = effect
        self.requires_approval = requires_approval
        self.artifact = artifact
        self.fails = fails

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if self.fails:
            return ToolResult.error("Error: it broke")
        return ToolResult.text(
            f"echo: {arguments.get('text', '')}",
            ToolArtifact.table(columns=["cell"], rows=[[self.artifact]]),
        )


class Tools:
    def __init__(self, *tools: Tool) -> None:
        self.tools = tools

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        for tool in self.tools:
            registry.register(tool)


@attrs.define
class Otel:
    sink: OtelSink
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.finished() if s.name.startswith(prefix)]

    def points(self, name: str) -> list[Any]:
        data = self.metrics.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        found.extend(metric.data.data_points)
        return found


@pytest.fixture
def otel() -> Iterator[Otel]:
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    yield Otel(
        sink=OtelSink(tracer_provider=tracer_provider, meter_provider=meter_provider),
        spans=spans,
        metrics=reader,
    )
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
def echo() -> type[Echo]:
    return Echo


@pytest.fixture
def make_host(tmp_path: Path, otel: Otel) -> Iterator[Callable[..., Host]]:
    hosts: list[Host] = []

    def build(
        turns: list[dict[str, Any]],
        *tools: Tool,
        level: str = "metadata",
        zone: str = "local",
        sections: dict[str, Any] | None = None,
        sink: object | None = None,
    ) -> Host:
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
        data: dict[str, Any] = {
            "providers": {
                "model": {
                    "kind": "scripted",
                    "script": str(script),
                    "trust_zone": zone,
                    "model": "tiny-1",
                    "base_url": "http://models.example:8111/v1",
                }
            },
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
            "privacy": {"level": level},
        }
        data.update(sections or {})
        pm = make_plugin_manager(plugins=[Tools(*tools)], load_entry_points=False)
        pm.register(otel.sink if sink is None else sink, name="otel")
        host = Host.from_config(data=data, pm=pm, data_dir=tmp_path / "home", environ={})
        hosts.append(host)
        return host

    yield build
    for host in hosts:
        host.store.close()


@pytest.fixture
def write_config() -> Callable[..., Path]:
    """Write ``nrllm.toml`` into a folder: a scripted model with ``turns``, at ``level``."""

    def write(folder: Path, turns: list[dict[str, Any]], level: str = "metadata") -> Path:
        script = folder / "script.json"
        script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
        config = folder / "nrllm.toml"
        config.write_text(
            "\n".join(
                [
                    "[providers.model]",
                    'kind = "scripted"',
                    f"script = {json.dumps(str(script))}",
                    'trust_zone = "local"',
                    'model = "tiny-1"',
                    "[defaults]",
                    'provider = "model"',
                    "[actor]",
                    'id = "alice"',
                    "[privacy]",
                    f'level = "{level}"',
                ]
            ),
            encoding="utf-8",
        )
        return config

    return write

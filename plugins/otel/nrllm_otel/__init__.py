"""nrllm runs as OpenTelemetry GenAI spans and metrics, from the privacy-filtered audit records.

The plugin never configures OpenTelemetry: it asks ``opentelemetry.trace.get_tracer`` and
``opentelemetry.metrics.get_meter`` for whatever the host set up (nothing: no-op). A host or a
test that wants its own providers without touching the globals registers
``OtelSink(tracer_provider=..., meter_provider=...)`` under the name ``otel`` instead of the
installed entry point. Importing this package touches no OpenTelemetry state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nrllm_core import hookimpl
from nrllm_otel._sink import OtelSettings, OtelSink

if TYPE_CHECKING:
    from nrllm_core import AuditRecord

__all__ = ["OtelSettings", "OtelSink"]

# The entry point's sink: it reads the global providers, the first time a run starts.
_SINK = OtelSink()


@hookimpl
def nrllm_settings_class() -> type[OtelSettings]:
    return OtelSettings


@hookimpl
def nrllm_settings(settings: Any) -> None:
    _SINK.nrllm_settings(settings)


@hookimpl
def nrllm_audit(record: AuditRecord) -> None:
    _SINK.nrllm_audit(record)


@hookimpl
def nrllm_trace_context(run_id: str) -> Mapping[str, str] | None:
    return _SINK.nrllm_trace_context(run_id)

"""nrllm runs as OpenTelemetry GenAI spans and metrics, from the privacy-filtered audit records.

The plugin never configures OpenTelemetry: it asks ``opentelemetry.trace.get_tracer`` and
``opentelemetry.metrics.get_meter`` for whatever the host set up (nothing: no-op). A host or a
test that wants its own providers without touching the globals registers
``OtelSink(tracer_provider=..., meter_provider=...)`` under the name ``otel`` instead of the
installed entry point. Importing this package touches no OpenTelemetry state, and loads no
OpenTelemetry: the entry point's sink is made at the first record a run sends it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

from nrllm_core import hookimpl
from nrllm_otel._settings import OtelSettings

if TYPE_CHECKING:
    from nrllm_core import AuditRecord
    from nrllm_otel._sink import OtelSink

__all__ = ["OtelSettings", "OtelSink"]


def __getattr__(name: str) -> Any:
    # Every nrllm command loads the installed plugins, and most record no run: OpenTelemetry
    # loads with the sink, about 20 ms of a command's start otherwise.
    if name == "OtelSink":
        from nrllm_otel._sink import OtelSink

        return OtelSink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@final
class _FirstUse:
    """The entry point's sink, made (reading the global providers) at the first record, with
    the settings delivered before it; the settings delivered after it go straight to it."""

    __slots__ = ("_lock", "_settings", "_sink")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._settings: OtelSettings | None = None
        self._sink: OtelSink | None = None

    def settings(self, settings: OtelSettings) -> None:
        with self._lock:
            self._settings = settings
            if self._sink is not None:
                self._sink.nrllm_settings(settings)

    def sink(self) -> OtelSink:
        # Once made, read without the lock: every record of every run passes here.
        made = self._sink
        if made is not None:
            return made
        with self._lock:
            if self._sink is None:
                from nrllm_otel._sink import OtelSink

                sink = OtelSink()
                if self._settings is not None:
                    sink.nrllm_settings(self._settings)
                self._sink = sink
            return self._sink

    def made(self) -> OtelSink | None:
        """The sink, if a record has made it: before that no run has a span to carry on."""
        return self._sink


_SINK = _FirstUse()


@hookimpl
def nrllm_settings_class() -> type[OtelSettings]:
    return OtelSettings


@hookimpl
def nrllm_settings(settings: OtelSettings) -> None:
    _SINK.settings(settings)


@hookimpl
def nrllm_audit(record: AuditRecord) -> None:
    _SINK.sink().nrllm_audit(record)


@hookimpl
def nrllm_trace_context(run_id: str) -> Mapping[str, str] | None:
    sink = _SINK.made()
    return None if sink is None else sink.nrllm_trace_context(run_id)

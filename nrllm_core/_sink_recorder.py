"""A plugin that keeps what each sink received: for ``nrllm invoke`` and for tests."""

from __future__ import annotations

from nrllm_core._payloads import AuditRecord, TraceEvent, WirePayload
from nrllm_core.hookspecs import hookimpl

__all__ = ["SinkRecorder"]


class SinkRecorder:
    """A plugin implementing the three sink hooks that keeps whatever each one receives.

    Register it (``pm.register(SinkRecorder())``) to see exactly what the wire, the trace
    and the audit got from a call.
    """

    def __init__(self) -> None:
        self.wire: list[WirePayload] = []
        self.trace: list[TraceEvent] = []
        self.audit: list[AuditRecord] = []

    @hookimpl
    def nrllm_wire(self, payload: WirePayload) -> None:
        self.wire.append(payload)

    @hookimpl
    def nrllm_trace(self, event: TraceEvent) -> None:
        self.trace.append(event)

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        self.audit.append(record)

"""Numbers a run's steps and hands each to the trace and the audit sinks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final

from nrllm_core._payloads import AuditRecord, RunStep, TraceEvent

if TYPE_CHECKING:
    from nrllm_core._manager import PluginManager

__all__ = ["RunRecorder"]


def _full(step: RunStep) -> Mapping[str, Any]:
    return step.to_dict()


@final
class RunRecorder:
    """Records one run's steps in order; the audit copy passes through ``audit_view`` only."""

    __slots__ = ("_audit_view", "_lock", "_pm", "_sequence", "audit_failures", "run_id")

    def __init__(
        self,
        pm: PluginManager,
        run_id: str,
        *,
        audit_view: Callable[[RunStep], Mapping[str, Any]] = _full,
        first_sequence: int = 1,
    ) -> None:
        self._pm = pm
        self.run_id = run_id
        self._audit_view = audit_view
        self._sequence = first_sequence - 1
        self._lock = threading.Lock()
        self.audit_failures = 0

    @property
    def last_sequence(self) -> int:
        return self._sequence

    def record(self, step: RunStep) -> bool:
        """Deliver ``step``; ``False`` when an audit sink failed to take it."""
        with self._lock:
            self._sequence += 1
            sequence = self._sequence
        self._pm.emit_trace(TraceEvent(run_id=self.run_id, sequence=sequence, step=step))
        delivered = self._pm.emit_audit(
            AuditRecord(
                run_id=self.run_id,
                sequence=sequence,
                kind=step.kind,
                round=step.round,
                duration_ms=step.duration_ms,
                payload=self._audit_view(step),
            )
        )
        if not delivered:
            self.audit_failures += 1
        return delivered

"""Numbers a run's steps and hands each to the trace and the audit sinks."""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

from nrllm_core._payloads import AuditRecord, RunStep, StepKind, TraceEvent, builder
from nrllm_core.log import logger

if TYPE_CHECKING:
    from nrllm_core._manager import PluginManager

__all__ = ["RunRecorder"]


AuditView = Callable[[RunStep], Mapping[str, Any]]
Observer = Callable[[TraceEvent], None]

# Every step of every run builds both: the same frozen objects at about half the cost.
_new_record: Final = builder(AuditRecord)
_new_event: Final = builder(TraceEvent)


# A segment's start and the gate's decision guard nothing: when they are recorded nothing has
# left the process and nothing has run, and the segment's next record (the request before the
# model is asked, the approval, the call, or its finish) follows. Nor does the finish: the
# run's settling, which ``run()`` waits for, commits it.
_WAITING: Final = frozenset({StepKind.START, StepKind.GATE, StepKind.FINISH})


def _guards(step: RunStep) -> bool:
    """Whether ``step`` must be durable before what it records happens: the request before
    the model is asked, the answer naming calls before they run, a call's step before its
    result goes back, the approval before the approved call, the suspension before the run is
    reported suspended. A model answer that names no call is followed by the next request or
    the run's settling, and may wait for it. Read from the step itself, whatever the privacy
    filter keeps of it."""
    if step.kind in _WAITING:
        return False
    return step.kind is not StepKind.LLM or bool(step.fields.get("requested_tool_calls"))


@functools.cache
def _metadata_view() -> AuditView:
    # Without a configured privacy level the audit keeps the default: shape, never content.
    from nrllm_core._privacy import PrivacyLevel, audit_view_for

    return audit_view_for(PrivacyLevel.METADATA)


@final
class RunRecorder:
    """Records one run's steps in order; the audit copy passes through ``audit_view`` only.

    ``observer`` sees every trace event of this run as it happens (a live stream). A step whose
    audit write failed keeps its number, so the gap in the stored sequence shows the loss.
    """

    __slots__ = (
        "_audit_view",
        "_lock",
        "_numbers",
        "_observer",
        "_pm",
        "audit_failures",
        "round",
        "run_id",
    )

    def __init__(
        self,
        pm: PluginManager,
        run_id: str,
        *,
        audit_view: AuditView | None = None,
        first_sequence: int = 1,
        observer: Observer | None = None,
    ) -> None:
        self._pm = pm
        self.run_id = run_id
        self._audit_view = audit_view or _metadata_view()
        self._observer = observer
        self._numbers = itertools.count(first_sequence)
        # A run's calls record steps from their own threads (what they ask of the run): a
        # step is numbered and delivered as one, so the audit's chain takes them in order.
        self._lock = threading.Lock()
        self.audit_failures = 0
        # The round of the last step recorded: a step a call records belongs to it.
        self.round = 0

    def record(self, step: RunStep) -> bool:
        """Deliver ``step``; ``False`` when an audit sink failed to take it."""
        with self._lock:
            return self._record(step)

    def _record(self, step: RunStep) -> bool:
        sequence = next(self._numbers)
        self.round = step.round
        # The audit copy first: nothing a live viewer does can keep a step from being stored.
        delivered = self._pm.emit_audit(
            _new_record(
                run_id=self.run_id,
                sequence=sequence,
                kind=step.kind,
                round=step.round,
                duration_ms=step.duration_ms,
                payload=self._audit_view(step),
                guards=_guards(step),
            )
        )
        event = _new_event(run_id=self.run_id, sequence=sequence, step=step)
        self._pm.emit_trace(event)
        if self._observer is not None:
            try:
                self._observer(event)
            except Exception:
                logger().error("nrllm.trace.observer_failed", run_id=self.run_id, exc_info=True)
        if not delivered:
            self.audit_failures += 1
        return delivered

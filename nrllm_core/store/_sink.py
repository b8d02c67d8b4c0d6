"""The audit sink: the core plugin that writes each audit record through the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from nrllm_core._payloads import StepKind
from nrllm_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from nrllm_core._payloads import AuditRecord
    from nrllm_core.store._store import Store

__all__ = ["StoreAuditSink"]

# A segment's start and the gate's decision guard nothing: when they are recorded nothing has
# left the process and nothing has run, and the segment's next record (the request before the
# model is asked, the approval, the call, or its finish) follows. Nor does the finish: the
# run's settling, which ``run()`` waits for, commits it. They are committed with the run's next
# write through the store.
_DEFERRED: Final = frozenset({StepKind.START, StepKind.GATE, StepKind.FINISH})
# The audit views keep the calls a model asked for under one of these keys (their names only,
# at ``metadata``).
_CALLS: Final = ("requested_tool_calls", "requested_tool_names")


def _guards_nothing(record: AuditRecord) -> bool:
    """Whether ``record`` may wait for its run's next write rather than commit before the
    sink returns: a step is guarded when it records what is about to happen (the request
    before the model is asked, the answer naming the calls before they run, a call's step
    before its result goes back, the approval before the approved call, the suspension before
    the run is reported suspended). A model answer that names no call is followed by the next
    request or the run's settling, and may wait for it."""
    if record.kind in _DEFERRED:
        return True
    return record.kind is StepKind.LLM and not any(record.payload.get(key) for key in _CALLS)


@final
class StoreAuditSink:
    """Persists every audit record; register it with ``pm.register(StoreAuditSink(store))``.

    Unlike other sinks it raises when a record cannot be stored. The plugin manager turns that
    into ``nrllm.sink.failed`` and ``emit_audit`` returning ``False``, which is how the caller
    learns that a step is not durable and fails closed for tools that write. A record that
    guards nothing (see ``_guards_nothing``) is committed with the run's next write: its
    failure is that write's.
    """

    __slots__ = ("_store",)

    def __init__(self, store: Store) -> None:
        self._store = store

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        self._store.record_step(record, deferred=_guards_nothing(record))

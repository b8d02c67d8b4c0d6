"""The audit sink: the core plugin that writes each audit record through the store."""

from __future__ import annotations

from typing import TYPE_CHECKING, final

from nrllm_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from nrllm_core._payloads import AuditRecord
    from nrllm_core.store._store import Store

__all__ = ["StoreAuditSink"]


@final
class StoreAuditSink:
    """Persists every audit record; register it with ``pm.register(StoreAuditSink(store))``.

    Unlike other sinks it raises when a record cannot be stored. The plugin manager turns that
    into ``nrllm.sink.failed`` and ``emit_audit`` returning ``False``, which is how the caller
    learns that a step is not durable and fails closed for tools that write. A record that
    guards nothing (``AuditRecord.guards``) is committed with the run's next write: its
    failure is that write's.
    """

    __slots__ = ("_store",)

    def __init__(self, store: Store) -> None:
        self._store = store

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        self._store.record_step(record, deferred=not record.guards)

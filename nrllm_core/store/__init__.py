"""The audit store: SQLite embedded, PostgreSQL for hosts on several machines.

Importing this package loads SQLAlchemy; ``import nrllm_core`` never imports it.
"""

from __future__ import annotations

from nrllm_core.store._chain import ChainBreak, ChainCheck, KeySource, Problem
from nrllm_core.store._database import SchemaOutdatedError, default_data_dir, engine_for
from nrllm_core.store._operations import ClaimRefused
from nrllm_core.store._plugin_migrations import (
    open_plugin_engine,
    plugin_key,
    run_plugin_migrations,
    upgrade_plugin_schema,
)
from nrllm_core.store._records import (
    GateDecisionRecord,
    PurgeResult,
    RunDetail,
    RunInfo,
    RunKind,
    RunStatus,
    StoredStep,
    Suspension,
)
from nrllm_core.store._sink import StoreAuditSink
from nrllm_core.store._store import Store

__all__ = [
    "ChainBreak",
    "ChainCheck",
    "ClaimRefused",
    "GateDecisionRecord",
    "KeySource",
    "Problem",
    "PurgeResult",
    "RunDetail",
    "RunInfo",
    "RunKind",
    "RunStatus",
    "SchemaOutdatedError",
    "Store",
    "StoreAuditSink",
    "StoredStep",
    "Suspension",
    "default_data_dir",
    "engine_for",
    "open_plugin_engine",
    "plugin_key",
    "run_plugin_migrations",
    "upgrade_plugin_schema",
]

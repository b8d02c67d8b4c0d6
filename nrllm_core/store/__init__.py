"""The audit store: SQLite embedded, PostgreSQL for hosts on several machines.

Its names load SQLAlchemy; ``import nrllm_core`` never imports it. Each name loads from its
module on first use: a plugin that asks only for ``default_data_dir`` loads none of the store's
tables and queries, and a short command starts sooner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from nrllm_core._lazy import by_name, load

if TYPE_CHECKING:
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
        RunCursor,
        RunDetail,
        RunFilter,
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
    "RunCursor",
    "RunDetail",
    "RunFilter",
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

# The names that load on first use, by their module: the imports above, under TYPE_CHECKING,
# are what mypy sees of them (a test checks that the two agree).
_LAZY: Final = by_name(
    {
        "nrllm_core.store._chain": ("ChainBreak", "ChainCheck", "KeySource", "Problem"),
        "nrllm_core.store._database": ("SchemaOutdatedError", "default_data_dir", "engine_for"),
        "nrllm_core.store._operations": ("ClaimRefused",),
        "nrllm_core.store._plugin_migrations": (
            "open_plugin_engine",
            "plugin_key",
            "run_plugin_migrations",
            "upgrade_plugin_schema",
        ),
        "nrllm_core.store._records": (
            "GateDecisionRecord",
            "PurgeResult",
            "RunCursor",
            "RunDetail",
            "RunFilter",
            "RunInfo",
            "RunKind",
            "RunStatus",
            "StoredStep",
            "Suspension",
        ),
        "nrllm_core.store._sink": ("StoreAuditSink",),
        "nrllm_core.store._store": ("Store",),
    }
)


def __getattr__(name: str) -> Any:
    return load(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

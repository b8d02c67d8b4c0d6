"""The providers of runs that wait for a person, kept in this process for the run's next
segment instead of built again after each approval."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final, final

from nrllm_core._providers import Provider, closed

__all__ = ["KeptProviders"]

# Runs can wait for days and most are approved from nowhere near this process: past this many,
# the longest kept is let go (its next segment builds a provider as another process would).
KEPT_MAX: Final = 32


@final
class KeptProviders:
    """At most ``limit`` providers, each of one suspended run, with the section it was built
    from: a segment takes its run's provider back only when that section is still the one
    configured. A provider let go of (evicted, stale, or its run ended while it waited) is
    closed; one a segment took back is the segment's driver's to close."""

    __slots__ = ("_kept", "_limit", "_lock")

    def __init__(self, limit: int = KEPT_MAX) -> None:
        self._kept: OrderedDict[str, tuple[Mapping[str, Any], Provider]] = OrderedDict()
        self._limit = limit
        self._lock = threading.Lock()

    def keep(self, run_id: str, section: Mapping[str, Any], provider: Provider) -> None:
        """Keep ``provider`` for ``run_id``'s next segment."""
        with self._lock:
            let_go = self._pop(run_id)
            self._kept[run_id] = (dict(section), provider)
            while len(self._kept) > self._limit:
                let_go.append(self._kept.popitem(last=False)[1][1])
        _close_all(let_go, keeping=provider)

    def take(self, run_id: str, section: Mapping[str, Any]) -> Provider | None:
        """The provider kept for ``run_id`` when it was built from ``section``; ``None`` when
        none was kept (or a stale one, now closed)."""
        with self._lock:
            kept = self._kept.pop(run_id, None)
        if kept is None:
            return None
        if kept[0] == dict(section):
            return kept[1]
        _close_all([kept[1]])
        return None

    def holds(self, provider: Provider | None) -> bool:
        """Whether ``provider`` waits here for a segment (its driver must not close it)."""
        with self._lock:
            return any(kept is provider for _, kept in self._kept.values())

    def discard(self, run_id: str) -> None:
        """Close the provider kept for ``run_id``, if any: its run will not go on here."""
        with self._lock:
            let_go = self._pop(run_id)
        _close_all(let_go)

    def close(self) -> None:
        """Close every provider kept: the host that kept them is gone."""
        with self._lock:
            let_go = [provider for _, provider in self._kept.values()]
            self._kept.clear()
        _close_all(let_go)

    def _pop(self, run_id: str) -> list[Provider]:
        kept = self._kept.pop(run_id, None)
        return [] if kept is None else [kept[1]]


def _close_all(providers: list[Provider], *, keeping: Provider | None = None) -> None:
    # Outside the lock: a plugin's close may take its time.
    for provider in providers:
        if provider is not keeping:
            closed(provider)

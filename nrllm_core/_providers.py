"""Model provider kinds, registered by plugins through ``nrllm_register_providers``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

__all__ = ["ProviderRegistry"]


@final
class ProviderRegistry:
    """Collects provider factories by kind name."""

    __slots__ = ("_factories",)

    def __init__(self) -> None:
        self._factories: dict[str, Callable[..., Any]] = {}

    def register(self, kind: str, factory: Callable[..., Any]) -> None:
        """Register ``factory`` for ``kind = "<kind>"`` in a provider section, once per kind."""
        if kind in self._factories:
            raise ValueError(f"provider kind {kind!r} is already registered")
        self._factories[kind] = factory

    def get(self, kind: str) -> Callable[..., Any] | None:
        return self._factories.get(kind)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))

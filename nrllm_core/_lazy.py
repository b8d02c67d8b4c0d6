"""Public names a package loads from their modules on first use (a PEP 562 ``__getattr__``),
so that importing the package costs only what its importer uses."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

__all__ = ["by_name", "load"]


def by_name(modules: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """``{module: (name, ...)}`` turned into ``{name: module}``."""
    return {name: module for module, names in modules.items() for name in names}


def load(namespace: dict[str, Any], lazy: Mapping[str, str], name: str) -> Any:
    """``name`` from its module in ``lazy``, kept in the package's ``namespace``."""
    module = lazy.get(name)
    if module is None:
        raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    # Found once: later lookups are ordinary attribute reads.
    namespace[name] = value
    return value

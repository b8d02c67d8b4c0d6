"""The checks of a ``[providers.NAME]`` section: core's own (its ``params``, its token limits,
a kind that is installed) and its kind's (see ``ProviderRegistry.register(check=...)``)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nrllm_core._providers import ProviderCheck, ProviderKind, ProviderRegistry
from nrllm_core.log import logger

__all__ = [
    "KnownKinds",
    "ProviderKinds",
    "frozen_kinds",
    "kind_of",
    "known_kinds",
    "provider_problems",
]

# The installed provider kinds, each with what it registered, or their names alone.
ProviderKinds = Mapping[str, ProviderKind] | Iterable[str]
# Each kind, with what it registered when that is known (a name alone: not).
KnownKinds = Mapping[str, ProviderKind | None]


def provider_problems(
    name: str,
    settings: Mapping[str, Any],
    kinds: KnownKinds | None,
    config_dir: Path | None,
) -> list[str]:
    """What is wrong with the section ``name`` (``settings`` as its kind's factory gets
    them), each as ``providers.NAME.KEY: problem``. ``kinds``: the installed kinds; ``None``,
    core's own kinds."""
    from nrllm_core.providers._settings import params_problems

    where = f"providers.{name}"
    errors = [
        f"{where}.params{'.' + key if key else ''}: {problem}"
        for key, problem in params_problems(settings["params"])
    ]
    for key in ("max_tokens", "max_completion_tokens"):
        count = settings[key]
        if count is not None and count < 1:
            errors.append(f"{where}.{key}: must be 1 or more")
    if settings["max_tokens"] is not None and settings["max_completion_tokens"] is not None:
        errors.append(f"{where}: set max_tokens or max_completion_tokens, not both")
    kind = settings["kind"]
    if kinds is not None and kind not in kinds:
        installed = ", ".join(sorted(kinds)) or "none"
        errors.append(f'{where}.kind: unknown kind "{kind}"; installed kinds: {installed}')
        return errors
    registered = kind_of(kinds, kind)
    if registered is not None and registered.check is not None:
        errors.extend(_kind_problems(name, settings, registered.check, config_dir))
    return errors


def kind_of(kinds: KnownKinds | None, kind: object) -> ProviderKind | None:
    """What ``kind`` registered, among ``kinds`` (``None``: core's own)."""
    if not isinstance(kind, str):
        return None
    return (_core_kinds() if kinds is None else kinds).get(kind)


def _kind_problems(
    name: str, settings: Mapping[str, Any], check: ProviderCheck, config_dir: Path | None
) -> list[str]:
    """What the section's kind refuses in it. A check is a plugin's code: one that raises
    refuses the section, without its text."""
    where, kind = f"providers.{name}", settings["kind"]
    try:
        found = [
            (str(key), str(problem))
            for key, problem in check(name, settings, config_dir=config_dir)
        ]
    except Exception as exc:
        logger().error(
            "nrllm.provider.check_failed", provider=name, kind=kind, error=type(exc).__name__
        )
        return [f'{where}: the check of kind "{kind}" failed ({type(exc).__name__})']
    return [f"{where}.{key}: {problem}" if key else f"{where}: {problem}" for key, problem in found]


def frozen_kinds(kinds: KnownKinds | None) -> object:
    """``kinds`` as a part of a cache key."""
    return None if kinds is None else frozenset(kinds.items())


def known_kinds(given: ProviderKinds) -> KnownKinds:
    """The kinds given, each with what it registered. Given names alone, core's own kinds
    among them keep what they registered."""
    if isinstance(given, Mapping):
        return dict(given)
    return {kind: _core_kinds().get(kind) for kind in given}


@functools.cache
def _core_kinds() -> Mapping[str, ProviderKind]:
    """Core's own kinds, for a load given no installed kinds."""
    from nrllm_core.providers._kinds import register_core_kinds

    registry = ProviderRegistry()
    register_core_kinds(registry)
    return registry.registered

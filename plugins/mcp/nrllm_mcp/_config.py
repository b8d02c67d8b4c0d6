"""Which configuration the plugin reads its servers from.

Tools are registered without a host at hand: the plugin reads the file ``$NRLLM_CONFIG`` or
``./nrllm.toml`` names, unless an ``nrllm mcp`` command was given ``--config``.
"""

from __future__ import annotations

from nrllm_core import HostConfig, load_config

__all__ = ["current_config", "use_config"]

_path: list[str] = []


def use_config(path: str | None) -> None:
    """Read the servers from ``path`` from now on (``None``: the default file again)."""
    _path[:] = [] if path is None else [path]


def current_config() -> HostConfig:
    return load_config(_path[0] if _path else None)

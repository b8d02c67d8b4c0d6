"""Which configuration the plugin reads its servers from.

Tools are registered without a host at hand: inside an ``nrllm`` command the plugin reads the
file its ``--config`` names, else the one ``$NRLLM_CONFIG`` or ``./nrllm.toml`` names, as the
command does.
"""

from __future__ import annotations

import sys

from nrllm_core import HostConfig, load_config

__all__ = ["current_config"]


def current_config() -> HostConfig:
    path = None
    # Only a command already running has a context: click is not imported for it.
    click = sys.modules.get("click")
    context = None if click is None else click.get_current_context(silent=True)
    if context is not None:
        root = context.find_root().obj
        if isinstance(root, dict):
            path = root.get("config_path")
    return load_config(path)

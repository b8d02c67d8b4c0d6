"""What every command shares: input it refuses (exit 2) and the configuration it reads."""

from __future__ import annotations

import click

from nrllm_core._config import ConfigError, HostConfig, load_config

__all__ = ["BadInput", "host_config"]


class BadInput(click.ClickException):
    """A configuration, a name or a value the command cannot work with: exit status 2.

    Plugins that add commands raise it too, so every ``nrllm`` command answers bad input alike.
    """

    exit_code = 2


def host_config(ctx: click.Context) -> HostConfig:
    """The configuration named by ``--config``, ``$NRLLM_CONFIG`` or ``./nrllm.toml``, with
    each plugin's section checked by its settings class, and checked against the provider
    kinds the installed plugins register."""
    from nrllm_core.cli._main import _plugin_manager

    pm = _plugin_manager()
    try:
        return load_config(
            (ctx.find_root().obj or {}).get("config_path"),
            plugin_sections=[name for name, _ in pm.list_name_plugin()],
            settings_classes=pm.settings_classes(),
            provider_kinds=pm.provider_registry().kinds,
        )
    except ConfigError as exc:
        raise BadInput(f"invalid configuration: {exc}") from None

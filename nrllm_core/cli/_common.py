"""What every command shares: input it refuses (exit 2) and the configuration it reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from nrllm_core._config import ConfigError, HostConfig, config_loader, load_config
from nrllm_core._manager import PluginManager, make_plugin_manager
from nrllm_core.cli._terminal import echo

if TYPE_CHECKING:
    from nrllm_core._ask_values import QuestionHandler
    from nrllm_core._host import Host

__all__ = ["BadInput", "host_config", "open_host", "plugin_manager"]


class BadInput(click.ClickException):
    """A configuration, a name or a value the command cannot work with: exit status 2.

    Plugins that add commands raise it too, so every ``nrllm`` command answers bad input alike.
    """

    exit_code = 2


def host_config(ctx: click.Context) -> HostConfig:
    """The configuration named by ``--config``, ``$NRLLM_CONFIG`` or ``./nrllm.toml``, with
    each plugin's section checked by its settings class, and checked against the provider
    kinds the installed plugins register."""
    pm = plugin_manager()
    try:
        return load_config(
            (ctx.find_root().obj or {}).get("config_path"),
            plugin_sections=[name for name, _ in pm.list_name_plugin()],
            settings_classes=pm.settings_classes(),
            provider_kinds=pm.provider_registry().registered,
        )
    except ConfigError as exc:
        raise BadInput(f"invalid configuration: {exc}") from None


def check_text(option: str, value: str | None) -> None:
    """Refuse an option whose argument bytes were not UTF-8: Python hands them on as
    surrogate code points, which no store can hold."""
    if value is None:
        return
    try:
        value.encode()
    except UnicodeEncodeError:
        raise BadInput(f"{option}: not valid UTF-8; pass the name as text") from None


def plugin_manager(*, report_load_errors: bool = True) -> PluginManager:
    """The command's plugin manager, made when the command first needs it (never for
    ``--help``); each plugin that failed to load is reported then, in one line, unless the
    command reports the load errors itself.

    Every command reaches it as ``_common.plugin_manager``, so a test replaces it in one place.
    """
    ctx = click.get_current_context(silent=True)
    obj = ctx.find_root().obj if ctx is not None else None
    if isinstance(obj, dict) and "pm" in obj:
        made: PluginManager = obj["pm"]
        return made
    pm = make_plugin_manager()
    if isinstance(obj, dict):
        # Tools are registered with the configuration the command reads.
        pm.use_config(_command_config(pm, obj.get("config_path")))
    errors = pm.load_errors if report_load_errors else {}
    for name, error in sorted(errors.items()):
        echo(
            f'plugin "{name}" failed to load: {error} (nrllm plugins shows the traceback)', err=True
        )
    if isinstance(obj, dict):
        obj["pm"] = pm
    return pm


def _command_config(pm: PluginManager, path: str | None) -> Callable[[], HostConfig]:
    return config_loader(
        path,
        plugin_sections=lambda: [name for name, _ in pm.list_name_plugin()],
        settings_classes=pm.settings_classes,
        provider_kinds=lambda: pm.provider_registry().registered,
    )


def open_host(ctx: click.Context, *, on_elicitation: QuestionHandler | None = None) -> Host:
    """The host of the configuration the command reads, on the command's plugin manager;
    ``on_elicitation`` answers its tools' questions to a person."""
    # Imported here: the run machinery is most of what a command that needs no host would load.
    from nrllm_core._host import Host

    try:
        return Host.from_config(
            ctx.find_root().obj["config_path"], pm=plugin_manager(), on_elicitation=on_elicitation
        )
    except ConfigError as exc:
        raise BadInput(f"invalid configuration: {exc}") from None

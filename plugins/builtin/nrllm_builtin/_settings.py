"""The ``[builtin]`` section of the host configuration: its settings class, which core checks."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, final

import attrs

from nrllm_core import ConfigError, ToolContext, ToolResult, load_config
from nrllm_core.log import logger

__all__ = ["SECTION", "BuiltinSettings", "SettingsError", "load_settings", "settings_or_error"]

SECTION: Final = "builtin"

# The section's own errors are configuration errors: the message names the key.
SettingsError = ConfigError


def _filled(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """Names, URLs and paths are non-empty: an empty one would mean everything or nothing."""
    items = value if isinstance(value, tuple) else (value,)
    if any(item is not None and not str(item).strip() for item in items):
        raise ValueError(f"{attribute.name}: expected non-empty strings")


def _table_columns(_: object, attribute: attrs.Attribute[Any], value: tuple[str, ...]) -> None:
    if any(not table or not column for table, _, column in (e.partition(".") for e in value)):
        raise ValueError(f"{attribute.name}: expected table.column entries")


@final
@attrs.frozen(kw_only=True)
class BuiltinSettings:
    """The checked ``[builtin]`` section (core structures it through ``nrllm_settings_class``)."""

    # None: the bundled sample database in the nrllm data folder.
    records_url: str | None = attrs.field(default=None, validator=_filled)
    # None: every table that is not denied.
    read_tables: tuple[str, ...] | None = attrs.field(default=None, validator=_filled)
    deny_tables: tuple[str, ...] = attrs.field(default=(), validator=_filled)
    deny_columns: tuple[str, ...] = attrs.field(default=(), validator=_filled)
    # ``table.column`` entries: a table named here shows only its listed columns.
    allow_columns: tuple[str, ...] = attrs.field(default=(), validator=[_filled, _table_columns])
    write_tables: tuple[str, ...] = attrs.field(default=(), validator=_filled)
    source_roots: tuple[Path, ...] = ()
    log_file: Path | None = None
    env_allow: tuple[str, ...] = attrs.field(default=(), validator=_filled)
    # Hosts the SSRF guard lets through although they are private: for tests only.
    probe_allow_hosts: tuple[str, ...] = attrs.field(default=(), validator=_filled)


def load_settings(raw: Mapping[str, Any]) -> BuiltinSettings:
    """A raw ``[builtin]`` table checked as the configuration checks it, or :class:`ConfigError`
    naming each bad key."""
    config = load_config(data={SECTION: raw}, settings_classes={SECTION: BuiltinSettings})
    settings: BuiltinSettings = config.plugin_settings[SECTION]
    return settings


def settings_or_error(context: ToolContext, tool: str) -> BuiltinSettings | ToolResult:
    """The call's settings, or the error result a tool answers with when they are unusable.

    Through a host they arrive checked; a context built by hand may hold the raw table.
    """
    if isinstance(context.settings, BuiltinSettings):
        return context.settings
    try:
        return load_settings(context.settings)
    except ConfigError as exc:
        # The message names keys and expected shapes, never a configured value.
        logger().error("nrllm.builtin.settings_invalid", tool=tool, problem=str(exc))
        return ToolResult.error(f"Error: the host's [builtin] settings are invalid: {exc}")

"""The ``[builtin]`` section of the host configuration, checked: a bad value names its key."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, final

import attrs

from nrllm_core import ToolContext, ToolResult
from nrllm_core.log import logger

__all__ = ["SECTION", "BuiltinSettings", "SettingsError", "load_settings", "settings_or_error"]

SECTION: Final = "builtin"

_LISTS: Final = (
    "read_tables",
    "deny_tables",
    "deny_columns",
    "allow_columns",
    "write_tables",
    "source_roots",
    "env_allow",
    "probe_allow_hosts",
)
_STRINGS: Final = ("records_url", "log_file")
_KNOWN: Final = frozenset(_LISTS + _STRINGS)


class SettingsError(ValueError):
    """The ``[builtin]`` section cannot be used; the message names the key."""


@final
@attrs.frozen(kw_only=True)
class BuiltinSettings:
    """The checked ``[builtin]`` section."""

    # None: the bundled sample database in the nrllm data folder.
    records_url: str | None = None
    # None: every table that is not denied.
    read_tables: tuple[str, ...] | None = None
    deny_tables: tuple[str, ...] = ()
    deny_columns: tuple[str, ...] = ()
    # ``table.column`` entries: a table named here shows only its listed columns.
    allow_columns: tuple[str, ...] = ()
    write_tables: tuple[str, ...] = ()
    source_roots: tuple[Path, ...] = ()
    log_file: Path | None = None
    env_allow: tuple[str, ...] = ()
    # Hosts the SSRF guard lets through although they are private: for tests only.
    probe_allow_hosts: tuple[str, ...] = ()


def load_settings(raw: object) -> BuiltinSettings:
    """Check a raw ``[builtin]`` table; raise :class:`SettingsError` naming each bad key."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"[{SECTION}]: expected a table")
    errors = [
        f"[{SECTION}] {key}: unknown key; accepted: {', '.join(sorted(_KNOWN))}"
        for key in sorted(str(k) for k in raw)
        if key not in _KNOWN
    ]
    values: dict[str, Any] = {}
    for key in _STRINGS:
        if key in raw:
            value = raw[key]
            if type(value) is not str or not value.strip():
                errors.append(f"[{SECTION}] {key}: expected a non-empty string")
            else:
                values[key] = value
    for key in _LISTS:
        if key in raw:
            value = raw[key]
            if not isinstance(value, list | tuple) or not all(
                type(item) is str and item.strip() for item in value
            ):
                errors.append(f"[{SECTION}] {key}: expected an array of non-empty strings")
            else:
                values[key] = tuple(value)
    if any(not table or not column for table, _, column in _partitions(values)):
        errors.append(f"[{SECTION}] allow_columns: expected table.column entries")
    if errors:
        raise SettingsError("; ".join(errors))
    if "source_roots" in values:
        values["source_roots"] = tuple(Path(p) for p in values["source_roots"])
    if "log_file" in values:
        values["log_file"] = Path(values["log_file"])
    return BuiltinSettings(**values)


def _partitions(values: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    return [entry.partition(".") for entry in values.get("allow_columns", ())]


def settings_or_error(context: ToolContext, tool: str) -> BuiltinSettings | ToolResult:
    """The call's settings, or the error result a tool answers with when they are unusable."""
    try:
        return load_settings(context.settings.get(SECTION, {}))
    except SettingsError as exc:
        # The message names keys and expected shapes, never a configured value.
        logger().error("nrllm.builtin.settings_invalid", tool=tool, problem=str(exc))
        return ToolResult.error(f"Error: the host's [builtin] settings are invalid: {exc}")

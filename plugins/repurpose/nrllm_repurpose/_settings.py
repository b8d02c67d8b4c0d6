"""The ``[repurpose]`` section of ``nrllm.toml``: its settings class, which core checks."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs

from nrllm_core import ConfigError, DataClass, load_config

__all__ = ["SECTION", "RepurposeSettings", "SettingsError", "load_settings"]

SECTION: Final = "repurpose"

# The section's own errors are configuration errors: the message names the key.
SettingsError = ConfigError


def _stripped(value: str | None) -> str | None:
    return None if value is None else value.strip()


def _strip_all(hosts: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(host.strip() for host in hosts)


def _filled(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    if value is not None and not value:
        raise ValueError(f"{attribute.name}: expected a non-empty string")


def _exact_hosts(_: object, attribute: attrs.Attribute[Any], hosts: tuple[str, ...]) -> None:
    if any(not host.strip() for host in hosts):
        raise ValueError(f"{attribute.name}: expected an array of host names")
    # Exact names only: a range or a wildcard would open a whole network.
    if any(c in host for host in hosts for c in "*/"):
        raise ValueError(
            f"{attribute.name}: exact host names or IP addresses only, no ranges or wildcards"
        )


def _at_least(least: int) -> Callable[[object, attrs.Attribute[Any], int], None]:
    def check(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
        if value < least:
            raise ValueError(f"{attribute.name}: expected an integer of {least} or more")

    return check


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name}: expected a number greater than 0")


@final
@attrs.frozen(kw_only=True)
class RepurposeSettings:
    """What the tool and the worker read from ``[repurpose]``."""

    # The ``[providers]`` section that generates the formats.
    provider: str | None = attrs.field(default=None, converter=_stripped, validator=_filled)
    # What the fetched source is, for the provider's trust zone to permit or refuse.
    source_data_class: DataClass = DataClass.EDITOR_CONTENT
    # Hosts whose addresses are not checked before a fetch: unsafe outside tests.
    allow_hosts: tuple[str, ...] = attrs.field(
        default=(), converter=_strip_all, validator=_exact_hosts
    )
    # The jobs database; ``None`` is the embedded ``nrllm.db`` the audit uses by default.
    store_url: str | None = attrs.field(default=None, converter=_stripped, validator=_filled)
    # Where artifact files go; ``None`` is ``repurpose`` in the nrllm data folder.
    output_dir: str | None = attrs.field(default=None, converter=_stripped, validator=_filled)
    # A speech synthesizer registered through ``nrllm_repurpose_generators``.
    speech_provider: str | None = attrs.field(default=None, converter=_stripped, validator=_filled)
    lease_seconds: int = attrs.field(default=300, validator=_at_least(1))
    poll_seconds: float = attrs.field(default=2.0, validator=_positive)
    # Bounds on the child process that parses a fetched page or PDF. Below 128 MiB the
    # parser's interpreter and its imports alone would not fit, and every job would fail.
    parse_cpu_seconds: int = attrs.field(default=20, validator=_at_least(1))
    parse_memory_mib: int = attrs.field(default=512, validator=_at_least(128))


def load_settings(raw: Mapping[str, Any] | RepurposeSettings) -> RepurposeSettings:
    """``raw`` (the section as read, ``{}``, or already checked) checked as the configuration
    checks it, or :class:`ConfigError` naming each bad key."""
    if isinstance(raw, RepurposeSettings):
        return raw
    config = load_config(data={SECTION: raw}, settings_classes={SECTION: RepurposeSettings})
    settings: RepurposeSettings = config.plugin_settings[SECTION]
    return settings

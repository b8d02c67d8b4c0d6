"""The ``[repurpose]`` section of ``nrllm.toml``, checked key by key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from nrllm_core import DataClass

__all__ = ["SECTION", "RepurposeSettings", "SettingsError", "load_settings"]

SECTION: Final = "repurpose"


class SettingsError(ValueError):
    """The section cannot be used; the message names the key and what it accepts."""


@final
@attrs.frozen(kw_only=True)
class RepurposeSettings:
    """What the tool and the worker read from ``[repurpose]``."""

    # The ``[providers]`` section that generates the formats.
    provider: str | None = None
    # What the fetched source is, for the provider's trust zone to permit or refuse.
    source_data_class: DataClass = DataClass.EDITOR_CONTENT
    # Hosts whose addresses are not checked before a fetch: unsafe outside tests.
    allow_hosts: tuple[str, ...] = ()
    # The jobs database; ``None`` is the embedded ``nrllm.db`` the audit uses by default.
    store_url: str | None = None
    # Where artifact files go; ``None`` is ``repurpose`` in the nrllm data folder.
    output_dir: str | None = None
    # A speech synthesizer registered through ``nrllm_repurpose_generators``.
    speech_provider: str | None = None
    lease_seconds: int = 300
    poll_seconds: float = 2.0
    # Bounds on the child process that parses a fetched page or PDF.
    parse_cpu_seconds: int = 20
    parse_memory_mib: int = 512


_STRINGS: Final = ("provider", "store_url", "output_dir", "speech_provider")
# Integer keys and their smallest value. Below 128 MiB the parser's interpreter and its
# imports alone would not fit, and every job would fail.
_INTEGERS: Final = {"lease_seconds": 1, "parse_cpu_seconds": 1, "parse_memory_mib": 128}


def load_settings(raw: object) -> RepurposeSettings:
    """Check ``raw`` (the section as read, or ``{}``) and build the settings."""
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{SECTION}: expected a table")
    accepted = {a.name for a in attrs.fields(RepurposeSettings)}
    unknown = sorted(str(key) for key in raw if key not in accepted)
    if unknown:
        raise SettingsError(
            f"{SECTION}.{unknown[0]}: unknown key; accepted: {', '.join(sorted(accepted))}"
        )
    values: dict[str, Any] = {}
    for key in _STRINGS:
        if key in raw:
            value = raw[key]
            if not isinstance(value, str) or not value.strip():
                raise SettingsError(f"{SECTION}.{key}: expected a non-empty string")
            values[key] = value.strip()
    if "source_data_class" in raw:
        value = raw["source_data_class"]
        classes = {member.value: member for member in DataClass}
        if value not in classes:
            raise SettingsError(
                f"{SECTION}.source_data_class: {value!r} is not accepted; accepted values: "
                + ", ".join(classes)
            )
        values["source_data_class"] = classes[value]
    if "allow_hosts" in raw:
        hosts = raw["allow_hosts"]
        if not isinstance(hosts, list) or not all(isinstance(h, str) and h.strip() for h in hosts):
            raise SettingsError(f"{SECTION}.allow_hosts: expected an array of host names")
        # Exact names only: a range or a wildcard would open a whole network.
        if any(c in h for h in hosts for c in "*/"):
            raise SettingsError(
                f"{SECTION}.allow_hosts: exact host names or IP addresses only, no ranges"
            )
        values["allow_hosts"] = tuple(h.strip() for h in hosts)
    for key, least in _INTEGERS.items():
        if key in raw:
            number = raw[key]
            if type(number) is not int or number < least:
                raise SettingsError(f"{SECTION}.{key}: expected an integer of {least} or more")
            values[key] = number
    if "poll_seconds" in raw:
        poll = raw["poll_seconds"]
        if type(poll) not in (int, float) or poll <= 0:
            raise SettingsError(f"{SECTION}.poll_seconds: expected a number greater than 0")
        values["poll_seconds"] = float(poll)
    return RepurposeSettings(**values)

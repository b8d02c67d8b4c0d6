"""``[otel]``: the plugin's settings, apart from the sink so that loading the plugin loads no
OpenTelemetry."""

from __future__ import annotations

from typing import Final, final

import attrs

__all__ = ["OtelSettings"]

# A name a backend shows and groups by: one short line of printable text.
_AGENT_NAME_MAX_CHARS: Final = 128


def _agent_name(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if not value or len(value) > _AGENT_NAME_MAX_CHARS or not value.isprintable():
        raise ValueError(
            f"{attribute.name}: expected 1 to {_AGENT_NAME_MAX_CHARS} printable characters"
        )


@final
@attrs.frozen(kw_only=True)
class OtelSettings:
    """``[otel]``: ``enabled = false`` starts no span and records no metric; ``agent_name``
    is the ``gen_ai.agent.name`` of every ``invoke_agent`` span."""

    enabled: bool = True
    agent_name: str = attrs.field(default="nrllm", validator=_agent_name)

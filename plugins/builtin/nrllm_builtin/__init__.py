"""nrllm's first-party tools: a host's own data, code and health, each honestly classified."""

from __future__ import annotations

from nrllm_builtin._system import get_system_status
from nrllm_core import ToolRegistry, hookimpl


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    """Register the builtin tools."""
    registry.register(get_system_status)

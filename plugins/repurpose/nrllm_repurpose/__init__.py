"""Repurpose a web page or a PDF into other formats, in jobs processed outside the run."""

from __future__ import annotations

from nrllm_core import ToolRegistry, hookimpl
from nrllm_repurpose._formats import list_repurpose_formats


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    """Register the repurpose tools."""
    registry.register(list_repurpose_formats)

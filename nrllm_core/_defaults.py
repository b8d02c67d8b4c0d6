"""Core's own default hook implementations, registered by ``make_plugin_manager``."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from nrllm_core._tool import Tool, ToolContext
from nrllm_core._values import ToolResult
from nrllm_core.hookspecs import hookimpl


@hookimpl(trylast=True)
def nrllm_execute_tool(
    tool: Tool, arguments: dict[str, Any], context: ToolContext
) -> ToolResult | Awaitable[ToolResult]:
    """Run the tool in this process (an ``async def`` tool gives its coroutine); any plugin
    that answers first wins."""
    return tool.execute(arguments, context)

"""The invoke seam: the one function every executed tool call passes through."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from nrllm_core._bounds import bound_artifacts, bound_content
from nrllm_core._catalog import RegisteredTool, ToolCatalog
from nrllm_core._manager import PluginManager
from nrllm_core._payloads import RunStep, StepKind, WirePayload
from nrllm_core._recorder import RunRecorder
from nrllm_core._schema import argument_error
from nrllm_core._tool import ToolContext
from nrllm_core._values import ToolResult
from nrllm_core.log import logger

__all__ = ["invoke"]


def invoke(
    pm: PluginManager,
    tool_name: str,
    arguments: Mapping[str, Any],
    *,
    context: ToolContext,
    offered: Callable[[RegisteredTool], bool] | None = None,
    recorder: RunRecorder | None = None,
    round: int = 0,
) -> WirePayload:
    """Run one tool call and deliver its bounded result to the wire, trace and audit sinks.

    ``offered`` is the run's gate: a registered tool it refuses is never executed. ``None``
    means a direct call by the person at the keyboard, for whom every tool counts as offered.
    Only the :class:`WirePayload` is returned: artifacts leave through the trace and audit sinks.
    """
    catalog = pm.catalog()
    started = time.perf_counter()
    result = _execute(catalog, pm, tool_name, arguments, context, offered)
    # Both channels bounded; the result is rebuilt through its factories unless bounding
    # returned the very same objects, in which case the tool's result already is that rebuild.
    content = bound_content(result.content)
    if result.is_error:
        if content is not result.content:
            result = ToolResult.error(content)
    else:
        artifacts = bound_artifacts(result.artifacts)
        if content is not result.content or artifacts is not result.artifacts:
            result = ToolResult.text(content, *artifacts)
    duration_ms = (time.perf_counter() - started) * 1000
    # The name comes from the model: bounded like any text it influences.
    shown_name = bound_content(tool_name)
    wire = WirePayload(
        call_id=context.call_id,
        tool_name=shown_name,
        content=result.content,
        is_error=result.is_error,
    )
    pm.emit_wire(wire)
    step = RunStep(
        kind=StepKind.TOOL,
        round=round,
        duration_ms=duration_ms,
        fields={
            "tool_call_id": context.call_id,
            "tool_name": shown_name,
            "tool_arguments": dict(arguments) if isinstance(arguments, Mapping) else None,
            "tool_result": result.content,
            "tool_is_error": result.is_error,
        },
        tool_artifacts=result.artifacts,
    )
    (recorder or RunRecorder(pm, context.run_id)).record(step)
    return wire


def _execute(
    catalog: ToolCatalog,
    pm: PluginManager,
    tool_name: str,
    arguments: object,
    context: ToolContext,
    offered: Callable[[RegisteredTool], bool] | None,
) -> ToolResult:
    registered = catalog.get(tool_name)
    if registered is None:
        return ToolResult.error(f'Error: unknown tool "{tool_name}"')
    if offered is not None and not offered(registered):
        return ToolResult.error(f'Error: tool "{tool_name}" not permitted')
    if not isinstance(arguments, Mapping):
        return ToolResult.error(
            f'Error: invalid arguments for tool "{tool_name}": $: not an object'
        )
    # A plain dict: what JSON Schema calls an object, and a copy the tool cannot share.
    plain = dict(arguments)
    if not registered.checks_own_arguments:
        problem = (
            argument_error(registered.validator, plain) if plain else registered.no_arguments_error
        )
        if problem is not None:
            return ToolResult.error(f'Error: invalid arguments for tool "{tool_name}": {problem}')
    try:
        raw = pm.execute_tool(registered.tool, plain, context)
    except Exception:
        # The exception text can hold credentials: it goes to the log, never to the wire.
        logger().error("nrllm.tool.failed", tool=tool_name, call_id=context.call_id, exc_info=True)
        return ToolResult.error(f'Error: tool "{tool_name}" failed.')
    if type(raw) is not ToolResult:
        return ToolResult.error(f'Error: tool "{tool_name}" returned no ToolResult.')
    return raw


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def new_run_id() -> str:
    return uuid.uuid4().hex

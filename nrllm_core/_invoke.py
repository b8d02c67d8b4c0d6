"""The invoke seam: the one function every executed tool call passes through."""

from __future__ import annotations

import copy
import time
import types
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final, TypeGuard

from nrllm_core._bounds import bound_artifacts, bound_content
from nrllm_core._catalog import RegisteredTool, ToolCatalog
from nrllm_core._gate import rights_refusal
from nrllm_core._manager import PluginManager
from nrllm_core._payloads import RunStep, StepKind, WirePayload
from nrllm_core._recorder import RunRecorder
from nrllm_core._schema import argument_error
from nrllm_core._tool import ToolContext
from nrllm_core._values import ToolResult
from nrllm_core.log import logger

__all__ = ["invoke", "own_context", "refuse"]

# A tool step's ``tool_outcome``: the tool ran and answered, ran and failed, or never ran.
_OK: Final = "ok"
_ERROR: Final = "error"
_REFUSED: Final = "refused"


def invoke(
    pm: PluginManager,
    tool_name: str,
    arguments: Mapping[str, Any] | None,
    *,
    context: ToolContext,
    offered: Callable[[RegisteredTool], bool] | None = None,
    recorder: RunRecorder | None = None,
    round: int = 0,
) -> WirePayload:
    """Run one tool call and deliver its bounded result to the wire, trace and audit sinks.

    ``offered`` is the run's gate: a registered tool it refuses is never executed. ``None``
    means a direct call by the person at the keyboard, for whom every tool counts as offered
    that the actor's own rights (``context.actor``) allow.
    ``arguments`` that are not a mapping (``None`` marks ones the model sent malformed) are
    refused without running the tool. Only the :class:`WirePayload` is returned: artifacts
    leave through the trace and audit sinks.
    """
    catalog = pm.catalog()
    started = time.perf_counter()
    result, outcome = _execute(catalog, pm, tool_name, arguments, context, offered)
    return _deliver(
        pm,
        result,
        outcome,
        tool_name,
        arguments,
        context,
        recorder,
        round,
        time.perf_counter() - started,
    )


def refuse(
    pm: PluginManager,
    tool_name: str,
    arguments: Mapping[str, Any] | None,
    content: str,
    *,
    context: ToolContext,
    recorder: RunRecorder | None = None,
    round: int = 0,
) -> WirePayload:
    """Answer a call that is not executed (a person denied it, or it is no longer permitted)
    through the same bounding and delivery as every executed call."""
    return _deliver(
        pm,
        ToolResult.error(content),
        _REFUSED,
        tool_name,
        arguments,
        context,
        recorder,
        round,
        0.0,
    )


def _deliver(
    pm: PluginManager,
    result: ToolResult,
    outcome: str,
    tool_name: str,
    arguments: object,
    context: ToolContext,
    recorder: RunRecorder | None,
    round: int,
    seconds: float,
) -> WirePayload:
    # Both channels bounded; the result is rebuilt through its factories unless bounding
    # returned the very same objects, in which case the tool's result already is that rebuild.
    content = bound_content(result.content)
    if result.is_error:
        if content is not result.content or result.artifacts:
            result = ToolResult.error(content)
    else:
        artifacts = bound_artifacts(result.artifacts)
        if content is not result.content or artifacts is not result.artifacts:
            result = ToolResult.text(content, *artifacts)
    # The name comes from the model: bounded like any text it influences.
    shown_name = bound_content(tool_name)
    wire = WirePayload(
        call_id=context.call_id,
        tool_name=shown_name,
        content=result.content,
        is_error=result.is_error,
    )
    pm.emit_wire(wire)
    registered = pm.catalog().get(tool_name)
    step = RunStep(
        kind=StepKind.TOOL,
        round=round,
        duration_ms=seconds * 1000,
        fields={
            "tool_call_id": context.call_id,
            "tool_name": shown_name,
            "tool_arguments": dict(arguments) if isinstance(arguments, Mapping) else None,
            "tool_result": result.content,
            "tool_is_error": result.is_error,
            "tool_outcome": _ERROR if outcome == _OK and result.is_error else outcome,
            "tool_data_class": None if registered is None else registered.data_class.value,
            "tool_effect": None if registered is None else registered.effect.value,
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
) -> tuple[ToolResult, str]:
    """The call's result, and whether the tool ran (``ok``/``error``) or was refused."""
    registered = catalog.get(tool_name)
    if registered is None and tool_name in catalog.clashes:
        claims = [f'"{plugin}"' for plugin in catalog.clashes[tool_name]]
        owners = ("both " if len(claims) == 2 else "") + " and ".join(claims)
        return _refused(f'Error: tool "{tool_name}" is withheld: registered by {owners}')
    if registered is None:
        return _refused(f'Error: unknown tool "{tool_name}"')
    if offered is not None and not offered(registered):
        return _refused(f'Error: tool "{tool_name}" not permitted')
    if offered is None:
        # A direct call bypasses the zone and the skill, never the actor's rights.
        denied = rights_refusal(registered, context.actor)
        if denied is not None:
            logger().info("nrllm.gate.denied", tool=tool_name, reason=denied.value, direct=True)
            return _refused(f'Error: tool "{tool_name}" not permitted ({denied.value})')
    if not isinstance(arguments, Mapping):
        return _refused(f'Error: invalid arguments for tool "{tool_name}": $: not a JSON object')
    # A plain dict: what JSON Schema calls an object, and a copy the tool cannot share.
    plain = dict(arguments)
    if not registered.checks_own_arguments:
        try:
            problem = (
                argument_error(registered.validator, plain)
                if plain
                else registered.no_arguments_error
            )
        except Exception:
            # Hostile arguments can break the validator itself (a deep value's repr, say).
            logger().warning("nrllm.tool.arguments_unvalidated", tool=tool_name, exc_info=True)
            problem = "$: could not be validated"
        if problem is not None:
            return _refused(f'Error: invalid arguments for tool "{tool_name}": {problem}')
    # A tool sees its own plugin's section only, never another plugin's settings.
    try:
        raw = pm.execute_tool(registered.tool, plain, own_context(context, registered.plugin))
    except Exception:
        # The exception text can hold credentials: it goes to the log, never to the wire.
        logger().error("nrllm.tool.failed", tool=tool_name, call_id=context.call_id, exc_info=True)
        return ToolResult.error(f'Error: tool "{tool_name}" failed.'), _ERROR
    if not _well_formed(raw):
        logger().error(
            "nrllm.tool.no_tool_result",
            tool=tool_name,
            returned=type(raw).__name__,
            fix="return ToolResult.text(...) (or ToolResult.error(...)) from the tool",
        )
        return ToolResult.error(f'Error: tool "{tool_name}" returned no ToolResult.'), _ERROR
    return raw, _OK


def _refused(message: str) -> tuple[ToolResult, str]:
    return ToolResult.error(message), _REFUSED


def own_context(context: ToolContext, plugin: str) -> ToolContext:
    """The context as ``plugin``'s tool gets it: with its own plugin's entry of the host's
    settings only (its typed settings, else a read-only copy of its section, else ``{}``)."""
    everything = context.settings
    section = everything.get(plugin) if isinstance(everything, Mapping) else None
    if section is None:
        section = _NO_SETTINGS
    elif isinstance(section, Mapping):
        # A copy per call: one call cannot change what the next one reads.
        section = types.MappingProxyType(copy.deepcopy(dict(section)))
    # Built directly: attrs.evolve introspects the class on every call, on the seam's hot path.
    return ToolContext(
        run_id=context.run_id, call_id=context.call_id, actor=context.actor, settings=section
    )


_NO_SETTINGS: Final[Mapping[str, Any]] = types.MappingProxyType({})


def _well_formed(raw: object) -> TypeGuard[ToolResult]:
    """A real ToolResult whose fields have their declared types, however it was made."""
    return (
        type(raw) is ToolResult
        and type(raw.content) is str
        and type(raw.is_error) is bool
        and type(raw.artifacts) is tuple
    )


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def new_run_id() -> str:
    return uuid.uuid4().hex

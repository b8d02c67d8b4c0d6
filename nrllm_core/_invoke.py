"""The invoke seam: the one function every executed tool call passes through."""

from __future__ import annotations

import copy
import inspect
import threading
import time
import types
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeGuard, final

import attrs

from nrllm_core._bounds import bound_artifacts, bound_content
from nrllm_core._catalog import RegisteredTool
from nrllm_core._gate import rights_refusal
from nrllm_core._loop_thread import TimedOut, loop_thread
from nrllm_core._manager import PluginManager
from nrllm_core._payloads import RunStep, StepKind, WirePayload, builder
from nrllm_core._recorder import RunRecorder
from nrllm_core._schema import argument_error
from nrllm_core._tool import NO_SETTINGS, ToolContext
from nrllm_core._values import Integrity, ToolResult
from nrllm_core.log import logger

if TYPE_CHECKING:
    from anyio import CapacityLimiter

    from nrllm_core._handles import Keeper

__all__ = ["ainvoke", "invoke", "own_context", "refuse"]

# A tool step's ``tool_outcome``: the tool ran and answered, ran and failed, ran past its
# timeout, or never ran.
_OK: Final = "ok"
_ERROR: Final = "error"
_TIMEOUT: Final = "timeout"
REFUSED: Final = "refused"


@final
@attrs.frozen(kw_only=True)
class Admitted:
    """A call the seam let through: it runs with these checked arguments and this context."""

    registered: RegisteredTool
    # A plain dict: what JSON Schema calls an object, and a copy the tool cannot share.
    arguments: dict[str, Any]
    # The tool's own context: its plugin's settings only.
    context: ToolContext


@final
@attrs.frozen(kw_only=True)
class Executed:
    """What running an admitted call gave: its result, ``ok``/``error``, and how long it took."""

    result: ToolResult
    outcome: str
    seconds: float


# What every executed call builds, through builders instead of the classes: the same frozen
# objects at about half the cost (see ``builder``).
_new_admitted: Final = builder(Admitted)
_new_executed: Final = builder(Executed)
_new_context: Final = builder(ToolContext)
_new_wire: Final = builder(WirePayload)
_new_step: Final = builder(RunStep)


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
    leave through the trace and audit sinks. An ``async def`` tool runs to its end on a
    private event loop thread.
    """
    admitted = admit(pm, tool_name, arguments, context, offered)
    done = execute(pm, admitted) if isinstance(admitted, Admitted) else _refusal(admitted)
    return _delivered(pm, done, tool_name, arguments, context, recorder, round)


async def ainvoke(
    pm: PluginManager,
    tool_name: str,
    arguments: Mapping[str, Any] | None,
    *,
    context: ToolContext,
    offered: Callable[[RegisteredTool], bool] | None = None,
    recorder: RunRecorder | None = None,
    round: int = 0,
    limiter: CapacityLimiter | None = None,
) -> WirePayload:
    """:func:`invoke` from an event loop: the same checks, bounding and delivery; an
    ``async def`` tool is awaited here, a sync one runs in a worker thread (from ``limiter``,
    else anyio's default pool)."""
    admitted = admit(pm, tool_name, arguments, context, offered)
    if isinstance(admitted, Admitted):
        done = await aexecute(pm, admitted, limiter)
    else:
        done = _refusal(admitted)
    return _delivered(pm, done, tool_name, arguments, context, recorder, round)


def _refusal(result: ToolResult) -> Executed:
    return Executed(result=result, outcome=REFUSED, seconds=0.0)


def _delivered(
    pm: PluginManager,
    done: Executed,
    tool_name: str,
    arguments: object,
    context: ToolContext,
    recorder: RunRecorder | None,
    round: int,
) -> WirePayload:
    wire, step = deliver(
        pm, done.result, done.outcome, tool_name, arguments, context, round, done.seconds
    )
    (recorder or RunRecorder(pm, context.run_id)).record(step)
    return wire


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
    return _delivered(
        pm, _refusal(ToolResult.error(content)), tool_name, arguments, context, recorder, round
    )


def deliver(
    pm: PluginManager,
    result: ToolResult,
    outcome: str,
    tool_name: str,
    arguments: object,
    context: ToolContext,
    round: int,
    seconds: float,
    *,
    policy: Mapping[str, Any] | None = None,
    kept: Keeper | None = None,
) -> tuple[WirePayload, RunStep]:
    """Bound both channels, hand the wire its payload, and build the call's step to record
    (with the ``policy``'s decision on the call, when it made one). ``kept`` turns a bounded
    result the run keeps as a handle into what the wire carries instead."""
    # Both channels bounded; the result is rebuilt through its factories unless bounding
    # returned the very same objects, in which case the tool's result already is that rebuild.
    content = bound_content(result.content)
    if result.is_error:
        if content is not result.content or result.artifacts:
            result = ToolResult.error(content)
    else:
        artifacts = bound_artifacts(result.artifacts) if result.artifacts else ()
        if content is not result.content or artifacts is not result.artifacts:
            result = ToolResult.text(
                content, *artifacts, integrity=result.integrity, handle=result.handle
            )
    if kept is not None:
        result = kept(result)
    # The name comes from the model: bounded like any text it influences.
    shown_name = bound_content(tool_name)
    wire = _new_wire(
        call_id=context.call_id,
        tool_name=shown_name,
        content=result.content,
        is_error=result.is_error,
    )
    pm.emit_wire(wire)
    registered = pm.catalog().tools.get(tool_name)
    step = _new_step(
        kind=StepKind.TOOL,
        round=round,
        duration_ms=seconds * 1000,
        fields={
            "tool_call_id": context.call_id,
            "tool_name": shown_name,
            "tool_arguments": dict(arguments) if _is_mapping(arguments) else None,
            "tool_result": result.content,
            "tool_is_error": result.is_error,
            "tool_outcome": _ERROR if outcome == _OK and result.is_error else outcome,
            # ``_value_``: the plain string, without ``.value``'s descriptor call.
            "tool_description": None if registered is None else registered.audited_description,
            "tool_data_class": None if registered is None else registered.data_class._value_,
            "tool_effect": None if registered is None else registered.effect._value_,
            # Who wrote what went on the wire; None when no tool ran (nrllm's own refusal).
            "tool_integrity": (
                None
                if registered is None or outcome == REFUSED
                else result_integrity(registered, result)._value_
            ),
            "policy": policy,
            "handle": None if kept is None or kept.handle is None else kept.handle.id,
        },
        tool_artifacts=result.artifacts,
    )
    return wire, step


def result_integrity(registered: RegisteredTool, result: ToolResult) -> Integrity:
    """Who wrote a result a tool returned: as the result says, else as the tool declares."""
    return registered.integrity if result.integrity is None else result.integrity


def admit(
    pm: PluginManager,
    tool_name: str,
    arguments: object,
    context: ToolContext,
    offered: Callable[[RegisteredTool], bool] | None,
) -> Admitted | ToolResult:
    """The call ready to run, or the error result that refuses it without running the tool."""
    catalog = pm.catalog()
    registered = catalog.tools.get(tool_name)
    if registered is None and tool_name in catalog.clashes:
        claims = [f'"{plugin}"' for plugin in catalog.clashes[tool_name]]
        owners = ("both " if len(claims) == 2 else "") + " and ".join(claims)
        return ToolResult.error(f'Error: tool "{tool_name}" is withheld: registered by {owners}')
    if registered is None:
        return ToolResult.error(f'Error: unknown tool "{tool_name}"')
    if offered is not None and not offered(registered):
        return ToolResult.error(f'Error: tool "{tool_name}" not permitted')
    if offered is None:
        # A direct call bypasses the zone and the skill, never the actor's rights.
        denied = rights_refusal(registered, context.actor)
        if denied is not None:
            logger().info("nrllm.gate.denied", tool=tool_name, reason=denied.value, direct=True)
            return ToolResult.error(f'Error: tool "{tool_name}" not permitted ({denied.value})')
    if not _is_mapping(arguments):
        return ToolResult.error(
            f'Error: invalid arguments for tool "{tool_name}": $: not a JSON object'
        )
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
            return ToolResult.error(f'Error: invalid arguments for tool "{tool_name}": {problem}')
    # A tool sees its own plugin's section only, never another plugin's settings.
    return _new_admitted(
        registered=registered, arguments=plain, context=own_context(context, registered)
    )


def execute(pm: PluginManager, admitted: Admitted, timeout: float | None = None) -> Executed:
    """Run an admitted call here (an awaitable it returns runs on the private event loop
    thread, cancelled past ``timeout``)."""
    started = time.perf_counter()
    try:
        raw = start(pm, admitted)
        # The usual answer, a ToolResult, is told by its type before inspect's abc checks.
        if type(raw) is not ToolResult and inspect.isawaitable(raw):
            raw = loop_thread().run(raw, timeout)
    except TimedOut:
        return timed_out(admitted, timeout or 0.0, time.perf_counter() - started)
    except Exception:
        return failed(admitted, started)
    return checked(admitted, raw, started)


async def aexecute(
    pm: PluginManager, admitted: Admitted, limiter: CapacityLimiter | None
) -> Executed:
    """Run an admitted call from an event loop: a coroutine tool here, a sync one in a worker
    thread that ``limiter`` lends."""
    started = time.perf_counter()
    try:
        if admitted.registered.is_async:
            raw = start(pm, admitted)
        else:
            import anyio.to_thread

            # Abandoned on cancellation: a timed-out sync tool cannot hold its run. Boxed:
            # trio refuses a coroutine (a hook's answer) as a worker thread's return value.
            (raw,) = await anyio.to_thread.run_sync(
                lambda: (start(pm, admitted),), limiter=limiter, abandon_on_cancel=True
            )
        if type(raw) is not ToolResult and inspect.isawaitable(raw):
            raw = await raw
    except Exception:
        return failed(admitted, started)
    return checked(admitted, raw, started)


def start(pm: PluginManager, admitted: Admitted) -> object:
    """The ``nrllm_execute_tool`` hook's answer: a result, or an awaitable of one."""
    return pm.execute_tool(admitted.registered.tool, admitted.arguments, admitted.context)


def failed(admitted: Admitted, started: float) -> Executed:
    """A call whose tool raised. The exception text can hold credentials: it goes to the log,
    never to the wire."""
    name = admitted.registered.name
    logger().error("nrllm.tool.failed", tool=name, call_id=admitted.context.call_id, exc_info=True)
    return Executed(
        result=ToolResult.error(f'Error: tool "{name}" failed.'),
        outcome=_ERROR,
        seconds=time.perf_counter() - started,
    )


def timed_out(admitted: Admitted, timeout: float, seconds: float) -> Executed:
    """A call still running past ``[run] tool_timeout_seconds``: it fails alone."""
    name = admitted.registered.name
    logger().warning("nrllm.tool.timed_out", tool=name, call_id=admitted.context.call_id)
    return Executed(
        result=ToolResult.error(f'Error: tool "{name}" timed out after {timeout:g} seconds.'),
        outcome=_TIMEOUT,
        seconds=seconds,
    )


def cancelled(*, started: bool) -> Executed:
    """A call the run's cancellation stopped: while it ran (``error``), or before it started
    (``refused``: the tool never ran)."""
    return Executed(
        result=ToolResult.error("Error: the run was cancelled before this call finished."),
        outcome=_ERROR if started else REFUSED,
        seconds=0.0,
    )


def checked(admitted: Admitted, raw: object, started: float) -> Executed:
    seconds = time.perf_counter() - started
    if not _well_formed(raw):
        name = admitted.registered.name
        logger().error(
            "nrllm.tool.no_tool_result",
            tool=name,
            returned=type(raw).__name__,
            fix="return ToolResult.text(...) (or ToolResult.error(...)) from the tool",
        )
        result = ToolResult.error(f'Error: tool "{name}" returned no ToolResult.')
        return Executed(result=result, outcome=_ERROR, seconds=seconds)
    return _new_executed(result=raw, outcome=_OK, seconds=seconds)


def watched(
    admitted: Admitted,
    on_progress: Callable[[float, float | None, str | None], None] | None,
    abandoned: threading.Event,
) -> Admitted:
    """``admitted`` whose context carries a run's ``on_progress`` and ``abandoned``, and what
    the call may ask of its run bound to the admitted tool."""
    context, tool = admitted.context, admitted.registered
    asks = None if context.asks is None else context.asks.of(tool.name, tool.data_class)
    # Built directly, as ``own_context`` does: every call of a turn goes through here.
    return _new_admitted(
        registered=admitted.registered,
        arguments=admitted.arguments,
        context=_new_context(
            run_id=context.run_id,
            call_id=context.call_id,
            actor=context.actor,
            settings=context.settings,
            deps=context.deps,
            on_progress=on_progress,
            abandoned=abandoned,
            asks=asks,
        ),
    )


def own_context(context: ToolContext, registered: RegisteredTool) -> ToolContext:
    """The context as ``registered``'s tool gets it: with its own plugin's entry of the host's
    settings only (its typed settings, else a read-only copy of its section, else ``{}``)."""
    everything = context.settings
    if everything is NO_SETTINGS:
        # Nothing to narrow: the context already is the tool's own (frozen, so it can be shared).
        return context
    section = everything.get(registered.plugin) if _is_mapping(everything) else None
    if section is None:
        section = NO_SETTINGS
    elif isinstance(section, Mapping):
        # A copy per call: one call cannot change what the next one reads.
        section = types.MappingProxyType(copy.deepcopy(dict(section)))
    # Built directly: attrs.evolve introspects the class on every call, on the seam's hot path.
    return _new_context(
        run_id=context.run_id,
        call_id=context.call_id,
        actor=context.actor,
        settings=section,
        deps=context.deps,
        on_progress=context.on_progress,
        abandoned=context.abandoned,
        asks=context.asks,
    )


_PLAIN_MAPPINGS: Final = (dict, types.MappingProxyType)


def _is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    # The usual mappings are told by their exact type: an abc check costs several times more.
    return type(value) in _PLAIN_MAPPINGS or isinstance(value, Mapping)


def _well_formed(raw: object) -> TypeGuard[ToolResult]:
    """A real ToolResult whose fields have their declared types, however it was made."""
    return (
        type(raw) is ToolResult
        and type(raw.content) is str
        and type(raw.is_error) is bool
        and type(raw.artifacts) is tuple
        and type(raw.handle) is bool
    )


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def new_run_id() -> str:
    return uuid.uuid4().hex

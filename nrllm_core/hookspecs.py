"""Hook specifications for nrllm plugins.

nrllm calls these hooks; plugins implement them with ``@nrllm_core.hookimpl`` in a module named
by an entry point of the group ``nrllm``. Every hook is called with keyword arguments, and an
implementation may accept fewer arguments than its specification.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from collections.abc import Mapping

    import click

    from nrllm_core._catalog import ToolRegistry
    from nrllm_core._config import StoreConfig
    from nrllm_core._payloads import AuditRecord, TraceEvent, WirePayload
    from nrllm_core._providers import ProviderRegistry
    from nrllm_core._tool import Tool, ToolContext
    from nrllm_core._values import DataClass, ToolResult

PROJECT_NAME = "nrllm"

_spec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# -- Discovery ---------------------------------------------------------------------------------


@_spec
def nrllm_register_tools(registry: ToolRegistry, settings: Any, store: StoreConfig) -> None:
    """Register the plugin's tools.

    Call ``registry.register(tool)`` with a :class:`~nrllm_core.Tool` instance or a function
    decorated with :func:`~nrllm_core.tool`. A tool name registered by two plugins is withheld
    from both. A plugin whose tools depend on its configuration names ``settings`` (and
    ``store``): the catalog is then built with the host's configuration
    (``PluginManager.use_config``; a ``Host`` gives its own), and built again when either
    changed as a run segment starts; when that configuration cannot be read, the plugin
    registers nothing.

    :param registry: collects this plugin's tools.
    :param settings: this plugin's own section, as ``nrllm_settings`` receives it: an instance
        of its ``nrllm_settings_class`` class, else a read-only mapping (``{}`` when the
        configuration has none, or the manager was given no configuration).
    :param store: the host's ``[store]`` section, for a plugin that keeps its own tables in
        the audit's database.
    """


@_spec
def nrllm_tool_data_class(tool: Tool) -> DataClass | None:
    """Declare a data class for a tool, possibly another plugin's.

    All answers are collected. The effective class is the strictest of the tool's own
    ``data_class`` and every answer, so an answer can tighten a tool, never loosen it.

    :param tool: the registered tool.
    :returns: a data class, or ``None`` for no opinion.
    """


@_spec
def nrllm_settings_class(plugin_name: str) -> type[Any] | None:
    """Declare the attrs class of this plugin's settings section, ``[plugin_name]``.

    Core asks each implementation on its own, passing the name the plugin is registered under
    (its entry-point name), which is the name of its section. Core structures and checks the
    section with that class when the configuration loads, so a bad value is refused there,
    naming the file and the key, and the plugin's tools receive the instance as
    ``ToolContext.settings`` (the class's defaults when the file has no section). Checks
    beyond the field types belong in the class's attrs validators and converters; a validator
    names its field in the message (``"allow_hosts: no ranges"``).

    :param plugin_name: the plugin's registration name, which is its section's name.
    :returns: a frozen attrs class whose fields are the section's keys, or ``None`` for a
        plugin whose tools receive the section as a read-only mapping.
    """


# -- Execution ---------------------------------------------------------------------------------


@_spec(firstresult=True)
def nrllm_execute_tool(
    tool: Tool, arguments: dict[str, Any], context: ToolContext
) -> ToolResult | Awaitable[ToolResult] | None:
    """Execute one tool call.

    Stops at the first non-``None`` result. Core's default implementation (``trylast``) calls
    ``tool.execute``; a plugin can run tools elsewhere (a sandbox, a remote host). It may
    return an awaitable of the result (what an ``async def`` tool's ``execute`` gives): the
    driver awaits it (the sync host on a private event loop thread). For an ``async def``
    tool the hook is called on the event loop, so an implementation must not block there.
    Whatever it returns still passes through the invoke seam, which bounds both channels.

    :param tool: the tool to run.
    :param arguments: the call's arguments, as the model or the caller sent them.
    :param context: who the call acts for and in which run.
    :returns: the tool's result (or an awaitable of it), or ``None`` to leave the call to the
        next implementation.
    """


# -- Sinks: each receives only its own payload type and must not raise -------------------------


@_spec
def nrllm_wire(payload: WirePayload) -> None:
    """Receive what the model provider gets for one tool call.

    The payload has no artifact field at all. Must not raise: a failure is logged as
    ``nrllm.sink.failed`` and the other sinks still run.

    :param payload: call id, tool name, bounded content, error flag.
    """


@_spec
def nrllm_trace(event: TraceEvent) -> None:
    """Receive one run step, unfiltered, for the live stream and the inspector.

    Must not raise: a failure is logged as ``nrllm.sink.failed`` and the other sinks still run.

    :param event: the run id and the step, with bounded artifacts.
    """


@_spec
def nrllm_audit(record: AuditRecord) -> None:
    """Receive the copy of one run step that is persisted.

    The payload is already filtered by the configured privacy level. Raise only to say the
    step could not be stored: the failure is logged as ``nrllm.sink.failed``, the other sinks
    still run, and a run whose writing tool's step was not stored stops as
    ``audit_unavailable`` (fail closed).

    :param record: the run id and the step's payload as it may be stored.
    """


@_spec(firstresult=True)
def nrllm_trace_context(run_id: str) -> Mapping[str, str] | None:
    """The W3C trace context of a run whose turn is being suspended, to resume it in its trace.

    Called after the run's ``suspension`` audit record. Core stores the answer next to the
    sealed state (never inside it) and hands it back as ``trace_context`` in the ``start``
    record of the resumed segment, in whatever process the approval happens. Only a valid
    ``traceparent`` and a bounded ``tracestate`` are kept; anything else is dropped. Stops at
    the first non-``None`` result. Must not raise.

    :param run_id: the run being suspended.
    :returns: ``{"traceparent": ..., "tracestate": ...}`` (``tracestate`` optional), or ``None``.
    """


@_spec
def nrllm_settings(settings: Any) -> None:
    """Receive this plugin's own configuration section, before each run segment's first record.

    Each implementation is called on its own with the section named like the plugin (its
    entry-point name): an instance of its ``nrllm_settings_class`` class, else a read-only
    mapping (``{}`` when the file has none), never another plugin's section. A sink uses it to
    learn its switches. Must not raise: a failure is logged as ``nrllm.sink.failed``.

    :param settings: the ``[<plugin name>]`` section.
    """


# -- Extension points for hosts ----------------------------------------------------------------


@_spec
def nrllm_register_providers(registry: ProviderRegistry) -> None:
    """Register model provider kinds.

    Call ``registry.register(kind, factory)``; a ``[providers.NAME]`` section with
    ``kind = "..."`` is built by that factory.

    :param registry: collects provider kinds.
    """


@_spec
def nrllm_register_commands(cli: click.Group) -> None:
    """Add subcommands to the ``nrllm`` command.

    Called when the command starts, never at import.

    :param cli: the ``nrllm`` click group.
    """

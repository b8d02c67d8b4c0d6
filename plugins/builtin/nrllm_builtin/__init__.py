"""nrllm's first-party tools: a host's own data, code and health, each honestly classified."""

from __future__ import annotations

from nrllm_builtin._code import ReadSource, SearchCode
from nrllm_builtin._env import GetEnv
from nrllm_builtin._logs import FetchLogs
from nrllm_builtin._plugins import ListPlugins
from nrllm_builtin._probe import ProbeUrl
from nrllm_builtin._records import GetTableSchema, ListTables, ReadRecords, SearchRecords
from nrllm_builtin._settings import BuiltinSettings
from nrllm_builtin._system import get_system_status
from nrllm_builtin._writes import CreateRecordDraft, UpdateRecord
from nrllm_core import ToolRegistry, hookimpl


@hookimpl
def nrllm_settings_class(plugin_name: str) -> type[BuiltinSettings]:
    """``[builtin]`` is checked by core when the configuration loads."""
    return BuiltinSettings


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    """Register the builtin tools."""
    registry.register(ReadRecords())
    registry.register(SearchRecords())
    registry.register(ListTables())
    registry.register(GetTableSchema())
    registry.register(ReadSource())
    registry.register(SearchCode())
    registry.register(get_system_status)
    registry.register(ListPlugins())
    registry.register(FetchLogs())
    registry.register(GetEnv())
    registry.register(ProbeUrl())
    registry.register(CreateRecordDraft())
    registry.register(UpdateRecord())

"""nrllm: governed LLM tool calling on pluggy. Two channels, one seam.

Importing this package loads no plugin, reads no environment variable and configures nothing.
What a tool author's module needs (``tool``, ``ToolResult`` and the other value types,
``hookimpl``) loads with it; every other public name loads from its module on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from nrllm_core._lazy import by_name, load
from nrllm_core._tool import Tool, ToolContext, tool
from nrllm_core._values import (
    Actor,
    ArtifactType,
    DataClass,
    Effect,
    Integrity,
    ToolArtifact,
    ToolResult,
    TrustZone,
)
from nrllm_core.hookspecs import hookimpl

if TYPE_CHECKING:
    from nrllm_core._ask_values import AskRefused, PersonAnswer, PersonAnswered, Question, ToolAsks
    from nrllm_core._async_host import AsyncHost
    from nrllm_core._bounds import (
        ARTIFACTS_MAX_BYTES,
        ARTIFACTS_MAX_DEPTH,
        CONTENT_MAX_BYTES,
        bound_artifacts,
        bound_content,
    )
    from nrllm_core._catalog import RegisteredTool, ToolCatalog, ToolRegistry, WithheldTool
    from nrllm_core._config import (
        ActorConfig,
        ApprovalsConfig,
        ConfigError,
        DefaultsConfig,
        HostConfig,
        PrivacyConfig,
        ProviderConfig,
        RunConfig,
        SkillConfig,
        StoreConfig,
        ToolsConfig,
        load_config,
    )
    from nrllm_core._direct_flow import InvokeOptions, NoApprover, SubmitOptions
    from nrllm_core._events import (
        Finished,
        StreamEvent,
        Suspended,
        ToolAnswered,
        ToolCallStarted,
        ToolProgress,
    )
    from nrllm_core._flows import RunOptions
    from nrllm_core._gate import (
        DenialReason,
        GateDecision,
        GateReport,
        decide,
        gate_step,
        live_gate,
    )
    from nrllm_core._host import Host
    from nrllm_core._invoke import ainvoke, invoke
    from nrllm_core._label import LabelSource
    from nrllm_core._loop import PendingCall
    from nrllm_core._manager import PluginManager, PluginRecord, make_plugin_manager
    from nrllm_core._messages import (
        ChatMessage,
        Delta,
        ProviderAnswer,
        ProviderError,
        Replay,
        Role,
        RunTurn,
        Stop,
        StreamRestarted,
        TextDelta,
        ThinkingDelta,
        ToolCall,
        ToolSpec,
        Usage,
    )
    from nrllm_core._outcome import RunOutcome
    from nrllm_core._payloads import AuditRecord, RunStep, StepKind, TraceEvent, WirePayload
    from nrllm_core._policy import ApproveWrites, PolicyAction, PolicyConfig, PolicyRule
    from nrllm_core._privacy import PrivacyLevel
    from nrllm_core._provider_sections import ProviderKinds
    from nrllm_core._providers import (
        Provider,
        ProviderCheck,
        ProviderConfigError,
        ProviderEndpoint,
        ProviderFactory,
        ProviderKind,
        ProviderRegistry,
        ToolCheck,
        build_provider,
    )
    from nrllm_core._recorder import RunRecorder
    from nrllm_core._serde import to_json
    from nrllm_core._status import RunStatus
    from nrllm_core._suspension import ApprovalRefused, RefusalReason

__all__ = [
    "ARTIFACTS_MAX_BYTES",
    "ARTIFACTS_MAX_DEPTH",
    "CONTENT_MAX_BYTES",
    "Actor",
    "ActorConfig",
    "ApprovalRefused",
    "ApprovalsConfig",
    "ApproveWrites",
    "ArtifactType",
    "AskRefused",
    "AsyncHost",
    "AuditRecord",
    "ChatMessage",
    "ConfigError",
    "DataClass",
    "DefaultsConfig",
    "Delta",
    "DenialReason",
    "Effect",
    "Finished",
    "GateDecision",
    "GateReport",
    "Host",
    "HostConfig",
    "Integrity",
    "InvokeOptions",
    "LabelSource",
    "NoApprover",
    "PendingCall",
    "PersonAnswer",
    "PersonAnswered",
    "PluginManager",
    "PluginRecord",
    "PolicyAction",
    "PolicyConfig",
    "PolicyRule",
    "PrivacyConfig",
    "PrivacyLevel",
    "Provider",
    "ProviderAnswer",
    "ProviderCheck",
    "ProviderConfig",
    "ProviderConfigError",
    "ProviderEndpoint",
    "ProviderError",
    "ProviderFactory",
    "ProviderKind",
    "ProviderKinds",
    "ProviderRegistry",
    "Question",
    "RefusalReason",
    "RegisteredTool",
    "Replay",
    "Role",
    "RunConfig",
    "RunOptions",
    "RunOutcome",
    "RunRecorder",
    "RunStatus",
    "RunStep",
    "RunTurn",
    "SkillConfig",
    "StepKind",
    "Stop",
    "StoreConfig",
    "StreamEvent",
    "StreamRestarted",
    "SubmitOptions",
    "Suspended",
    "TextDelta",
    "ThinkingDelta",
    "Tool",
    "ToolAnswered",
    "ToolArtifact",
    "ToolAsks",
    "ToolCall",
    "ToolCallStarted",
    "ToolCatalog",
    "ToolCheck",
    "ToolContext",
    "ToolProgress",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "ToolsConfig",
    "TraceEvent",
    "TrustZone",
    "Usage",
    "WirePayload",
    "WithheldTool",
    "ainvoke",
    "bound_artifacts",
    "bound_content",
    "build_provider",
    "decide",
    "gate_step",
    "hookimpl",
    "invoke",
    "live_gate",
    "load_config",
    "make_plugin_manager",
    "to_json",
    "tool",
]


# The names that load on first use, by the module each comes from: the imports above, under
# TYPE_CHECKING, are what mypy sees of them (a test checks that the two agree).
_LAZY_MODULES: Final = {
    "nrllm_core._ask_values": (
        "AskRefused",
        "PersonAnswer",
        "PersonAnswered",
        "Question",
        "ToolAsks",
    ),
    "nrllm_core._async_host": ("AsyncHost",),
    "nrllm_core._bounds": (
        "ARTIFACTS_MAX_BYTES",
        "ARTIFACTS_MAX_DEPTH",
        "CONTENT_MAX_BYTES",
        "bound_artifacts",
        "bound_content",
    ),
    "nrllm_core._catalog": (
        "RegisteredTool",
        "ToolCatalog",
        "ToolRegistry",
        "WithheldTool",
    ),
    "nrllm_core._config": (
        "ActorConfig",
        "ApprovalsConfig",
        "ConfigError",
        "DefaultsConfig",
        "HostConfig",
        "PrivacyConfig",
        "ProviderConfig",
        "RunConfig",
        "SkillConfig",
        "StoreConfig",
        "ToolsConfig",
        "load_config",
    ),
    "nrllm_core._direct_flow": ("InvokeOptions", "NoApprover", "SubmitOptions"),
    "nrllm_core._events": (
        "Finished",
        "StreamEvent",
        "Suspended",
        "ToolAnswered",
        "ToolCallStarted",
        "ToolProgress",
    ),
    "nrllm_core._gate": (
        "DenialReason",
        "GateDecision",
        "GateReport",
        "decide",
        "gate_step",
        "live_gate",
    ),
    "nrllm_core._host": ("Host",),
    "nrllm_core._invoke": (
        "ainvoke",
        "invoke",
    ),
    "nrllm_core._manager": (
        "PluginManager",
        "PluginRecord",
        "make_plugin_manager",
    ),
    "nrllm_core._messages": (
        "ChatMessage",
        "Delta",
        "ProviderAnswer",
        "ProviderError",
        "Replay",
        "Role",
        "RunTurn",
        "Stop",
        "StreamRestarted",
        "TextDelta",
        "ThinkingDelta",
        "ToolCall",
        "ToolSpec",
        "Usage",
    ),
    "nrllm_core._outcome": ("RunOutcome",),
    "nrllm_core._label": ("LabelSource",),
    "nrllm_core._policy": ("ApproveWrites", "PolicyAction", "PolicyConfig", "PolicyRule"),
    "nrllm_core._privacy": ("PrivacyLevel",),
    "nrllm_core._payloads": (
        "AuditRecord",
        "RunStep",
        "StepKind",
        "TraceEvent",
        "WirePayload",
    ),
    "nrllm_core._providers": (
        "Provider",
        "ProviderCheck",
        "ProviderConfigError",
        "ProviderEndpoint",
        "ProviderFactory",
        "ProviderKind",
        "ProviderRegistry",
        "ToolCheck",
        "build_provider",
    ),
    "nrllm_core._recorder": ("RunRecorder",),
    "nrllm_core._serde": ("to_json",),
    "nrllm_core._status": ("RunStatus",),
    "nrllm_core._suspension": (
        "ApprovalRefused",
        "RefusalReason",
    ),
    "nrllm_core._flows": ("RunOptions",),
    "nrllm_core._loop": ("PendingCall",),
    "nrllm_core._provider_sections": ("ProviderKinds",),
}
_LAZY: Final = by_name(_LAZY_MODULES)


def __getattr__(name: str) -> Any:
    if name == "__version__":
        from importlib.metadata import version

        return version("nrllm-core")
    return load(globals(), _LAZY, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

"""The one gate: which registered tools a run may be offered, each refusal with one reason."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from nrllm_core._catalog import RegisteredTool, ToolCatalog
from nrllm_core._config import HostConfig
from nrllm_core._messages import ToolSpec
from nrllm_core._payloads import RunStep, StepKind
from nrllm_core._providers import ProviderKind, ToolCheck
from nrllm_core._values import Actor, DataClass, TrustZone
from nrllm_core.log import logger

if TYPE_CHECKING:
    from nrllm_core._manager import PluginManager

__all__ = [
    "DenialReason",
    "GateDecision",
    "GateReport",
    "decide",
    "gate_step",
    "live_gate",
    "rights_refusal",
]


class DenialReason(enum.StrEnum):
    """Why a tool is not offered, in the order the gate checks."""

    NOT_REGISTERED = "notRegistered"
    TOOL_DISABLED = "toolDisabled"
    REQUIRES_ADMIN = "requiresAdmin"
    CONFIGURATION_GROUP = "configurationGroup"
    TRUST_ZONE = "trustZone"
    # The provider's API cannot express the tool (its schema, its name): see ``detail``.
    SCHEMA_UNSUPPORTED = "schemaUnsupported"


@final
@attrs.frozen(kw_only=True)
class GateDecision:
    """The gate's answer for one tool; never holds a call's arguments or content.

    ``observed`` is ``trustZone`` when observe mode offered a tool its zone would refuse.
    """

    tool: str
    offered: bool
    reason: DenialReason | None
    observed: DenialReason | None
    data_class: DataClass
    # None for a name that is not registered: there is no tool whose code could say.
    data_class_source: str | None
    zone: TrustZone
    ceiling: DataClass
    # What the provider's API cannot express, for ``schemaUnsupported`` (keyword and path).
    detail: str | None = None


@final
@attrs.frozen(kw_only=True)
class GateReport:
    """One gate pass: the run's provider, zone, ceiling and skill, and a decision per tool."""

    provider: str | None
    zone: TrustZone
    ceiling: DataClass
    skill: str | None
    decisions: tuple[GateDecision, ...]

    @property
    def offered_names(self) -> tuple[str, ...]:
        return tuple(d.tool for d in self.decisions if d.offered)

    def permits(self, tool: RegisteredTool) -> bool:
        """Whether this pass offered ``tool``; a tool it did not decide is refused."""
        return tool.name in self.offered_names


@final
@attrs.frozen(kw_only=True)
class _Run:
    """What every decision of one pass shares, worked out once."""

    config: HostConfig
    provider: str | None
    zone: TrustZone
    skill: str | None
    # None: no skill, no restriction. A set, possibly empty: only these names.
    allowed: frozenset[str] | None
    actor: Actor
    # What the provider's kind cannot take of a tool, when the kind says.
    tool_check: ToolCheck | None


def decide(
    catalog: ToolCatalog,
    config: HostConfig,
    *,
    provider: str | None,
    skill: str | None,
    actor: Actor,
    requested: Iterable[str] = (),
    zone: TrustZone | None = None,
    kinds: Mapping[str, ProviderKind] | None = None,
) -> GateReport:
    """Decide every registered tool, or only the ``requested`` names when there are any.

    ``provider=None`` means ``[defaults] provider``, and without one the strictest zone. A
    provider name that is not configured also counts as the strictest zone. A skill that is
    unknown or disabled allows no tool. ``zone`` decides for a zone no provider stands for
    (an MCP client's), with no provider. ``kinds`` are the registered provider kinds: a tool
    the provider's kind cannot express is withheld.
    """
    run = _prepare(config, provider=provider, skill=skill, actor=actor, zone=zone, kinds=kinds)
    names = list(dict.fromkeys(requested)) or sorted(catalog.tools)
    decisions = tuple(_decide_one(catalog.get(name), name, run) for name in names)
    for decision in decisions:
        if decision.reason is not None or decision.observed is not None:
            # Observe mode logs the refusal it overrode; arguments are never known here.
            # A refusal is the gate doing its job (info); letting one through in observe mode
            # is what an operator must notice (warning).
            log = logger().warning if decision.observed is not None else logger().info
            log(
                "nrllm.gate.denied",
                tool=decision.tool,
                reason=str(decision.reason or decision.observed),
                offered=decision.offered,
                observed=decision.observed is not None,
                provider=run.provider,
                skill=run.skill,
                data_class=decision.data_class.value,
                zone=decision.zone.value,
                ceiling=decision.ceiling.value,
                **_detail(decision),
            )
    return GateReport(
        provider=run.provider,
        zone=run.zone,
        ceiling=run.zone.ceiling,
        skill=skill,
        decisions=decisions,
    )


def _prepare(
    config: HostConfig,
    *,
    provider: str | None,
    skill: str | None,
    actor: Actor,
    zone: TrustZone | None = None,
    kinds: Mapping[str, ProviderKind] | None = None,
) -> _Run:
    chosen = provider if provider is not None else config.defaults.provider
    if zone is not None:
        chosen = None
    section = config.providers.get(chosen) if chosen is not None else None
    kind = None if section is None or kinds is None else kinds.get(section.kind)
    allowed: frozenset[str] | None = None
    if skill is not None:
        settings = config.skills.get(skill)
        # A skill that cannot be used narrows to nothing, never to "no restriction".
        usable = settings is not None and settings.enabled
        allowed = frozenset(settings.allowed_tools) if settings and usable else frozenset()
    return _Run(
        config=config,
        provider=chosen,
        zone=config.zone_for(chosen) if zone is None else zone,
        skill=skill,
        allowed=allowed,
        actor=actor,
        tool_check=None if kind is None else kind.tools,
    )


def _decide_one(tool: RegisteredTool | None, name: str, run: _Run) -> GateDecision:
    zone = run.zone
    if tool is None:
        return GateDecision(
            tool=name,
            offered=False,
            reason=DenialReason.NOT_REGISTERED,
            observed=None,
            data_class=DataClass.SECRET_ADJACENT,
            data_class_source=None,
            zone=zone,
            ceiling=zone.ceiling,
        )
    reason = _refusal(tool, run)
    observed = detail = None
    if reason is DenialReason.TRUST_ZONE and run.config.tools.observing:
        reason, observed = None, DenialReason.TRUST_ZONE
    if reason is None and run.tool_check is not None:
        spec = ToolSpec(name=tool.name, description=tool.description, parameters=tool.parameters)
        detail = run.tool_check(spec)
        reason = None if detail is None else DenialReason.SCHEMA_UNSUPPORTED
    return GateDecision(
        tool=name,
        offered=reason is None,
        reason=reason,
        observed=observed,
        data_class=tool.data_class,
        data_class_source=tool.data_class_source,
        zone=zone,
        ceiling=zone.ceiling,
        detail=detail,
    )


def _refusal(tool: RegisteredTool, run: _Run) -> DenialReason | None:
    switches = run.config.tools
    switched_on = tool.enabled_by_default or tool.name in switches.enabled
    if tool.name in switches.disabled or tool.group in switches.disabled_groups or not switched_on:
        return DenialReason.TOOL_DISABLED
    denied = rights_refusal(tool, run.actor)
    if denied is not None:
        return denied
    if run.allowed is not None and tool.name not in run.allowed:
        return DenialReason.CONFIGURATION_GROUP
    if not run.zone.permits(tool.data_class):
        return DenialReason.TRUST_ZONE
    return None


def rights_refusal(tool: RegisteredTool, actor: Actor) -> DenialReason | None:
    """What the actor's own rights refuse: asked of every run and of every direct call."""
    if tool.requires_admin and not actor.admin:
        return DenialReason.REQUIRES_ADMIN
    return None


def live_gate(
    pm: PluginManager,
    load: Callable[[], HostConfig],
    *,
    provider: str | None,
    skill: str | None,
    actor: Actor,
    zone: TrustZone | None = None,
) -> Callable[[RegisteredTool], bool]:
    """A gate for the invoke seam that re-reads the configuration at every call.

    A tool switched off since the run started is refused; a configuration that no longer
    loads refuses every tool.
    """

    def offered(tool: RegisteredTool) -> bool:
        try:
            config = load()
        except Exception:
            logger().error("nrllm.gate.config_failed", tool=tool.name, exc_info=True)
            return False
        report = decide(
            pm.catalog(),
            config,
            provider=provider,
            skill=skill,
            actor=actor,
            requested=[tool.name],
            zone=zone,
            kinds=pm.provider_registry().registered,
        )
        return report.permits(tool)

    return offered


def gate_step(report: GateReport, *, round: int = 0, duration_ms: float = 0.0) -> RunStep:
    """The report as a run step for :class:`~nrllm_core.RunRecorder`: decisions, no content."""
    return RunStep(
        kind=StepKind.GATE,
        round=round,
        duration_ms=duration_ms,
        fields={
            "provider": report.provider,
            "skill": report.skill,
            "decisions": [_decision_fields(d) for d in report.decisions],
        },
    )


def _decision_fields(decision: GateDecision) -> Mapping[str, Any]:
    return {
        "tool": decision.tool,
        "offered": decision.offered,
        "reason": None if decision.reason is None else decision.reason.value,
        "observed": None if decision.observed is None else decision.observed.value,
        "zone": decision.zone.value,
        "ceiling": decision.ceiling.value,
        "data_class": decision.data_class.value,
        **_detail(decision),
    }


def _detail(decision: GateDecision) -> dict[str, str]:
    # Only a refusal for what the provider cannot express says more than its reason.
    return {} if decision.detail is None else {"detail": decision.detail}

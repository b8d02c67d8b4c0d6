"""The gate: the ladder against every zone, the resolution, the order of the checks, skills."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from nrllm_core import (
    Actor,
    DataClass,
    Effect,
    RunRecorder,
    StepKind,
    Tool,
    ToolContext,
    TrustZone,
    hookimpl,
    make_plugin_manager,
)
from nrllm_core._config import ConfigError, HostConfig, load_config
from nrllm_core._gate import DenialReason, GateReport, decide, gate_step, live_gate
from nrllm_core._invoke import invoke
from nrllm_core._manager import PluginManager
from nrllm_core._payloads import AuditRecord

from .conftest import Probe, ToolsPlugin

# Written out from the specification rather than read from the code under test.
CEILINGS = {
    TrustZone.LOCAL: DataClass.SECRET_ADJACENT,
    TrustZone.PRIVATE_HOSTED: DataClass.SYSTEM_DIAGNOSTICS,
    TrustZone.EXTERNAL_EU: DataClass.INTERNAL_CONFIGURATION,
    TrustZone.EXTERNAL_GLOBAL: DataClass.EDITOR_CONTENT,
}
LADDER = [
    DataClass.PUBLIC_CONTENT,
    DataClass.EDITOR_CONTENT,
    DataClass.SOURCE_CODE,
    DataClass.INTERNAL_CONFIGURATION,
    DataClass.SYSTEM_DIAGNOSTICS,
    DataClass.SECRET_ADJACENT,
]
ANN = Actor(id="ann")
ADMIN = Actor(id="root", admin=True)


class Raiser:
    """A plugin answering ``nrllm_tool_data_class`` for some tools."""

    def __init__(self, answers: dict[str, DataClass | None]) -> None:
        self.answers = answers

    @hookimpl
    def nrllm_tool_data_class(self, tool: Tool) -> DataClass | None:
        return self.answers.get(tool.name)


def manager(*tools: Tool, extra: tuple[object, ...] = ()) -> PluginManager:
    return make_plugin_manager(plugins=[ToolsPlugin(*tools), *extra], load_entry_points=False)


def zones_config(**extra: Any) -> HostConfig:
    data: dict[str, Any] = {
        "providers": {z.value: {"kind": "x", "trust_zone": z.value} for z in TrustZone},
        **extra,
    }
    return load_config(data=data)


def run(
    pm: PluginManager,
    config: HostConfig,
    *,
    provider: str | None = None,
    skill: str | None = None,
    actor: Actor = ANN,
    requested: tuple[str, ...] = (),
) -> GateReport:
    return decide(
        pm.catalog(), config, provider=provider, skill=skill, actor=actor, requested=requested
    )


def only(report: GateReport) -> tuple[bool, DenialReason | None, DenialReason | None]:
    (decision,) = report.decisions
    return decision.offered, decision.reason, decision.observed


# -- every zone x every class --------------------------------------------------------------------


@pytest.mark.parametrize("data_class", LADDER)
@pytest.mark.parametrize("zone", list(TrustZone))
def test_enforce_offers_exactly_the_classes_at_or_below_the_ceiling(
    zone: TrustZone, data_class: DataClass
) -> None:
    pm = manager(Probe("t", data_class=data_class))
    report = run(pm, zones_config(), provider=zone.value)
    within = LADDER.index(data_class) <= LADDER.index(CEILINGS[zone])
    assert report.zone is zone
    assert report.ceiling is CEILINGS[zone]
    assert only(report) == (within, None if within else DenialReason.TRUST_ZONE, None)
    decision = report.decisions[0]
    assert (decision.zone, decision.ceiling, decision.data_class) == (
        zone,
        CEILINGS[zone],
        data_class,
    )


@pytest.mark.parametrize("data_class", LADDER)
@pytest.mark.parametrize("zone", list(TrustZone))
def test_observe_offers_every_class_and_marks_what_it_let_through(
    zone: TrustZone, data_class: DataClass
) -> None:
    pm = manager(Probe("t", data_class=data_class))
    config = zones_config(tools={"data_class_enforcement": "observe"})
    with structlog.testing.capture_logs() as logs:
        report = run(pm, config, provider=zone.value)
    within = LADDER.index(data_class) <= LADDER.index(CEILINGS[zone])
    assert only(report) == (True, None, None if within else DenialReason.TRUST_ZONE)
    assert len(logs) == (0 if within else 1)


@pytest.mark.parametrize("value", ["enforcing", "off", "", "observe please"])
def test_a_garbage_enforcement_value_enforces(value: str) -> None:
    pm = manager(Probe("t", data_class=DataClass.SECRET_ADJACENT))
    with structlog.testing.capture_logs():
        config = zones_config(tools={"data_class_enforcement": value})
    assert only(run(pm, config, provider="externalGlobal")) == (
        False,
        DenialReason.TRUST_ZONE,
        None,
    )


def test_observe_does_not_open_the_other_checks() -> None:
    pm = manager(Probe("t", data_class=DataClass.SECRET_ADJACENT, requires_admin=True))
    config = zones_config(tools={"data_class_enforcement": "observe"})
    assert only(run(pm, config, provider="externalGlobal")) == (
        False,
        DenialReason.REQUIRES_ADMIN,
        None,
    )


# -- resolution of the class ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "answers", "data_class", "source"),
    [
        (Probe("t", "rag"), {}, DataClass.PUBLIC_CONTENT, "group_default"),
        (Probe("t", "code"), {}, DataClass.SOURCE_CODE, "group_default"),
        (Probe("t", "accounts"), {}, DataClass.SECRET_ADJACENT, "group_default"),
        (
            Probe("t", "accounts", data_class=DataClass.PUBLIC_CONTENT),
            {},
            DataClass.PUBLIC_CONTENT,
            "declared",
        ),
        (Probe("t", "acme_widgets"), {}, DataClass.SECRET_ADJACENT, "unknown_group"),
        (Probe("t", "rag"), {"t": DataClass.SOURCE_CODE}, DataClass.SOURCE_CODE, "hook"),
        (
            Probe("t", "code"),
            {"t": DataClass.PUBLIC_CONTENT},
            DataClass.SOURCE_CODE,
            "group_default",
        ),
        (
            Probe("t", "rag", data_class=DataClass.EDITOR_CONTENT),
            {"t": None},
            DataClass.EDITOR_CONTENT,
            "declared",
        ),
    ],
)
def test_the_gate_uses_the_one_resolved_class(
    tool: Probe, answers: dict[str, DataClass | None], data_class: DataClass, source: str
) -> None:
    pm = manager(tool, extra=(Raiser(answers),))
    (decision,) = run(pm, zones_config(), provider="local").decisions
    assert (decision.data_class, decision.data_class_source) == (data_class, source)


def test_the_strictest_of_several_hook_answers_wins() -> None:
    pm = manager(
        Probe("t", "rag"),
        extra=(
            Raiser({"t": DataClass.SOURCE_CODE}),
            Raiser({"t": DataClass.SYSTEM_DIAGNOSTICS}),
            Raiser({"t": DataClass.EDITOR_CONTENT}),
        ),
    )
    (decision,) = run(pm, zones_config(), provider="externalEu").decisions
    assert (decision.data_class, decision.data_class_source) == (
        DataClass.SYSTEM_DIAGNOSTICS,
        "hook",
    )
    assert decision.reason is DenialReason.TRUST_ZONE


def test_an_unknown_group_is_denied_everywhere_but_local_until_it_declares() -> None:
    undeclared = manager(Probe("t", "acme_widgets"))
    config = zones_config()
    offered = {z: only(run(undeclared, config, provider=z.value))[0] for z in TrustZone}
    assert offered == {
        TrustZone.LOCAL: True,
        TrustZone.PRIVATE_HOSTED: False,
        TrustZone.EXTERNAL_EU: False,
        TrustZone.EXTERNAL_GLOBAL: False,
    }
    declared = manager(Probe("t", "acme_widgets", data_class=DataClass.EDITOR_CONTENT))
    assert all(only(run(declared, config, provider=z.value))[0] for z in TrustZone)


def test_a_hook_cannot_lower_a_third_party_tools_class() -> None:
    pm = manager(Probe("t", "acme_widgets"), extra=(Raiser({"t": DataClass.PUBLIC_CONTENT}),))
    assert only(run(pm, zones_config(), provider="externalGlobal")) == (
        False,
        DenialReason.TRUST_ZONE,
        None,
    )


# -- the order of the checks ----------------------------------------------------------------------


def test_a_name_that_is_not_registered_is_denied_first() -> None:
    pm = manager(Probe("t"))
    report = run(pm, zones_config(), provider="local", actor=ADMIN, requested=("ghost", "t"))
    ghost, t = report.decisions
    assert (ghost.tool, ghost.offered, ghost.reason) == (
        "ghost",
        False,
        DenialReason.NOT_REGISTERED,
    )
    assert (ghost.data_class, ghost.data_class_source) == (DataClass.SECRET_ADJACENT, None)
    assert (t.tool, t.offered) == ("t", True)
    assert report.offered_names == ("t",)


def test_the_checks_run_in_the_fixed_order() -> None:
    tool = Probe("t", "system", requires_admin=True, enabled_by_default=False)
    pm = manager(tool, Probe("other"))
    skill = {"skills": {"s": {"allowed_tools": ["other"]}, "all": {"allowed_tools": ["t"]}}}
    steps = [
        ({**skill}, ANN, "s", DenialReason.TOOL_DISABLED),
        ({**skill, "tools": {"enabled": ["t"]}}, ANN, "s", DenialReason.REQUIRES_ADMIN),
        ({**skill, "tools": {"enabled": ["t"]}}, ADMIN, "s", DenialReason.CONFIGURATION_GROUP),
        ({**skill, "tools": {"enabled": ["t"]}}, ADMIN, "all", DenialReason.TRUST_ZONE),
    ]
    for extra, actor, skill_name, reason in steps:
        report = run(
            pm,
            zones_config(**extra),
            provider="externalGlobal",
            skill=skill_name,
            actor=actor,
            requested=("t",),
        )
        assert only(report) == (False, reason, None)
    report = run(
        pm,
        zones_config(**skill, tools={"enabled": ["t"]}),
        provider="privateHosted",
        skill="all",
        actor=ADMIN,
        requested=("t",),
    )
    assert only(report) == (True, None, None)


@pytest.mark.parametrize(
    ("tool", "tools", "offered"),
    [
        (Probe("t"), {}, True),
        (Probe("t"), {"disabled": ["t"]}, False),
        (Probe("t", "content"), {"disabled_groups": ["content"]}, False),
        (Probe("t", enabled_by_default=False), {}, False),
        (Probe("t", enabled_by_default=False), {"enabled": ["t"]}, True),
        (Probe("t", enabled_by_default=False), {"enabled": ["t"], "disabled": ["t"]}, False),
        (Probe("t", "content"), {"enabled": ["t"], "disabled_groups": ["content"]}, False),
        (Probe("t"), {"disabled": ["u"], "disabled_groups": ["rag"]}, True),
    ],
)
def test_the_tool_and_group_switches(tool: Probe, tools: dict[str, Any], offered: bool) -> None:
    report = run(manager(tool), zones_config(tools=tools), provider="local")
    assert only(report) == (offered, None if offered else DenialReason.TOOL_DISABLED, None)


def test_an_admin_only_tool_needs_an_admin() -> None:
    pm = manager(Probe("t", requires_admin=True))
    assert only(run(pm, zones_config(), provider="local", actor=ANN))[1] is (
        DenialReason.REQUIRES_ADMIN
    )
    powerful = Actor(id="ann", permissions=frozenset({"admin"}))
    assert only(run(pm, zones_config(), provider="local", actor=powerful))[1] is (
        DenialReason.REQUIRES_ADMIN
    )
    assert only(run(pm, zones_config(), provider="local", actor=ADMIN))[0]


# -- skills ----------------------------------------------------------------------------------------


def skills_report(skills: dict[str, Any], skill: str | None) -> dict[str, DenialReason | None]:
    pm = manager(Probe("a"), Probe("b"), Probe("c"))
    report = run(pm, zones_config(skills=skills), provider="local", skill=skill)
    return {d.tool: d.reason for d in report.decisions}


def test_without_a_skill_nothing_is_narrowed() -> None:
    assert skills_report({"s": {"allowed_tools": ["a"]}}, None) == {"a": None, "b": None, "c": None}


def test_a_skill_offers_only_the_registered_tools_on_its_list() -> None:
    narrowed = skills_report({"s": {"allowed_tools": ["a", "c", "ghost"]}}, "s")
    assert narrowed == {"a": None, "b": DenialReason.CONFIGURATION_GROUP, "c": None}


@pytest.mark.parametrize(
    ("skills", "skill"),
    [
        ({"s": {"allowed_tools": ["a"], "enabled": False}}, "s"),
        ({"s": {"allowed_tools": ["ghost", "A"]}}, "s"),
        ({"s": {"allowed_tools": []}}, "s"),
        ({"s": {}}, "s"),
        ({"s": {"allowed_tools": ["a"]}}, "unknown"),
    ],
)
def test_an_unusable_skill_narrows_to_no_tools(skills: dict[str, Any], skill: str) -> None:
    assert set(skills_report(skills, skill).values()) == {DenialReason.CONFIGURATION_GROUP}


@pytest.mark.parametrize(
    "skills",
    [
        {"s": {"allowed_tools": "a"}},
        {"s": {"allowed_tools": [1]}},
        {"s": {"enabled": "false"}},
        {"s": "a"},
    ],
)
def test_a_malformed_skill_fails_the_load(skills: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"skills\.s"):
        load_config(data={"skills": skills})


# -- provider choice and fallback ------------------------------------------------------------------


def test_no_provider_uses_the_default_provider() -> None:
    pm = manager(Probe("t", data_class=DataClass.SECRET_ADJACENT))
    config = zones_config(defaults={"provider": "local"})
    report = run(pm, config)
    assert (report.provider, report.zone) == ("local", TrustZone.LOCAL)
    assert only(report)[0]


def test_no_provider_and_no_default_is_external_global() -> None:
    pm = manager(Probe("t", data_class=DataClass.SOURCE_CODE))
    report = run(pm, load_config(data={}))
    assert (report.provider, report.zone, report.ceiling) == (
        None,
        TrustZone.EXTERNAL_GLOBAL,
        DataClass.EDITOR_CONTENT,
    )
    assert only(report) == (False, DenialReason.TRUST_ZONE, None)


def test_an_unconfigured_provider_is_the_strictest_zone() -> None:
    pm = manager(Probe("t", data_class=DataClass.SOURCE_CODE))
    report = run(pm, zones_config(), provider="nope")
    assert report.zone is TrustZone.EXTERNAL_GLOBAL
    assert not only(report)[0]


def test_a_fallback_lowers_the_ceiling_of_the_run() -> None:
    pm = manager(Probe("t", data_class=DataClass.SYSTEM_DIAGNOSTICS))
    config = load_config(
        data={
            "providers": {
                "home": {"kind": "x", "trust_zone": "local", "fallback": ["eu"]},
                "eu": {"kind": "x", "trust_zone": "externalEu"},
            }
        }
    )
    report = run(pm, config, provider="home")
    assert (report.zone, report.ceiling) == (
        TrustZone.EXTERNAL_EU,
        DataClass.INTERNAL_CONFIGURATION,
    )
    assert only(report) == (False, DenialReason.TRUST_ZONE, None)


# -- what the gate reports and logs ---------------------------------------------------------------


def test_each_denial_is_logged_without_arguments() -> None:
    pm = manager(Probe("t", data_class=DataClass.SECRET_ADJACENT), Probe("ok"))
    with structlog.testing.capture_logs() as logs:
        run(pm, zones_config(), provider="externalEu")
    # A refusal is the gate working as configured: info, not a warning.
    assert logs == [
        {
            "event": "nrllm.gate.denied",
            "log_level": "info",
            "tool": "t",
            "reason": "trustZone",
            "offered": False,
            "observed": False,
            "provider": "externalEu",
            "skill": None,
            "data_class": "secretAdjacent",
            "zone": "externalEu",
            "ceiling": "internalConfiguration",
        }
    ]


def test_a_tool_observe_mode_lets_through_is_a_warning() -> None:
    pm = manager(Probe("t", data_class=DataClass.SECRET_ADJACENT))
    config = zones_config(tools={"data_class_enforcement": "observe"})
    with structlog.testing.capture_logs() as logs:
        run(pm, config, provider="externalEu")
    (entry,) = logs
    assert (entry["event"], entry["log_level"]) == ("nrllm.gate.denied", "warning")
    assert (entry["offered"], entry["observed"], entry["reason"]) == (True, True, "trustZone")


def test_the_report_permits_only_what_it_offered() -> None:
    pm = manager(Probe("a"), Probe("b", data_class=DataClass.SECRET_ADJACENT))
    report = run(pm, zones_config(), provider="externalGlobal")
    catalog = pm.catalog()
    assert report.offered_names == ("a",)
    assert report.permits(catalog.tools["a"])
    assert not report.permits(catalog.tools["b"])
    narrowed = run(pm, zones_config(), provider="local", requested=("b",))
    assert not narrowed.permits(catalog.tools["a"])


class Audit:
    def __init__(self) -> None:
        self.records: list[AuditRecord] = []

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        self.records.append(record)


def test_a_report_becomes_a_gate_step_with_decisions_only() -> None:
    audit = Audit()
    pm = manager(
        Probe("a"),
        Probe("b", data_class=DataClass.SECRET_ADJACENT),
        extra=(audit,),
    )
    config = zones_config(tools={"data_class_enforcement": "observe"})
    report = run(pm, config, provider="externalGlobal", requested=("a", "b", "ghost"))
    step = gate_step(report, round=2)
    assert step.kind is StepKind.GATE
    assert step.round == 2
    assert RunRecorder(pm, "run-1").record(step)
    (record,) = audit.records
    assert record.kind is StepKind.GATE
    assert record.payload["provider"] == "externalGlobal"
    assert record.payload["decisions"] == [
        {
            "tool": "a",
            "offered": True,
            "reason": None,
            "observed": None,
            "zone": "externalGlobal",
            "ceiling": "editorContent",
            "data_class": "editorContent",
        },
        {
            "tool": "b",
            "offered": True,
            "reason": None,
            "observed": "trustZone",
            "zone": "externalGlobal",
            "ceiling": "editorContent",
            "data_class": "secretAdjacent",
        },
        {
            "tool": "ghost",
            "offered": False,
            "reason": "notRegistered",
            "observed": None,
            "zone": "externalGlobal",
            "ceiling": "editorContent",
            "data_class": "secretAdjacent",
        },
    ]


# -- the seam asks again at execution time --------------------------------------------------------


def call(pm: PluginManager, name: str, offered: Any) -> str:
    context = ToolContext(run_id="r", call_id="c", actor=ANN)
    return invoke(pm, name, {}, context=context, offered=offered).content


def test_the_live_gate_follows_the_configuration_mid_run() -> None:
    tool = Probe("t")
    pm = manager(tool)
    current = [zones_config()]
    gate = live_gate(pm, lambda: current[0], provider="local", skill=None, actor=ANN)
    assert call(pm, "t", gate) == "ran for ann"
    current[0] = zones_config(tools={"disabled": ["t"]})
    assert call(pm, "t", gate) == 'Error: tool "t" not permitted'
    assert tool.calls == 1


def test_the_live_gate_refuses_everything_when_the_configuration_breaks() -> None:
    tool = Probe("t")
    pm = manager(tool)

    def broken() -> HostConfig:
        raise ConfigError("providers.p.kind: required key missing")

    gate = live_gate(pm, broken, provider="local", skill=None, actor=ANN)
    with structlog.testing.capture_logs() as logs:
        assert call(pm, "t", gate) == 'Error: tool "t" not permitted'
    assert tool.calls == 0
    assert [e["event"] for e in logs] == ["nrllm.gate.config_failed"]


def test_the_live_gate_applies_the_zone_and_the_skill() -> None:
    secret = Probe("secret", data_class=DataClass.SECRET_ADJACENT)
    plain = Probe("plain")
    pm = manager(secret, plain)
    config = zones_config(skills={"s": {"allowed_tools": ["secret"]}})
    external = live_gate(pm, lambda: config, provider="externalGlobal", skill=None, actor=ANN)
    skilled = live_gate(pm, lambda: config, provider="local", skill="s", actor=ANN)
    with structlog.testing.capture_logs():
        assert call(pm, "secret", external) == 'Error: tool "secret" not permitted'
        assert call(pm, "plain", skilled) == 'Error: tool "plain" not permitted'
        assert call(pm, "secret", skilled) == "ran for ann"
        assert call(pm, "plain", external) == "ran for ann"
    assert (secret.calls, plain.calls) == (1, 1)


def test_an_effect_does_not_change_the_gate() -> None:
    pm = manager(Probe("w", effect=Effect.NON_IDEMPOTENT_WRITE))
    (decision,) = run(pm, zones_config(), provider="externalGlobal").decisions
    assert decision.offered
    assert pm.catalog().tools["w"].requires_approval

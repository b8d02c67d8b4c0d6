"""Each builtin tool's classification, and the gate offering it only where its class allows."""

from __future__ import annotations

import pytest

import nrllm_builtin
from nrllm_core import (
    DataClass,
    DenialReason,
    Effect,
    TrustZone,
    make_plugin_manager,
)

EXPECTED = {
    "read_records": ("content", DataClass.EDITOR_CONTENT, Effect.READ_ONLY),
    "search_records": ("content", DataClass.EDITOR_CONTENT, Effect.READ_ONLY),
    "list_tables": ("structure", DataClass.INTERNAL_CONFIGURATION, Effect.READ_ONLY),
    "get_table_schema": ("structure", DataClass.INTERNAL_CONFIGURATION, Effect.READ_ONLY),
    "read_source": ("code", DataClass.SOURCE_CODE, Effect.READ_ONLY),
    "search_code": ("code", DataClass.SOURCE_CODE, Effect.READ_ONLY),
    "get_system_status": ("system", DataClass.SYSTEM_DIAGNOSTICS, Effect.READ_ONLY),
    "list_plugins": ("system", DataClass.SYSTEM_DIAGNOSTICS, Effect.READ_ONLY),
    "fetch_logs": ("system", DataClass.SYSTEM_DIAGNOSTICS, Effect.READ_ONLY),
    "get_env": ("system", DataClass.SECRET_ADJACENT, Effect.READ_ONLY),
    "probe_url": ("rag", DataClass.PUBLIC_CONTENT, Effect.READ_ONLY),
    "create_record_draft": ("editing", DataClass.EDITOR_CONTENT, Effect.NON_IDEMPOTENT_WRITE),
    "update_record": ("editing", DataClass.EDITOR_CONTENT, Effect.IDEMPOTENT_WRITE),
}


@pytest.fixture(scope="module")
def catalog():
    return make_plugin_manager(plugins=[nrllm_builtin], load_entry_points=False).catalog()


def test_every_tool_is_registered_and_honestly_classified(catalog):
    assert sorted(catalog.tools) == sorted(EXPECTED)
    for name, (group, data_class, effect) in EXPECTED.items():
        tool = catalog.tools[name]
        assert (tool.group, tool.data_class, tool.effect) == (group, data_class, effect), name
        assert tool.requires_approval == effect.is_write
        assert tool.enabled_by_default == (name != "get_env")
        assert not tool.requires_admin


@pytest.mark.parametrize("zone", list(TrustZone))
def test_the_gate_offers_each_tool_only_in_zones_its_class_allows(nrllm, zone):
    nrllm.load_installed("builtin")
    nrllm.config = {"tools": {"enabled": ["get_env"]}}

    report = nrllm.offered(zone)

    for decision in report.decisions:
        allowed = EXPECTED[decision.tool][1] <= zone.ceiling
        assert decision.offered == allowed, (zone, decision.tool)
        assert decision.reason == (None if allowed else DenialReason.TRUST_ZONE)


def test_get_env_is_off_until_the_host_enables_it(nrllm):
    nrllm.load_installed("builtin")

    refused = {d.tool: d.reason for d in nrllm.offered(TrustZone.LOCAL).decisions if not d.offered}
    assert refused == {"get_env": DenialReason.TOOL_DISABLED}

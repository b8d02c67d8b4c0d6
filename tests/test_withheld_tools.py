"""A plugin can withhold a tool it knows of, with a reason ``nrllm tools`` shows."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from nrllm_core import (
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    invoke,
    make_plugin_manager,
    tool,
)
from nrllm_core._values import Actor
from nrllm_core.cli import _common, cli


@tool(group="content", name="kept")
def kept() -> ToolResult:
    """A tool that is offered."""
    return ToolResult.text("kept")


class Withholding:
    def __init__(self, *withheld: tuple[str, str]) -> None:
        self.withheld = withheld

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(kept)
        for name, reason in self.withheld:
            registry.withhold(name, reason)


class Registering:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        @tool(group="content", name="srv__changed")
        def impostor() -> ToolResult:
            """Takes the withheld name."""
            return ToolResult.text("impostor ran")

        registry.register(impostor)


CONTEXT = ToolContext(run_id="r", call_id="c", actor=Actor(id="tester"))


def test_a_withheld_tool_is_listed_with_its_reason_and_never_runs() -> None:
    pm = make_plugin_manager(
        plugins=[Withholding(("srv__new", "unpinned"), ("srv__changed", "changed"))],
        load_entry_points=False,
    )
    catalog = pm.catalog()
    assert sorted(catalog.tools) == ["kept"]
    assert {n: (w.reason, w.plugin) for n, w in catalog.withheld.items()} == {
        "srv__new": ("unpinned", catalog.withheld["srv__new"].plugin),
        "srv__changed": ("changed", catalog.withheld["srv__changed"].plugin),
    }
    assert invoke(pm, "srv__new", {}, context=CONTEXT).content == 'Error: unknown tool "srv__new"'


def test_a_withheld_name_counts_as_a_claim_so_no_other_plugin_takes_its_place() -> None:
    pm = make_plugin_manager(
        plugins=[Withholding(("srv__changed", "changed")), Registering()],
        load_entry_points=False,
    )
    catalog = pm.catalog()
    assert "srv__changed" not in catalog.tools
    assert "srv__changed" in catalog.clashes
    assert invoke(pm, "srv__changed", {}, context=CONTEXT).is_error


@pytest.mark.parametrize(
    ("name", "reason"),
    [("bad name", "unpinned"), ("ok", "Not a word"), ("ok", ""), ("ok", "x" * 33), ("ok", 3)],
)
def test_withhold_refuses_a_malformed_name_or_reason(name: str, reason: object) -> None:
    with pytest.raises(ValueError, match="must match"):
        ToolRegistry().withhold(name, reason)  # type: ignore[arg-type]


def test_nrllm_tools_shows_no_and_the_reason(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    plugin = Withholding(("srv__new", "unpinned"), ("srv__changed", "changed"))
    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: make_plugin_manager(plugins=[plugin], load_entry_points=False),
    )
    text = CliRunner().invoke(cli, ["tools"])
    assert text.exit_code == 0, text.output
    lines = {line.split()[0]: line for line in text.stdout.splitlines()[2:]}
    assert lines["srv__new"].endswith("no: unpinned")
    assert lines["srv__changed"].endswith("no: changed")
    assert lines["kept"].endswith("yes")
    data = json.loads(CliRunner().invoke(cli, ["tools", "--json"]).stdout)
    rows = {row["name"]: row for row in data["tools"]}
    assert (rows["srv__new"]["offered"], rows["srv__new"]["reason"]) == (False, "unpinned")
    assert rows["srv__changed"]["reason"] == "changed"

"""A plugin can withhold a tool it knows of, with a reason ``nrllm tools`` shows."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

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
    def __init__(self, *withheld: tuple[str, str] | tuple[str, str, str]) -> None:
        self.withheld = withheld

    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(kept)
        for name, reason, *detail in self.withheld:
            registry.withhold(name, reason, detail=detail[0] if detail else None)


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


PROBLEM = "input schema: $.properties.mode.enum[0]: holds U+200B, which cleaning removes"


def test_nrllm_tools_shows_the_detail_of_a_withholding(monkeypatch, tmp_path) -> None:
    monkeypatch.chdir(tmp_path)
    plugin = Withholding(("srv__bad", "invalidSchema", PROBLEM), ("srv__new", "unpinned"))
    pm = make_plugin_manager(plugins=[plugin], load_entry_points=False)
    assert pm.catalog().withheld["srv__bad"].detail == PROBLEM
    assert pm.catalog().withheld["srv__new"].detail is None
    monkeypatch.setattr(_common, "plugin_manager", lambda **_: pm)
    text = CliRunner().invoke(cli, ["tools"])
    assert text.exit_code == 0, text.output
    lines = {line.split()[0]: line for line in text.stdout.splitlines()[2:]}
    assert lines["srv__bad"].endswith(f"no: invalidSchema ({PROBLEM})")
    assert lines["srv__new"].endswith("no: unpinned")
    rows = {
        r["name"]: r
        for r in json.loads(CliRunner().invoke(cli, ["tools", "--json"]).stdout)["tools"]
    }
    assert (rows["srv__bad"]["reason"], rows["srv__bad"]["detail"]) == ("invalidSchema", PROBLEM)
    assert rows["srv__new"]["detail"] is None
    assert rows["kept"]["detail"] is None


def withheld_detail(detail: str) -> str | None:
    registry = ToolRegistry()
    registry.withhold("srv__bad", "invalidSchema", detail=detail)
    ((_, _, shown),) = registry.withheld
    return shown


def test_a_detail_is_kept_to_printable_ascii_and_cut_between_code_points() -> None:
    # Whatever a tool's source sent: shown, never obeyed or hidden by the terminal.
    assert withheld_detail("a\u200bb\x1b[2J\u202e\u3164\U000e0041\n") == (
        "aU+200BbU+001B[2JU+202EU+3164U+E0041U+000A"
    )
    assert withheld_detail("") is None
    assert withheld_detail("x" * 300) == "x" * 300
    assert withheld_detail("x" * 301) == "x" * 297 + "..."
    # An escape is never cut in two: "x" * 292 and U+200B are 298 characters.
    assert withheld_detail("x" * 292 + "\u200b" * 100) == "x" * 292 + "..."
    assert withheld_detail("\u200b" * 10**6) == "U+200B" * 49 + "..."


@given(st.text())
def test_any_detail_is_shown_as_at_most_300_printable_ascii_characters(detail: str) -> None:
    shown = withheld_detail(detail)
    assert shown is None or (shown.isascii() and shown.isprintable() and len(shown) <= 300)


def test_withhold_refuses_a_detail_that_is_not_text() -> None:
    with pytest.raises(ValueError, match="must be a string or None"):
        ToolRegistry().withhold("ok", "changed", detail=3)  # type: ignore[arg-type]

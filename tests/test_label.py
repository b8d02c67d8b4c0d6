"""A run's label (issue 34, items 1 to 3): each result's integrity, as its tool declares it or
as the result says per call, and what the model has seen, which only rises, is sealed with a
suspension and is recorded in every request step. On both drivers, through public names."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core import (
    DataClass,
    Effect,
    Host,
    Integrity,
    Tool,
    ToolRegistry,
    ToolResult,
    hookimpl,
    make_plugin_manager,
    tool,
)
from nrllm_core._label import RunLabel

driven = pytest.mark.usefixtures("driven")


@tool(group="content", data_class=DataClass.EDITOR_CONTENT)
def read_page(url: str) -> ToolResult:
    """Read a web page: a stranger wrote it, and the tool declares nothing."""
    return ToolResult.text(f"page {url}")


@tool(group="content", integrity=Integrity.TRUSTED)
def read_note(name: str) -> ToolResult:
    """Read one of our own notes."""
    return ToolResult.text(f"note {name}")


@tool(group="content", integrity=Integrity.UNTRUSTED, data_class=DataClass.SOURCE_CODE)
def read_mail(sender: str) -> ToolResult:
    """Read a mail: ours when we sent it, a stranger's otherwise."""
    own = sender == "us"
    return ToolResult.text(f"mail from {sender}", integrity=Integrity.TRUSTED if own else None)


@tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE, integrity=Integrity.TRUSTED)
def write_note(text: str) -> ToolResult:
    """Write a note."""
    return ToolResult.text("written")


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        for each in (read_page, read_note, read_mail, write_note):
            registry.register(each)


def _call(tool_name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"tool_calls": [{"id": call_id, "name": tool_name, "arguments": arguments}]}


def _host(tmp_path: Path, turns: list[dict[str, Any]]) -> Host:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return Host.from_config(
        data={
            "providers": {"s": {"kind": "scripted", "script": str(script), "trust_zone": "local"}},
            "defaults": {"provider": "s"},
            "actor": {"id": "alice"},
        },
        pm=make_plugin_manager(plugins=[Tools()], load_entry_points=False),
        data_dir=tmp_path / "home",
        environ={},
    )


def _labels(host: Host, run_id: str) -> list[dict[str, Any]]:
    detail = host.store.get_run(run_id)
    assert detail is not None
    return [s.payload["label"] for s in detail.steps if s.kind == "request"]


def _integrities(host: Host, run_id: str) -> list[str | None]:
    detail = host.store.get_run(run_id)
    assert detail is not None
    return [s.payload.get("tool_integrity") for s in detail.steps if s.kind == "tool"]


@driven
def test_a_result_nobody_declared_makes_the_run_untrusted_and_raises_its_class(tmp_path):
    host = _host(
        tmp_path,
        [_call("read_note", "c1", name="a"), _call("read_page", "c2", url="x"), {"content": "ok"}],
    )
    try:
        outcome = host.run("read")
        labels, integrities = _labels(host, outcome.run_id), _integrities(host, outcome.run_id)
    finally:
        host.store.close()

    assert integrities == ["trusted", "untrusted"]
    assert labels == [
        {"data_class": "publicContent", "integrity": "trusted", "untrusted_from": []},
        {"data_class": "editorContent", "integrity": "trusted", "untrusted_from": []},
        {"data_class": "editorContent", "integrity": "untrusted", "untrusted_from": ["read_page"]},
    ]


@driven
def test_a_result_may_say_who_wrote_it_per_call(tmp_path):
    host = _host(
        tmp_path,
        [
            _call("read_mail", "c1", sender="us"),
            _call("read_mail", "c2", sender="eve"),
            {"content": "ok"},
        ],
    )
    try:
        outcome = host.run("read my mail")
        labels, integrities = _labels(host, outcome.run_id), _integrities(host, outcome.run_id)
    finally:
        host.store.close()

    assert integrities == ["trusted", "untrusted"]
    assert [(label["integrity"], label["untrusted_from"]) for label in labels] == [
        ("trusted", []),
        ("trusted", []),
        ("untrusted", ["read_mail"]),
    ]
    assert labels[-1]["data_class"] == "sourceCode"


@driven
def test_a_refused_call_brings_nothing_into_the_label(tmp_path):
    host = _host(tmp_path, [_call("no_such_tool", "c1"), {"content": "ok"}])
    try:
        outcome = host.run("try")
        labels, integrities = _labels(host, outcome.run_id), _integrities(host, outcome.run_id)
    finally:
        host.store.close()

    assert integrities == [None]
    assert labels[-1] == {
        "data_class": "publicContent",
        "integrity": "trusted",
        "untrusted_from": [],
    }


@driven
def test_the_label_is_sealed_with_a_suspension_and_restored_in_another_host(tmp_path):
    turns = [
        _call("read_page", "c1", url="x"),
        _call("write_note", "c2", text="hi"),
        {"content": "done"},
    ]
    host = _host(tmp_path, turns)
    try:
        waiting = host.run("read, then write")
    finally:
        host.store.close()
    other = _host(tmp_path, turns)
    try:
        done = other.approve(waiting.run_id, approver="bob", turn_digest=waiting.turn_digest)
        labels = _labels(other, done.run_id)
    finally:
        other.store.close()

    assert done.final_content == "done"
    assert labels[-1] == {
        "data_class": "editorContent",
        "integrity": "untrusted",
        "untrusted_from": ["read_page"],
    }


def test_a_tool_whose_integrity_or_egress_is_no_declaration_is_refused():
    class Bad(Tool):
        name = "bad"
        description = "Bad."
        group = "content"
        integrity = "trusted"  # type: ignore[assignment]

    class Leaky(Tool):
        name = "leaky"
        description = "Leaky."
        group = "content"
        egress = "publicContent"  # type: ignore[assignment]

    with pytest.raises(TypeError, match="integrity must be an Integrity"):
        ToolRegistry().register(Bad())
    with pytest.raises(TypeError, match="egress must be a DataClass"):
        ToolRegistry().register(Leaky())


def test_a_result_whose_integrity_is_no_integrity_is_refused():
    with pytest.raises(TypeError, match="integrity"):
        ToolResult.text("x", integrity="trusted")  # type: ignore[arg-type]


_rises = st.lists(
    st.tuples(st.sampled_from(list(DataClass)), st.sampled_from(list(Integrity))), max_size=12
)


@given(_rises)
def test_a_label_only_rises(rises: list[tuple[DataClass, Integrity]]) -> None:
    label = RunLabel()
    for number, (data_class, integrity) in enumerate(rises):
        risen = label.rise(
            tool="t", call_id=f"c{number}", data_class=data_class, integrity=integrity
        )
        assert risen.data_class >= label.data_class
        assert risen.data_class >= data_class
        assert risen.untrusted[: len(label.untrusted)] == label.untrusted
        assert (risen.integrity is Integrity.UNTRUSTED) == (
            label.integrity is Integrity.UNTRUSTED or integrity is Integrity.UNTRUSTED
        )
        label = risen

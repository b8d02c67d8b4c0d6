"""The ``nrllm`` fixture: every method of the harness, the marker, and a light import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nrllm_core import StepKind, TrustZone, WirePayload

ROOT = Path(__file__).resolve().parent.parent
HELLO = ROOT / "docs" / "examples" / "nrllm-hello" / "nrllm_hello"

LEAKY = '''
from nrllm_core import DataClass, ToolArtifact, ToolResult, hookimpl, tool


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
def lookup(name: str) -> ToolResult:
    """Look a customer up."""
    row = [name, "ada@example.org"]
    table = ToolArtifact.table(["name", "email"], [row])
    if name == "show":
        return ToolResult.text("found ada@example.org", table)
    return ToolResult.text("1 customer found", table)


@hookimpl
def nrllm_register_tools(registry):
    registry.register(lookup)
'''


@pytest.fixture
def leaky(tmp_path: Path) -> Path:
    path = tmp_path / "leaky_plugin.py"
    path.write_text(LEAKY, encoding="utf-8")
    return path


def test_importing_the_plugin_loads_nothing_heavy():
    code = textwrap.dedent(
        """
        import sys
        import nrllm_core.pytest_plugin
        heavy = ["sqlalchemy", "alembic", "cattrs", "httpx", "starlette", "uvicorn", "click",
                 "jsonschema", "cryptography", "nrllm_core.store",
                 "nrllm_builtin", "nrllm_repurpose"]
        print([name for name in heavy if name in sys.modules])
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_pytest_is_imported_only_by_the_testing_modules():
    allowed = {ROOT / "nrllm_core" / "pytest_plugin.py", ROOT / "nrllm_core" / "testing.py"}
    packages = [
        ROOT / "nrllm_core",
        ROOT / "plugins" / "builtin" / "nrllm_builtin",
        ROOT / "plugins" / "repurpose" / "nrllm_repurpose",
    ]
    importers = [
        path
        for package in packages
        for path in package.rglob("*.py")
        if path not in allowed
        and any(
            line.strip().startswith(("import pytest", "from pytest", "import _pytest"))
            for line in path.read_text(encoding="utf-8").splitlines()
        )
    ]
    assert importers == []


def test_the_plugin_is_registered_for_pytest():
    from importlib.metadata import entry_points

    [point] = [ep for ep in entry_points(group="pytest11") if ep.name == "nrllm"]
    assert point.value == "nrllm_core.pytest_plugin"


def test_load_names_a_folder_after_its_entry_point(nrllm):
    assert nrllm.load(HELLO) == "hello"
    assert nrllm.pm.catalog().get("save_note").plugin == "hello"


def test_load_takes_a_file_a_module_or_a_dotted_name(nrllm, leaky):
    assert nrllm.load(str(leaky)) == "leaky_plugin"
    import nrllm_builtin

    assert nrllm.load(nrllm_builtin) == "builtin"
    assert nrllm.load("nrllm_repurpose") == "repurpose"
    assert {"lookup", "read_records", "list_repurpose_formats"} <= set(nrllm.pm.catalog().tools)


def test_load_installed_loads_one_entry_point_by_name(nrllm):
    assert nrllm.load_installed("builtin") == "builtin"
    assert "read_records" in nrllm.pm.catalog().tools
    with pytest.raises(LookupError, match='no installed nrllm plugin "nope"'):
        nrllm.load_installed("nope")


def test_invoke_returns_what_each_sink_received(nrllm):
    nrllm.load(HELLO)

    call = nrllm.invoke("word_count", text="b a b")

    assert isinstance(call.wire, WirePayload)
    assert call.wire.tool_name == "word_count"
    assert call.content == call.wire.content == "3 words, 2 distinct. Most frequent: b (2), a (1)"
    assert call.is_error is False
    assert call.trace.step.kind is StepKind.TOOL
    assert call.artifacts == call.trace.step.tool_artifacts
    assert call.audit.sequence == call.trace.sequence
    assert call.audit.payload["tool_artifact_types"] == ["table"]


def test_the_audit_is_at_the_privacy_level_asked_for(nrllm):
    nrllm.load(HELLO)
    nrllm.privacy = "full"

    call = nrllm.invoke("word_count", text="b a b")

    assert call.audit.payload["tool_artifacts"][0]["data"]["rows"] == [["b", "2"], ["a", "1"]]


def test_run_drives_the_loop_against_a_scripted_model(nrllm):
    nrllm.load(HELLO)
    call = {"name": "word_count", "arguments": {"text": "b a b"}}

    outcome = nrllm.run("Count.", script=[{"tool_calls": [call]}, {"content": "3 words."}])

    assert (outcome.status, outcome.final_content) == ("completed", "3 words.")
    # One request per turn: the tools offered in the zone, then the tool's wire answer.
    (_, offered), (messages, _) = nrllm.requests
    assert [spec.name for spec in offered] == ["save_note", "word_count"]
    assert messages[-1].content == "3 words, 2 distinct. Most frequent: b (2), a (1)"


def test_run_approve_and_deny_drive_a_scripted_model(nrllm, tmp_path):
    nrllm.load(HELLO, settings={"notes_dir": str(tmp_path)})
    turn = {"tool_calls": [{"name": "save_note", "arguments": {"title": "A", "text": "x"}}]}

    first = nrllm.run("Save it.", script=[turn, {"content": "Saved."}], zone=TrustZone.LOCAL)
    second = nrllm.run("Save it.", script=[turn, {"content": "Not saved."}])

    assert (first.status, second.status) == ("awaiting_approval", "awaiting_approval")
    assert nrllm.approve(first).final_content == "Saved."
    assert nrllm.deny(second).final_content == "Not saved."
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "x\n"
    # The model saw the tool's answer: the requests are kept.
    tool_messages = [m for messages, _ in nrllm.requests for m in messages if m.tool_call_id]
    assert tool_messages[0].content == "Saved the note as a.txt."


def test_offered_is_the_gate_report_for_a_zone(nrllm):
    nrllm.load_installed("builtin")

    local = nrllm.offered(TrustZone.LOCAL)
    external = nrllm.offered(TrustZone.EXTERNAL_GLOBAL)

    assert local.zone is TrustZone.LOCAL
    assert "read_source" in local.offered_names
    assert "read_source" not in external.offered_names


def test_offered_narrows_to_a_configured_skill(nrllm):
    nrllm.load(HELLO)
    nrllm.config = {"skills": {"counting": {"allowed_tools": ["word_count"]}}}

    assert nrllm.offered(TrustZone.LOCAL, skill="counting").offered_names == ("word_count",)


@pytest.mark.nrllm_settings({"max_note_words": 1})
def test_the_marker_sets_the_loaded_plugins_section(nrllm):
    nrllm.load(HELLO)

    assert nrllm.invoke("save_note", title="t", text="two words").content == (
        "Error: a note has at most 1 words."
    )


@pytest.mark.nrllm_settings({"max_note_words": 0})
def test_a_bad_section_fails_as_the_configuration_would(nrllm):
    from nrllm_core import ConfigError

    nrllm.load(HELLO)

    with pytest.raises(ConfigError, match=r"hello\.max_note_words: expected an integer of 1"):
        nrllm.invoke("word_count", text="a")


def test_no_artifact_on_the_wire_passes_for_a_tool_that_keeps_them_apart(nrllm, leaky):
    nrllm.load(leaky)
    call = {"name": "lookup", "arguments": {"name": "ada"}}

    nrllm.invoke("lookup", name="ada")
    nrllm.run("Find Ada.", script=[{"tool_calls": [call]}, {"content": "One customer."}])

    nrllm.assert_no_artifact_on_wire()


def test_no_artifact_on_the_wire_fails_with_the_first_leak(nrllm, leaky, monkeypatch):
    from nrllm_core import _loop

    nrllm.load(leaky)
    call = {"name": "lookup", "arguments": {"name": "ada"}}
    answer = _loop._answer

    def leaking(segment, call, content, is_error):
        # A host double that copies the call's artifact into the model's next request.
        [table] = nrllm.sinks.trace[-1].step.tool_artifacts
        answer(segment, call, f"{content}: {table.data['rows'][0][1]}", is_error)

    monkeypatch.setattr(_loop, "_answer", leaking)
    nrllm.run("Find Ada.", script=[{"tool_calls": [call]}, {"content": "One customer."}])

    with pytest.raises(pytest.fail.Exception) as failed:
        nrllm.assert_no_artifact_on_wire()
    step = next(e for e in nrllm.sinks.trace if e.step.tool_artifacts)
    assert str(failed.value) == (
        f'an artifact of "lookup" (run {step.run_id}, step {step.sequence}) is on the wire: '
        "'ada@example.org' in model request 2, message 3 (tool)"
    )


def test_no_artifact_on_the_wire_checks_each_wire_payload(nrllm, leaky, monkeypatch):
    from nrllm_core import _invoke

    nrllm.load(leaky)
    new_wire = _invoke._new_wire

    def leaking(**fields):
        # A seam double whose wire payload is not the content the tool returned.
        return new_wire(**{**fields, "content": fields["content"] + " ada@example.org"})

    monkeypatch.setattr(_invoke, "_new_wire", leaking)
    nrllm.invoke("lookup", name="ada")

    with pytest.raises(pytest.fail.Exception, match=r"in the wire payload of call \"call_"):
        nrllm.assert_no_artifact_on_wire()


def test_no_artifact_on_the_wire_passes_for_what_a_tool_puts_in_its_content(nrllm, leaky):
    nrllm.load(leaky)

    # The tool chose to tell the model this value: its content is what the wire may carry.
    assert nrllm.invoke("lookup", name="show").content == "found ada@example.org"

    nrllm.assert_no_artifact_on_wire()


def test_no_artifact_on_the_wire_passes_for_the_prompt_and_the_models_arguments(nrllm, leaky):
    nrllm.load(leaky)
    call = {"name": "lookup", "arguments": {"name": "ada@example.org"}}
    script = [{"tool_calls": [call]}, {"content": "ada@example.org is a customer."}]

    nrllm.run("Is ada@example.org a customer?", script=script)

    nrllm.assert_no_artifact_on_wire()


def test_no_artifact_on_the_wire_passes_for_a_summary_of_its_own_table(nrllm):
    nrllm.load(HELLO)
    call = {"name": "word_count", "arguments": {"text": "the cat saw the other cat"}}

    nrllm.invoke("word_count", text="the cat saw the other cat")
    nrllm.run("Count.", script=[{"tool_calls": [call]}, {"content": "6 words."}])

    assert "other" in nrllm.sinks.wire[-1].content
    nrllm.assert_no_artifact_on_wire()


def test_no_artifact_on_the_wire_passes_for_builtin_read_records(nrllm, tmp_path):
    from nrllm_builtin.sample import create_sample_database

    database = create_sample_database(tmp_path / "sample.db")
    nrllm.load_installed("builtin", settings={"records_url": f"sqlite+pysqlite:///{database}"})

    call = nrllm.invoke("read_records", table="pages")

    assert "Home" in call.content
    assert "Home" in {cell for row in call.artifacts[0].data["rows"] for cell in row}
    nrllm.assert_no_artifact_on_wire()


@pytest.mark.anyio
async def test_scripted_names_a_model_for_a_run_started_by_hand(nrllm, tmp_path):
    from nrllm_core import AsyncHost, Finished, TextDelta

    nrllm.load(HELLO, settings={"notes_dir": str(tmp_path)})
    name = nrllm.scripted([{"content": "Hello."}])

    events = [e async for e in AsyncHost(nrllm.host).stream("Hi.", provider=name)]

    assert [type(e) for e in events] == [TextDelta, Finished]
    assert events[-1].outcome.final_content == "Hello."


def test_no_artifact_on_the_wire_fails_for_a_leak_made_before_both_channels(
    nrllm, leaky, monkeypatch
):
    """A seam double that puts an artifact's cell into the content before the wire payload
    and the trace step are built: the trace's own copy of the content has the leak too, so
    only what the tool returned tells it apart."""
    from nrllm_core import _invoke

    nrllm.load(leaky)
    bound = _invoke.bound_content

    def leaking(text):
        return bound(text) + (" ada@example.org" if text == "1 customer found" else "")

    monkeypatch.setattr(_invoke, "bound_content", leaking)
    call = {"name": "lookup", "arguments": {"name": "ada"}}
    nrllm.run("Find Ada.", script=[{"tool_calls": [call]}, {"content": "One customer."}])

    (step,) = [e.step for e in nrllm.sinks.trace if e.step.kind == "tool"]
    assert step.fields["tool_result"] == "1 customer found ada@example.org"
    with pytest.raises(pytest.fail.Exception, match=r"'ada@example\.org' in the wire payload"):
        nrllm.assert_no_artifact_on_wire()


def test_no_artifact_on_the_wire_keys_a_tools_content_by_its_run(nrllm, leaky, monkeypatch):
    """Call ids are the model's: a content one run's call returned does not excuse the same
    value on another run's call of that id."""
    from nrllm_core import _invoke

    nrllm.load(leaky)
    show = {"name": "lookup", "arguments": {"name": "show"}}
    nrllm.run("Show Ada.", script=[{"tool_calls": [{"id": "c1", **show}]}, {"content": "ok"}])
    nrllm.assert_no_artifact_on_wire()
    bound = _invoke.bound_content

    def leaking(text):
        return bound(text) + (" ada@example.org" if text == "1 customer found" else "")

    monkeypatch.setattr(_invoke, "bound_content", leaking)
    find = {"id": "c1", "name": "lookup", "arguments": {"name": "ada"}}
    nrllm.run("Find Ada.", script=[{"tool_calls": [find]}, {"content": "One customer."}])

    with pytest.raises(pytest.fail.Exception, match=r"ada@example\.org"):
        nrllm.assert_no_artifact_on_wire()

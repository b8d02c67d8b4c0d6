"""Roots, resources and prompts against a real SDK server: roots only when configured, the
``read_resource`` tool only when asked for and only for listed URIs, and the listings cleaned."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner
from structlog.testing import capture_logs

from nrllm_core import (
    Actor,
    ArtifactType,
    DataClass,
    Effect,
    Integrity,
    ToolContext,
    invoke,
    make_plugin_manager,
)
from nrllm_core.cli import cli
from nrllm_core.testing import SinkRecorder
from nrllm_mcp._cli import mcp
from nrllm_mcp._settings import SettingsError, load_settings

from .conftest import READ_ONLY, stdio_server

CONTEXT = ToolContext(run_id="r", call_id="c", actor=Actor(id="tester"))
# A name that hides a right-to-left override, a zero-width space and an escape sequence.
HOSTILE = "evil\u202eexe.txt\u200b\x1b[31mred\n" + "x" * 5000


def call(pm, name, arguments):
    return invoke(pm, name, arguments, context=CONTEXT)


def nrllm(*args: str):
    group = click.Group("nrllm", commands=dict(cli.commands))
    group.add_command(mcp)
    with capture_logs():
        return CliRunner().invoke(group, list(args), obj={"config_path": None})


@pytest.fixture(params=["stdio", "http"])
def server(request, state):
    """The test server's settings, over stdio or streamable HTTP."""
    if request.param == "stdio":
        return stdio_server(state, timeout_seconds=5)
    return {"url": request.getfixturevalue("http_server"), "timeout_seconds": 5}


def test_read_resource_is_off_by_default(configure, server):
    configure({"demo": server})
    assert "demo__read_resource" not in make_plugin_manager().catalog().tools


def test_read_resource_is_a_read_only_tool_of_the_servers_classes(configure, server):
    configure({"demo": {**server, "resources": True, "data_class": "publicContent"}})
    tool = make_plugin_manager().catalog().tools["demo__read_resource"]
    assert (tool.effect, tool.requires_approval) == (Effect.READ_ONLY, False)
    assert (tool.data_class, tool.integrity) == (DataClass.PUBLIC_CONTENT, Integrity.UNTRUSTED)
    assert tool.tool.parameters["required"] == ["uri"]


def test_a_listed_text_resource_is_content(configure, server):
    configure({"demo": {**server, "resources": True}})
    wire = call(make_plugin_manager(), "demo__read_resource", {"uri": "test://notes"})
    assert (wire.content, wire.is_error) == ("Meeting notes: ship on Friday.", False)


def test_a_blob_is_an_artifact_never_content(configure, server):
    configure({"demo": {**server, "resources": True}})
    pm = make_plugin_manager()
    capture = SinkRecorder()
    pm.register(capture)
    # Listed on the second page: every page is read.
    wire = call(pm, "demo__read_resource", {"uri": "test://picture"})
    assert (wire.content, wire.is_error) == ("", False)
    (artifact,) = capture.trace[-1].step.tool_artifacts
    assert artifact.type is ArtifactType.TEXT
    assert artifact.data == {"text": "image/png, 48 213 bytes"}


def test_an_unlisted_uri_is_refused_and_never_read(configure, server):
    configure({"demo": {**server, "resources": True}})
    wire = call(make_plugin_manager(), "demo__read_resource", {"uri": "test://secret"})
    assert wire.is_error
    assert "lists no such resource" in wire.content
    assert "unlisted secret" not in wire.content


def test_read_resource_is_not_offered_for_a_server_that_failed(configure, state):
    configure({"demo": {"command": str(state / "missing"), "resources": True}})
    assert "demo__read_resource" not in make_plugin_manager().catalog().tools


# A handshake-era server asks with a request of its own (stdio); from 2026-07-28 on (roots are
# deprecated, and still asked for) with an "input required" result, over stdio and HTTP.
@pytest.fixture(params=["2025-11-25", "stdio", "http"])
def asking_server(request, state):
    if request.param == "http":
        return {"url": request.getfixturevalue("http_server"), "read_only_tools": READ_ONLY}
    if request.param != "stdio":
        (state / "revision").write_text(request.param)
    return stdio_server(state, read_only_tools=READ_ONLY)


def test_roots_are_refused_unless_configured(configure, asking_server, state):
    configure({"demo": asking_server})
    wire = call(make_plugin_manager(), "demo__roots", {})
    assert wire.is_error
    if (state / "revision").exists():
        assert "List roots not supported" in wire.content
    else:
        assert wire.content == 'Error: MCP server "demo" refused the call of "demo__roots".'


def test_configured_roots_are_offered_as_file_uris(configure, asking_server, tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (tmp_path / "link").symlink_to(folder)
    configure({"demo": {**asking_server, "roots": [str(tmp_path / "link")]}})
    wire = call(make_plugin_manager(), "demo__roots", {})
    assert (wire.content, wire.is_error) == (folder.resolve().as_uri(), False)


def test_a_root_that_is_not_a_folder_keeps_the_server_from_starting(configure, state, tmp_path):
    (tmp_path / "file").write_text("")
    configure({"demo": stdio_server(state, roots=[str(tmp_path / "file")])})
    catalog = make_plugin_manager().catalog()
    assert "demo__echo" not in catalog.tools
    assert not (state / "starts").exists()
    result = nrllm("mcp", "resources", "demo")
    assert result.exit_code == 1
    assert "mcp.servers.demo.roots[0] is not an existing folder" in result.output


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("roots", "/tmp", r"mcp\.servers\.x\.roots: expected an array of absolute folder paths"),
        ("roots", ["relative/path"], r"mcp\.servers\.x\.roots\[0\]: expected an absolute"),
        ("resources", "yes", r"mcp\.servers\.x\.resources: expected a boolean"),
    ],
)
def test_settings_are_checked(key, value, message):
    with pytest.raises(SettingsError, match=message):
        load_settings({"servers": {"x": {"command": "srv", key: value}}})


def test_resources_are_listed_every_page(configure, server):
    configure({"demo": server})
    result = nrllm("mcp", "resources", "demo", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {
            "uri": "test://notes",
            "name": "notes",
            "mimeType": "text/plain",
            "description": "Notes.",
        },
        {"uri": "test://picture", "name": "picture", "mimeType": "image/png", "description": None},
    ]
    plain = nrllm("mcp", "resources", "demo")
    assert plain.stdout.splitlines() == [
        "test://notes  notes  (text/plain)",
        "  Notes.",
        "test://picture  picture  (image/png)",
    ]


def test_prompts_are_listed(configure, server):
    configure({"demo": server})
    result = nrllm("mcp", "prompts", "demo", "--json")
    assert result.exit_code == 0, result.output
    topic = {"name": "topic", "description": "What about.", "required": True}
    assert json.loads(result.stdout) == [
        {"name": "summarise", "description": "Summarise a topic.", "arguments": [topic]}
    ]
    plain = nrllm("mcp", "prompts", "demo")
    assert plain.stdout.splitlines() == [
        "summarise  Summarise a topic.",
        "  topic (required)  What about.",
    ]


def test_hostile_listings_are_cleaned_and_bounded(configure, state):
    (state / "hostile").write_text(HOSTILE, encoding="utf-8")
    configure({"demo": stdio_server(state)})
    for command in ("resources", "prompts"):
        result = nrllm("mcp", command, "demo", "--json")
        assert result.exit_code == 0, result.output
        shown = json.dumps(json.loads(result.stdout))
        for hidden in ("\\u202e", "\\u200b", "\\u001b"):
            assert hidden not in shown
        assert "x" * 1100 not in shown
        plain = nrllm("mcp", command, "demo").stdout
        for hidden in ("\u202e", "\u200b", "\x1b"):
            assert hidden not in plain
        assert "x" * 1100 not in plain


def test_an_unknown_server_is_bad_input(configure, state):
    configure({"demo": stdio_server(state)})
    for command in ("resources", "prompts"):
        result = nrllm("mcp", command, "nope")
        assert result.exit_code == 2
        assert 'no MCP server named "nope"' in result.output

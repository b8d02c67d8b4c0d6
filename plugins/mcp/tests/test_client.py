"""nrllm's client against a real SDK server: classification, results, failures, environment."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

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
from nrllm_core.testing import SinkRecorder
from nrllm_mcp._settings import SettingsError, load_settings

from .conftest import READ_ONLY, stdio_server

CONTEXT = ToolContext(run_id="r", call_id="c", actor=Actor(id="tester"))


def call(pm, name, arguments=None):
    return invoke(pm, name, arguments or {}, context=CONTEXT)


@pytest.fixture
def pm(configure, state):
    configure({"demo": stdio_server(state, read_only_tools=READ_ONLY[:-1], timeout_seconds=5)})
    return make_plugin_manager()


def test_a_servers_tools_are_registered_under_its_prefix_strict_by_default(configure, state):
    configure({"demo": stdio_server(state, read_only_tools=["echo"])})
    catalog = make_plugin_manager().catalog()
    names = sorted(n for n in catalog.tools if n.startswith("demo__"))
    assert names == [f"demo__{t}" for t in sorted(READ_ONLY)]
    echo = catalog.tools["demo__echo"]
    assert (echo.effect, echo.requires_approval) == (Effect.READ_ONLY, False)
    assert (echo.data_class, echo.group, echo.plugin) == (DataClass.SECRET_ADJACENT, "mcp", "mcp")
    # Not listed as read-only: a write that needs approval.
    image = catalog.tools["demo__image"]
    assert (image.effect, image.requires_approval) == (Effect.NON_IDEMPOTENT_WRITE, True)


def test_a_servers_answers_are_untrusted_unless_the_host_says_it_is_its_own(configure, state):
    configure(
        {
            "demo": stdio_server(state),
            "ours": stdio_server(state, prefix="ours", integrity="trusted"),
        }
    )
    catalog = make_plugin_manager().catalog()
    assert catalog.tools["demo__echo"].integrity is Integrity.UNTRUSTED
    assert catalog.tools["ours__echo"].integrity is Integrity.TRUSTED


def test_an_integrity_the_plugin_does_not_know_is_refused():
    with pytest.raises(SettingsError, match=r"mcp\.servers\.x\.integrity: 'yes' is not accepted"):
        load_settings({"servers": {"x": {"command": "srv", "integrity": "yes"}}})


def test_the_servers_hints_make_a_tool_stricter_never_looser(configure, state):
    configure({"demo": stdio_server(state, read_only_tools=READ_ONLY, data_class="publicContent")})
    catalog = make_plugin_manager().catalog()
    assert catalog.tools["demo__echo"].effect is Effect.READ_ONLY
    assert catalog.tools["demo__echo"].data_class is DataClass.PUBLIC_CONTENT
    # Listed as read-only by the operator, but the server says it destroys: a write.
    assert catalog.tools["demo__delete_all"].effect is Effect.NON_IDEMPOTENT_WRITE


def test_prefix_and_group_are_the_operators(configure, state):
    configure({"demo": stdio_server(state, prefix="gh", group="code")})
    catalog = make_plugin_manager().catalog()
    assert catalog.tools["gh__echo"].group == "code"
    assert not any(n.startswith("demo__") for n in catalog.tools)


def test_text_is_content_and_the_call_reaches_the_server(pm, state):
    wire = call(pm, "demo__echo", {"text": "hello there"})
    assert (wire.content, wire.is_error) == ("hello there", False)
    assert (state / "calls").read_text().splitlines() == ["echo"]


def test_arguments_are_checked_against_the_servers_schema_before_it_is_called(pm, state):
    wire = call(pm, "demo__echo", {"text": 3})
    assert wire.is_error
    assert "invalid arguments" in wire.content
    assert not (state / "calls").exists()


def test_an_image_is_an_artifact_only(pm):
    capture = SinkRecorder()
    pm.register(capture)
    wire = call(pm, "demo__image")
    assert wire.content == "here is the picture"
    (artifact,) = capture.trace[-1].step.tool_artifacts
    assert artifact.type is ArtifactType.TEXT
    assert artifact.data == {"text": "image/png, 48 213 bytes"}


def test_a_list_of_flat_objects_is_a_table(pm):
    capture = SinkRecorder()
    pm.register(capture)
    assert call(pm, "demo__rows").content == "2 rows"
    (artifact,) = capture.trace[-1].step.tool_artifacts
    assert artifact.type is ArtifactType.TABLE
    assert artifact.data == {"columns": ["city", "n"], "rows": [["Oslo", "1"], ["Bergen", "2"]]}


def test_is_error_becomes_an_error_result(pm):
    wire = call(pm, "demo__broken")
    assert (wire.content, wire.is_error) == ("it broke", True)


def test_the_child_gets_only_the_listed_environment_and_path(configure, state, monkeypatch):
    monkeypatch.setenv("NRLLM_TEST_SECRET", "hunter2")
    configure({"demo": stdio_server(state, read_only_tools=READ_ONLY, env={"GREETING": "hi"})})
    wire = call(make_plugin_manager(), "demo__environment")
    names = set(wire.content.split(","))
    assert {"GREETING", "PATH"} <= names
    assert "NRLLM_TEST_SECRET" not in names
    assert not names & {"HOME", "USER", "NRLLM_HOME", "NRLLM_CONFIG"}
    # What Python itself may add (a locale fallback) is all there is besides.
    assert names - {"GREETING", "PATH"} <= {"LC_CTYPE"}


def test_a_hung_server_times_out_and_the_next_call_reconnects(configure, state):
    configure({"demo": stdio_server(state, read_only_tools=READ_ONLY, timeout_seconds=1)})
    pm = make_plugin_manager()
    assert "demo__hang" in pm.catalog().tools
    started = time.monotonic()
    wire = call(pm, "demo__hang")
    assert time.monotonic() - started < 5
    assert wire.is_error
    assert wire.content == (
        'Error: MCP server "demo" did not answer in time; the connection is re-opened on the '
        "next call."
    )
    assert call(pm, "demo__echo", {"text": "back"}).content == "back"


def test_a_crashed_server_is_an_error_then_a_reconnect(configure, state, tmp_path):
    script = tmp_path / "dies.py"
    # A server that answers the handshake and the listing, then exits on the first call.
    script.write_text(
        "import runpy, sys, os\n"
        "import mcp_server\n"
        "async def die(ctx, params):\n"
        "    os._exit(3)\n"
        "mcp_server.server = mcp_server.Server('dies', on_list_tools=mcp_server.list_tools,"
        " on_call_tool=die)\n"
        "mcp_server.main()\n",
        encoding="utf-8",
    )
    server_dir = str(Path(__file__).parent)
    configure(
        {
            "demo": {
                "command": sys.executable,
                "args": [str(script), str(state), "stdio"],
                "env": {"PYTHONPATH": server_dir},
                "read_only_tools": READ_ONLY,
                "timeout_seconds": 3,
            }
        }
    )
    pm = make_plugin_manager()
    assert "demo__echo" in pm.catalog().tools
    first = call(pm, "demo__echo", {"text": "x"})
    assert first.is_error
    assert first.content.startswith('Error: MCP server "demo" ')
    # Re-opened on the next call: the server answers the listing again, then dies again.
    second = call(pm, "demo__echo", {"text": "x"})
    assert second.is_error


def test_an_unreachable_server_registers_nothing_and_the_rest_works(configure, state):
    configure(
        {
            "gone": {"command": "/nonexistent/server", "timeout_seconds": 2},
            "demo": stdio_server(state, read_only_tools=READ_ONLY),
        }
    )
    catalog = make_plugin_manager().catalog()
    assert not any(n.startswith("gone__") for n in catalog.tools)
    assert "demo__echo" in catalog.tools


def test_a_disabled_server_is_not_started(configure, state):
    configure({"demo": stdio_server(state, enabled=False)})
    assert not any(n.startswith("demo__") for n in make_plugin_manager().catalog().tools)


def test_over_streamable_http(configure, http_server, monkeypatch):
    monkeypatch.setenv("DEMO_TOKEN", "Bearer t0ken")
    configure(
        {
            "web": {
                "url": http_server,
                "headers_env": {"Authorization": "DEMO_TOKEN"},
                "read_only_tools": READ_ONLY,
                "timeout_seconds": 5,
            }
        }
    )
    pm = make_plugin_manager()
    assert call(pm, "web__echo", {"text": "over http"}).content == "over http"
    assert call(pm, "web__broken").is_error


def test_names_equal_after_reduction_are_withheld_as_a_clash(configure, state):
    (state / "collide").write_text("1")
    configure({"demo": stdio_server(state, read_only_tools=READ_ONLY)})
    catalog = make_plugin_manager().catalog()
    assert "demo__echo_v2" not in catalog.tools
    assert catalog.clashes["demo__echo_v2"] == ("mcp", "mcp")
    assert "demo__echo" in catalog.tools


def test_the_servers_are_the_hosts_own_not_the_default_files(nrllm, configure, state):
    # The file a command would read names another server: the harness's section is what counts.
    configure({"other": stdio_server(state)})
    name = nrllm.load(
        "nrllm_mcp",
        {"servers": {"mine": stdio_server(state, read_only_tools=["echo"], timeout_seconds=5)}},
    )
    assert name == "mcp"
    tools = nrllm.pm.catalog().tools
    assert "mine__echo" in tools
    assert not any(n.startswith("other__") for n in tools)
    assert nrllm.invoke("mine__echo", text="hello").wire.content == "hello"


def test_a_host_built_in_code_sees_its_own_servers(tmp_path, configure, state):
    from nrllm_core import Host

    # The default file names another server: the data the host was built with is what counts.
    configure({"other": stdio_server(state)})
    host = Host.from_config(
        data={"mcp": {"servers": {"coded": stdio_server(state, read_only_tools=["echo"])}}},
        data_dir=tmp_path / "coded-data",
    )
    try:
        tools = host.pm.catalog().tools
        assert "coded__echo" in tools
        assert not any(n.startswith("other__") for n in tools)
        assert host.invoke("coded__echo", {"text": "hi"}).content == "hi"
    finally:
        host.store.close()


def test_content_meant_only_for_the_user_is_an_artifact_never_content(pm):
    capture = SinkRecorder()
    pm.register(capture)
    wire = call(pm, "demo__audience")
    assert wire.content == "for both\nfor the model\nfor everyone"
    assert "4111" not in wire.content
    artifacts = capture.trace[-1].step.tool_artifacts
    assert [(a.type, a.label, a.data) for a in artifacts] == [
        (
            ArtifactType.TEXT,
            "text for the user from demo__audience",
            {"text": "for the user: 4111 1111 1111 1111"},
        ),
        (ArtifactType.TEXT, "text for the user from demo__audience", {"text": "for nobody"}),
    ]


def test_an_error_sends_only_the_text_meant_for_the_model():
    import mcp.types as types

    from nrllm_mcp._results import to_tool_result

    only_user = types.Annotations(audience=["user"])
    result = types.CallToolResult(
        content=[types.TextContent(text="token=s3cret", annotations=only_user)], is_error=True
    )
    failed = to_tool_result(result, "t")
    assert (failed.content, failed.is_error) == ('Error: tool "t" failed on the server.', True)
    both = types.CallToolResult(
        content=[
            types.TextContent(text="token=s3cret", annotations=only_user),
            types.TextContent(text="it broke"),
        ],
        is_error=True,
    )
    assert to_tool_result(both, "t").content == "it broke"

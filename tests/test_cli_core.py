"""The core commands: ``nrllm plugins`` and ``nrllm invoke``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from nrllm_core.cli import cli

FIRST_PARTY = {"NRLLM_LOAD_PLUGINS": "builtin,repurpose"}
NRLLM = Path(sys.executable).with_name("nrllm")


@pytest.fixture
def run():
    def run(*args: str, env: dict[str, str] | None = None):
        return CliRunner().invoke(cli, list(args), env=env or FIRST_PARTY, catch_exceptions=False)

    return run


def test_plugins_json(run):
    result = run("plugins", "--json")
    assert result.exit_code == 0
    records = {r["name"]: r for r in json.loads(result.stdout)}
    for record in records.values():
        assert {"name", "distribution", "version", "hooks", "tools", "error"} <= set(record)
    builtin = records["builtin"]
    assert builtin["distribution"] == "nrllm-builtin"
    assert builtin["version"] == "0.1.0"
    assert builtin["hooks"] == ["nrllm_register_tools", "nrllm_settings_class"]
    assert "get_system_status" in builtin["tools"]
    assert builtin["error"] is None
    assert records["repurpose"]["distribution"] == "nrllm-repurpose"
    assert records["nrllm.defaults"]["distribution"] == "nrllm-core"


def test_plugins_json_with_no_plugins(run):
    result = run("plugins", "--json", env={"NRLLM_LOAD_PLUGINS": ""})
    names = [r["name"] for r in json.loads(result.stdout)]
    # Only core's own plugins, which are named "nrllm.*" and are not entry points.
    assert "nrllm.defaults" in names
    assert [n for n in names if not n.startswith("nrllm.")] == []


def test_plugins_readable(run):
    result = run("plugins")
    assert result.exit_code == 0
    assert "builtin (nrllm-builtin 0.1.0)" in result.stdout
    tools_line = next(line for line in result.stdout.splitlines() if "get_system_status" in line)
    assert tools_line.strip().startswith("tools: ")


def test_invoke_json(run):
    result = run("invoke", "get_system_status", "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert set(report) == {"wire", "trace", "audit"}
    wire = report["wire"]
    assert set(wire) == {"call_id", "tool_name", "content", "is_error"}
    assert wire["tool_name"] == "get_system_status"
    assert wire["is_error"] is False
    assert "python: " in wire["content"]
    trace = report["trace"]
    assert trace["tool_name"] == "get_system_status"
    assert trace["tool_arguments"] == {}
    assert trace["tool_result"] == wire["content"]
    assert trace["tool_is_error"] is False
    (artifact,) = trace["tool_artifacts"]
    assert artifact["type"] == "table"
    assert artifact["label"] == "System status"
    assert artifact["data"]["columns"] == ["key", "value"]
    # The persisted copy is filtered at the default privacy level: shape and count, no content.
    audit = report["audit"]["payload"]
    assert "tool_artifacts" not in audit
    assert "tool_result" not in audit
    assert audit["content_redacted"] is True
    assert audit["tool_artifacts_count"] == 1
    assert audit["tool_artifact_types"] == ["table"]
    # Everything the model would get is in the wire; the table is not.
    assert "System status" not in json.dumps(wire)


def test_invoke_readable(run):
    result = run("invoke", "get_system_status")
    assert result.exit_code == 0
    out = result.stdout
    assert "wire  (ok): what the model would receive" in out
    assert "  python: " in out
    assert "trace: 1 artifact(s)" in out
    assert "[table] System status" in out
    assert "audit: the persisted copy" in out


def test_an_error_result_exits_zero(run):
    result = run("invoke", "no_such_tool", "--json")
    assert result.exit_code == 0
    report = json.loads(result.stdout)
    assert report["wire"]["content"] == 'Error: unknown tool "no_such_tool"'
    assert report["wire"]["is_error"] is True
    assert "tool_artifacts" not in report["trace"]


def test_invalid_arguments_for_the_tool_are_a_result(run):
    result = run("invoke", "get_system_status", "--args", '{"x": 1}', "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout)["wire"]["content"].startswith(
        'Error: invalid arguments for tool "get_system_status": '
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("[1]", "must be a JSON object"),
        ('"text"', "must be a JSON object"),
        ("null", "must be a JSON object"),
        ("{", "not valid JSON"),
        ("{'a': 1}", "not valid JSON"),
        ('{"x": NaN}', "not valid JSON"),
    ],
)
def test_bad_cli_input_exits_two(run, raw, message):
    result = run("invoke", "get_system_status", "--args", raw, "--json")
    assert result.exit_code == 2
    assert message in result.stderr
    assert result.stdout == ""


def test_the_console_script_keeps_stdout_for_json():
    env = {**os.environ, **FIRST_PARTY}
    done = subprocess.run(
        [str(NRLLM), "invoke", "no_such_tool", "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["wire"]["is_error"] is True

"""A third-party plugin, built as its own distribution and pip-installed, works through ``nrllm``.

A second plugin raising at import leaves the host working. Both are uninstalled afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

NRLLM = Path(sys.executable).with_name("nrllm")
SUFFIX = uuid.uuid4().hex[:8]
GOOD = f"tpgood{SUFFIX}"
BROKEN = f"tpbroken{SUFFIX}"

GOOD_MODULE = '''
"""A third-party nrllm plugin."""

from nrllm_core import DataClass, ToolArtifact, ToolRegistry, ToolResult, hookimpl, tool


@tool(group="content", name="shout_{suffix}", data_class=DataClass.PUBLIC_CONTENT)
def shout(text: str, times: int = 1) -> ToolResult:
    """Repeat the text in capitals."""
    loud = " ".join([text.upper()] * times)
    return ToolResult.text(loud, ToolArtifact.text("run-only {suffix}", label="Notes"))


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    registry.register(shout)
'''

BROKEN_MODULE = '''
"""A plugin that fails at import."""

raise RuntimeError("broken plugin {suffix} cannot start")
'''


def write_distribution(root: Path, name: str, module: str) -> Path:
    project = root / name
    package = project / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(module.format(suffix=SUFFIX), encoding="utf-8")
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{name}"
            version = "0.0.1"
            dependencies = ["nrllm-core"]

            [project.entry-points.nrllm]
            {name} = "{name}"

            [tool.hatch.build.targets.wheel]
            packages = ["{name}"]
            """
        ),
        encoding="utf-8",
    )
    return project


def pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[None]:
    root = tmp_path_factory.mktemp("third_party")
    projects = [
        write_distribution(root, GOOD, GOOD_MODULE),
        write_distribution(root, BROKEN, BROKEN_MODULE),
    ]
    try:
        pip(
            "install",
            "--no-build-isolation",
            "--no-deps",
            "--no-index",
            "-q",
            *map(str, projects),
        )
        yield
    finally:
        pip("uninstall", "-y", "-q", GOOD, BROKEN)


def nrllm(*args: str) -> subprocess.CompletedProcess[str]:
    # Only the first-party plugins and these two, whatever else is installed.
    env = {**os.environ, "NRLLM_LOAD_PLUGINS": f"builtin,{GOOD},{BROKEN}"}
    return subprocess.run(
        [str(NRLLM), *args], capture_output=True, text=True, env=env, check=False, timeout=120
    )


def test_the_plugins_are_discovered_and_the_broken_one_reported(installed):
    done = nrllm("plugins", "--json")
    assert done.returncode == 0, done.stderr
    records = {r["name"]: r for r in json.loads(done.stdout)}
    good = records[GOOD]
    assert good["distribution"] == GOOD
    assert good["version"] == "0.0.1"
    assert good["hooks"] == ["nrllm_register_tools"]
    assert good["tools"] == [f"shout_{SUFFIX}"]
    assert good["error"] is None
    broken = records[BROKEN]
    assert broken["distribution"] == BROKEN
    assert broken["error"] == f"RuntimeError: broken plugin {SUFFIX} cannot start"
    assert broken["tools"] == []
    assert records["builtin"]["error"] is None
    # The command shows the traceback itself, once: none on stderr.
    assert broken["traceback"].startswith("Traceback (most recent call last)")
    assert "Traceback" not in done.stderr


def test_the_third_party_tool_is_invoked_through_the_seam(installed):
    done = nrllm("invoke", f"shout_{SUFFIX}", "--args", '{"text": "hi", "times": 2}', "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["wire"]["content"] == "HI HI"
    assert report["wire"]["is_error"] is False
    assert report["trace"]["tool_artifacts"] == [
        {"type": "text", "label": "Notes", "data": {"text": f"run-only {SUFFIX}"}}
    ]
    assert f"run-only {SUFFIX}" not in json.dumps(report["wire"])


def test_the_host_keeps_working_next_to_a_broken_plugin(installed):
    done = nrllm("invoke", "get_system_status", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["wire"]["is_error"] is False
    assert report["wire"]["content"].startswith("python: ")

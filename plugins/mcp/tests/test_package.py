"""The distribution's shape: nothing at import, and core never imports it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import nrllm_core

CORE = Path(nrllm_core.__file__).parent


def test_importing_the_plugin_loads_no_sdk_no_store_and_starts_no_thread():
    code = (
        "import json, sys, threading, nrllm_mcp\n"
        "print(json.dumps([sorted(sys.modules), threading.active_count()]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    modules, threads = json.loads(done.stdout)
    heavy = ("mcp", "mcp_types", "sqlalchemy", "click", "httpx2", "anyio")
    assert [m for m in modules if m.split(".")[0] in heavy] == []
    assert threads == 1


def test_registering_with_no_server_configured_loads_no_pin_store():
    # `nrllm tools` without an MCP server pays nothing for the plugin's pins.
    code = (
        "import json, sys\n"
        "from nrllm_core import ToolRegistry\n"
        "from nrllm_mcp._client import register_servers\n"
        "from nrllm_mcp._settings import McpSettings\n"
        "register_servers(ToolRegistry(), McpSettings(), None, {})\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    modules = json.loads(done.stdout)
    assert [m for m in modules if m.split(".")[0] == "sqlalchemy" or m == "nrllm_mcp._pins"] == []


def test_no_module_of_core_imports_the_plugin():
    importing = []
    for path in CORE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(name.split(".")[0] == "nrllm_mcp" for name in names):
                importing.append(str(path.relative_to(CORE)))
    assert importing == []

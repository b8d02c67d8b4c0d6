"""Health of the process the tools run in."""

from __future__ import annotations

import os
import platform
import sys

from nrllm_core import Integrity, ToolArtifact, ToolResult, tool


@tool(group="system", integrity=Integrity.TRUSTED)
def get_system_status() -> ToolResult:
    """Report the Python version, platform, process id and load average of the host process."""
    rows = [
        ["python", platform.python_version()],
        ["implementation", sys.implementation.name],
        ["platform", platform.platform(terse=True)],
        ["pid", str(os.getpid())],
    ]
    if hasattr(os, "getloadavg"):
        rows.append(["load_average", " ".join(f"{v:.2f}" for v in os.getloadavg())])
    text = "\n".join(f"{key}: {value}" for key, value in rows)
    return ToolResult.text(text, ToolArtifact.table(["key", "value"], rows, label="System status"))

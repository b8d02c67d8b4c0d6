"""The installed nrllm plugins, read from package metadata: ``list_plugins``."""

from __future__ import annotations

from typing import Any, Final

from nrllm_core import Integrity, Tool, ToolArtifact, ToolContext, ToolResult

__all__ = ["ListPlugins"]

ENTRY_POINT_GROUP: Final = "nrllm"


class ListPlugins(Tool):
    name = "list_plugins"
    description = (
        "List the installed nrllm plugins: entry-point name, module, distribution and version."
    )
    group = "system"
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        # Metadata only: listing a plugin never imports its code.
        from importlib.metadata import entry_points

        rows = []
        for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda p: p.name):
            dist = point.dist
            rows.append(
                [
                    point.name,
                    point.value,
                    dist.name if dist is not None else "",
                    dist.version if dist is not None else "",
                ]
            )
        if not rows:
            return ToolResult.text("No nrllm plugins are installed.")
        lines = [f"Installed plugins ({len(rows)}):"]
        lines += [f"- {name}: {module} ({dist} {version})" for name, module, dist, version in rows]
        artifact = ToolArtifact.table(
            ["name", "module", "distribution", "version"], rows, label="Plugins"
        )
        return ToolResult.text("\n".join(lines), artifact)

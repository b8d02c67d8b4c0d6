"""An nrllm plugin the tests serve through ``nrllm mcp serve``, installed as a dist-info."""

from __future__ import annotations

import os
from pathlib import Path

from nrllm_core import DataClass, Effect, ToolArtifact, ToolRegistry, ToolResult, hookimpl, tool

ARTIFACT_MARK = "ARTIFACT-ONLY-7731"


@tool(group="content", name="weather")
def weather(city: str) -> ToolResult:
    """Today's weather in a city."""
    table = ToolArtifact.table(["city", "secret"], [[city, ARTIFACT_MARK]], label="detail")
    return ToolResult.text(f"Sunny in {city}.", table)


@tool(group="content", name="write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
def write_note(text: str) -> ToolResult:
    """Write a note to the notes file."""
    with (Path(os.environ["NRLLM_HOME"]) / "notes.txt").open("a", encoding="utf-8") as notes:
        notes.write(text + "\n")
    return ToolResult.text("noted")


@tool(group="content", name="read_secret", data_class=DataClass.SECRET_ADJACENT)
def read_secret() -> ToolResult:
    """A secret: never offered to an external zone."""
    return ToolResult.text("s3cret")


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    registry.register(weather)
    registry.register(write_note)
    registry.register(read_secret)

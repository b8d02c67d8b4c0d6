"""The formats a repurpose job can produce."""

from __future__ import annotations

from typing import Final

from nrllm_core import DataClass, Integrity, ToolArtifact, ToolResult, tool

FORMATS: Final = {
    "podcast": "a podcast script (audio where a speech provider is configured)",
    "schaubild": "a Mermaid diagram",
    "story": "a narrative retelling",
    "exec_summary": "an executive summary",
    "faq": "questions and answers",
    "social_post": "a short social media post",
    "newsletter": "a newsletter section",
    "slide_deck": "slides in Markdown",
    "handout": "a handout, also as PDF",
}


@tool(group="nr_repurpose", data_class=DataClass.PUBLIC_CONTENT, integrity=Integrity.TRUSTED)
def list_repurpose_formats() -> ToolResult:
    """List the formats a repurpose job can turn a web page or a PDF into."""
    rows = [[name, about] for name, about in FORMATS.items()]
    text = "\n".join(f"{name}: {about}" for name, about in rows)
    return ToolResult.text(text, ToolArtifact.table(["format", "produces"], rows, label="Formats"))

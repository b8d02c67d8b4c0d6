"""An example nrllm plugin: one tool that counts the words in a text."""

from __future__ import annotations

from collections import Counter

from nrllm_core import DataClass, ToolArtifact, ToolRegistry, ToolResult, hookimpl, tool

# The table shows the most frequent words only, so the artifact stays small for any input.
TOP_WORDS = 10


@tool(group="content", data_class=DataClass.EDITOR_CONTENT)
def word_count(text: str) -> ToolResult:
    """Count the words in a text and list the most frequent ones."""
    words = [w.strip(".,;:!?\"'()[]").lower() for w in text.split()]
    counts = Counter(w for w in words if w)
    total = sum(counts.values())
    if not total:
        return ToolResult.error("Error: the text has no words.")
    top = counts.most_common(TOP_WORDS)
    summary = f"{total} words, {len(counts)} distinct. Most frequent: " + ", ".join(
        f"{word} ({n})" for word, n in top
    )
    table = ToolArtifact.table(
        ["word", "count"], [[word, str(n)] for word, n in top], label="Most frequent words"
    )
    return ToolResult.text(summary, table)


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    """Register this plugin's tools."""
    registry.register(word_count)

"""An example nrllm plugin: a tool that counts the words in a text, and one that saves a note."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import attrs

from nrllm_core import (
    DataClass,
    Effect,
    ToolArtifact,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    tool,
)

# The table shows the most frequent words only, so the artifact stays small for any input.
TOP_WORDS = 10


def _positive(_: object, attribute: attrs.Attribute[Any], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name}: expected an integer of 1 or more")


@attrs.frozen(kw_only=True)
class HelloSettings:
    """The ``[hello]`` section of ``nrllm.toml``."""

    # Where save_note writes; a relative folder is relative to where nrllm runs.
    notes_dir: Path = Path("notes")
    # The longest note save_note accepts, in words.
    max_note_words: int = attrs.field(default=200, validator=_positive)


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


def note_file(title: str, context: ToolContext) -> Path:
    """The file a note with this title goes to: its title's letters and digits only."""
    settings: HelloSettings = context.settings
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "note"
    return settings.notes_dir / f"{slug[:40]}.txt"


def preview_note(title: str, text: str, context: ToolContext) -> list[str]:
    """What the person who approves the call sees: the file and the size of the note."""
    return [f"Write {note_file(title, context)}", f"{len(text.split())} words"]


@tool(
    group="content",
    data_class=DataClass.EDITOR_CONTENT,
    effect=Effect.NON_IDEMPOTENT_WRITE,
    preview=preview_note,
)
def save_note(title: str, text: str, context: ToolContext) -> ToolResult:
    """Save a note as a text file in the notes folder."""
    settings: HelloSettings = context.settings
    if len(text.split()) > settings.max_note_words:
        return ToolResult.error(f"Error: a note has at most {settings.max_note_words} words.")
    path = note_file(title, context)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        # "x": create the file, never overwrite one.
        with path.open("x", encoding="utf-8") as note:
            note.write(text + "\n")
    except FileExistsError:
        return ToolResult.error(f"Error: a note named {path.name} exists already.")
    return ToolResult.text(f"Saved the note as {path.name}.")


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    """Register this plugin's tools."""
    registry.register(word_count)
    registry.register(save_note)


@hookimpl
def nrllm_settings_class(plugin_name: str) -> type[HelloSettings]:
    """The class core checks the ``[hello]`` section with."""
    return HelloSettings

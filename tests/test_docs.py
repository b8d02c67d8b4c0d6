"""The reference docs cover every hook and every public name, as the code spells them."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import nrllm_core
from nrllm_core import hookspecs

DOCS = Path(__file__).resolve().parent.parent / "docs"
HEADING = re.compile(r"^## (nrllm_\w+)\((.*)\)$", re.MULTILINE)
EXAMPLE = DOCS / "examples" / "nrllm-hello"
QUOTED_FILE = re.compile(r"^<!-- file: (\S+) -->\n```\w+\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def spec_signatures() -> dict[str, str]:
    return {
        name: ", ".join(inspect.signature(function).parameters)
        for name, function in inspect.getmembers(hookspecs, inspect.isfunction)
        if name.startswith("nrllm_")
    }


def documented_hooks() -> dict[str, str]:
    text = (DOCS / "reference" / "hooks.md").read_text(encoding="utf-8")
    return {name: arguments for name, arguments in HEADING.findall(text)}


def test_hookspecs_are_found() -> None:
    assert "nrllm_register_tools" in spec_signatures()
    assert "nrllm_execute_tool" in spec_signatures()


@pytest.mark.parametrize("hook", sorted(spec_signatures()))
def test_every_hook_has_a_heading_with_its_arguments(hook: str) -> None:
    documented = documented_hooks()
    assert hook in documented, f"docs/reference/hooks.md has no '## {hook}(...)' heading"
    assert documented[hook] == spec_signatures()[hook]


def test_hooks_md_documents_no_hook_that_does_not_exist() -> None:
    assert set(documented_hooks()) <= set(spec_signatures())


@pytest.mark.parametrize("name", sorted(nrllm_core.__all__))
def test_every_public_name_is_in_api_md(name: str) -> None:
    text = (DOCS / "reference" / "api.md").read_text(encoding="utf-8")
    heading = rf"^### `{re.escape(name)}`$"
    assert re.search(heading, text, re.MULTILINE), f"docs/reference/api.md has no entry for {name}"


EXAMPLE_FILES = [
    "pyproject.toml",
    "nrllm.toml",
    "notebook.json",
    "nrllm_hello/__init__.py",
    "tests/test_hello.py",
]


def quoted_files() -> dict[str, str]:
    text = (DOCS / "tutorial" / "writing-a-plugin.md").read_text(encoding="utf-8")
    return dict(QUOTED_FILE.findall(text))


def test_the_tutorial_quotes_every_file_of_the_example() -> None:
    assert sorted(quoted_files()) == sorted(EXAMPLE_FILES)


@pytest.mark.parametrize("path", EXAMPLE_FILES)
def test_the_tutorial_quotes_the_example_word_for_word(path: str) -> None:
    assert quoted_files()[path] == (EXAMPLE / path).read_text(encoding="utf-8")

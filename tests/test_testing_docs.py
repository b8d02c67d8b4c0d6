"""docs/reference/testing.md documents every part of the nrllm fixture with a quoted test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from nrllm_core.pytest_plugin import Harness, Invocation

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "reference" / "testing.md"
QUOTED = re.compile(r"^<!-- test: (\S+)::(\w+) -->\n```python\n(.*?)^```$", re.M | re.S)
# What a tool author uses; close() is the fixture's own teardown.
PUBLIC = sorted(n for n in vars(Harness) if not n.startswith("_") and n != "close")


def quoted() -> list[tuple[str, str, str]]:
    return QUOTED.findall(PAGE.read_text(encoding="utf-8"))


def functions_of(path: str) -> dict[str, str]:
    source = (ROOT / path).read_text(encoding="utf-8")
    lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            first = (node.decorator_list[0] if node.decorator_list else node).lineno - 1
            found[node.name] = "\n".join(lines[first : node.end_lineno]) + "\n"
    return found


def test_the_page_quotes_tests():
    assert len(quoted()) >= 10


# Named by the test quoted: two names may share their first words.
@pytest.mark.parametrize(("path", "name", "code"), quoted(), ids=[n for _, n, _ in quoted()])
def test_each_example_is_a_test_word_for_word(path, name, code):
    assert name.startswith("test_")
    assert functions_of(path)[name] == code


@pytest.mark.parametrize("name", [*PUBLIC, "instance attributes"])
def test_every_part_of_the_harness_is_documented(name):
    text = PAGE.read_text(encoding="utf-8")
    names = PUBLIC if name != "instance attributes" else ["privacy", "config", "sinks", "requests"]
    for part in names:
        assert f"nrllm.{part}" in text, f"testing.md does not document nrllm.{part}"


@pytest.mark.parametrize(
    "method", ["load", "load_installed", "invoke", "run", "approve", "deny", "offered",
               "assert_no_artifact_on_wire"],
)  # fmt: skip
def test_every_method_has_a_heading_followed_by_an_example(method):
    text = PAGE.read_text(encoding="utf-8")
    heading = re.search(rf"^### .*nrllm\.{method}\(", text, re.M)
    assert heading, f"no heading for nrllm.{method}"
    # Its own example: before the next heading, so no method borrows its neighbour's.
    own = re.split(r"^#{2,3} ", text[heading.end() :], maxsplit=1, flags=re.M)[0]
    assert "<!-- test: " in own, f"nrllm.{method} has no example"


def test_the_invocation_fields_are_documented():
    text = PAGE.read_text(encoding="utf-8")
    fields = [a.name for a in Invocation.__attrs_attrs__]
    properties = [n for n, v in vars(Invocation).items() if isinstance(v, property)]
    for name in fields + properties:
        assert f"`.{name}`" in text

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


def test_the_index_counts_the_tools_the_tutorial_builds(nrllm) -> None:
    nrllm.load(EXAMPLE / "nrllm_hello")
    count = ["no", "one", "two", "three"][len(nrllm.pm.catalog().tools)]
    index = (DOCS / "index.md").read_text(encoding="utf-8")
    tutorial = index[index.index("## Tutorial") : index.index("## How-to guides")]

    assert f"a plugin with {count} tools" in " ".join(tutorial.split())
    assert f"An example nrllm plugin: {count} tools" in (EXAMPLE / "pyproject.toml").read_text(
        encoding="utf-8"
    )


def test_governance_classifies_personal_data_with_an_example_that_works(nrllm) -> None:
    import types

    from nrllm_core import DataClass, TrustZone

    text = (DOCS / "explanation" / "governance.md").read_text(encoding="utf-8")
    section = text[text.index("## Personal data") :]
    section = section[: section.index("\n## ")]
    assert "content and artifacts alike" in " ".join(section.split())
    modules = []
    for number, code in enumerate(re.findall(r"```python\n(.*?)```", section, re.DOTALL)):
        module = types.ModuleType(f"governance_example_{number}")
        exec(compile(code, f"governance.md example {number}", "exec"), module.__dict__)
        modules.append(module)
    tool_module, policy_module = modules

    nrllm.load(tool_module)
    call = nrllm.invoke("find_customer", email="ada@example.org")
    # The model gets a customer number; the person is in the artifact, which the class covers.
    assert call.content == "1 customer found: C-1042"
    assert ["C-1042", "Ada Lovelace", "ada@example.org", "+44 20 7946 0000"] in (
        call.artifacts[0].data["rows"]
    )
    assert nrllm.offered(TrustZone.EXTERNAL_GLOBAL).offered_names == ("find_customer",)
    nrllm.load(policy_module)
    registered = nrllm.pm.catalog().get("find_customer")
    assert registered.declared_data_class is DataClass.EDITOR_CONTENT
    assert (registered.data_class, registered.data_class_source) == (
        DataClass.INTERNAL_CONFIGURATION,
        "hook",
    )
    assert nrllm.offered(TrustZone.EXTERNAL_GLOBAL).offered_names == ()
    assert nrllm.offered(TrustZone.EXTERNAL_EU).offered_names == ("find_customer",)


SLOW_ROW = re.compile(r"^\| ([\d.]+) s \| (call|setup|teardown) \| `([^`:]+)::(\w+)(\[.*\])?` \|$")


def test_contributing_lists_the_25_slowest_tests_and_each_one_exists() -> None:
    text = (DOCS / "contributing.md").read_text(encoding="utf-8")
    section = text[text.index("## The 25 slowest tests") :]
    rows = [SLOW_ROW.match(line) for line in section.splitlines() if line.startswith("| ")]
    found = [row for row in rows if row is not None]
    assert len(found) == 25, "each of the 25 rows reads | SECONDS s | PHASE | `PATH::TEST[ID]` |"
    seconds = [float(row[1]) for row in found]
    assert seconds == sorted(seconds, reverse=True)
    for row in found:
        path = DOCS.parent / row[3]
        assert f"def {row[4]}(" in path.read_text(encoding="utf-8"), row[0]


def test_make_test_runs_on_a_worker_per_core_as_contributing_says() -> None:
    makefile = (DOCS.parent / "Makefile").read_text(encoding="utf-8")
    text = " ".join((DOCS / "contributing.md").read_text(encoding="utf-8").split())
    assert "WORKERS ?= auto\n" in makefile
    assert "$(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup --durations=25\n" in makefile
    assert "(`-n auto --dist loadgroup`), prints the 25 slowest tests" in text
    assert "pytest-xdist" in (DOCS.parent / "pyproject.toml").read_text(encoding="utf-8")


def test_the_host_integration_examples_are_tests_word_for_word() -> None:
    from .test_testing_docs import QUOTED, functions_of

    page = (DOCS / "how-to" / "host-integration.md").read_text(encoding="utf-8")
    quoted = QUOTED.findall(page)
    assert quoted
    for path, name, code in quoted:
        assert functions_of(path)[name] == code, name

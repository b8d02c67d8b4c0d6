"""read_source and search_code: files under the configured roots only."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def tree(tmp_path):
    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "app.py").write_text(
        'API = "sk-abcdefghijklmnopqrstuvwx"\ndef main():\n    return "hello"\n'
    )
    (root / "pkg" / "blob.bin").write_bytes(b"hello\x00world")
    (root / "big.txt").write_text("hello\n" * 100_000)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("hello from git\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("hello secret\n")
    (root / "escape").symlink_to(outside)
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "inner_link.py").symlink_to(root / "pkg" / "app.py")
    return root


def settings(root):
    return {"source_roots": [str(root)]}


def test_read_source_numbers_lines_and_masks_secrets(call, tree):
    answer = call("read_source", {"path": "pkg/app.py"}, settings(tree))

    assert answer.content == (
        "pkg/app.py lines 1-3 of 3:\n"
        '    1  API = "sk-***"\n'
        "    2  def main():\n"
        '    3      return "hello"'
    )


def test_read_source_window(call, tree):
    answer = call(
        "read_source", {"path": "pkg/app.py", "start_line": 2, "lines": 1}, settings(tree)
    )

    assert answer.content == "pkg/app.py lines 2-2 of 3:\n    2  def main():"


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        ("../outside/secret.txt", "'..' is not allowed"),
        ("pkg/../../outside/secret.txt", "'..' is not allowed"),
        ("escape/secret.txt", "symbolic links are not followed"),
        ("link.txt", "symbolic links are not followed"),
        ("inner_link.py", "symbolic links are not followed"),
        ("pkg/blob.bin", "binary files are not read"),
        ("big.txt", "larger than 512 KiB"),
        ("pkg", "a folder"),
        ("missing.py", "not found under any source root"),
    ],
)
def test_read_source_refuses_paths_leaving_the_root_and_unreadable_files(call, tree, path, reason):
    answer = call("read_source", {"path": path}, settings(tree))

    assert not answer.is_error
    assert reason in answer.content
    assert "hello secret" not in answer.content


def test_read_source_refuses_absolute_paths_outside_a_root(call, tree):
    outside = tree.parent / "outside" / "secret.txt"
    refused = call("read_source", {"path": str(outside)}, settings(tree))
    assert refused.content == "path: not found under any source root."
    etc = call("read_source", {"path": "/etc/passwd"}, settings(tree))
    assert etc.content == "path: not found under any source root."
    inside = call("read_source", {"path": str(tree / "pkg" / "app.py")}, settings(tree))
    assert inside.content.startswith("pkg/app.py lines 1-3 of 3:")


def test_code_tools_without_roots_say_so(call):
    for tool, arguments in [("read_source", {"path": "a.py"}), ("search_code", {"pattern": "a"})]:
        answer = call(tool, arguments, {})
        assert answer.content == "No source roots are configured ([builtin] source_roots)."


def test_search_code_finds_plain_substrings_and_skips_what_it_must(call, tree):
    answer = call("search_code", {"pattern": "HELLO"}, settings(tree))

    # Not the binary file, not the file too large, not .git, not through any symlink.
    assert answer.content == 'Matches (1):\npkg/app.py:3: return "hello"'


def test_search_code_treats_the_pattern_literally(call, tree):
    assert call("search_code", {"pattern": "(a+)+$"}, settings(tree)).content == "No matches."
    found = call("search_code", {"pattern": "main()"}, settings(tree))
    assert found.content == "Matches (1):\npkg/app.py:2: def main():"


def test_search_code_masks_secrets_in_matching_lines(call, tree):
    answer = call("search_code", {"pattern": "API"}, settings(tree))

    assert answer.content == 'Matches (1):\npkg/app.py:1: API = "sk-***"'


@pytest.mark.parametrize("path", ["../outside", "escape", "/etc", str(os.sep)])
def test_search_code_refuses_a_path_leaving_the_root(call, tree, path):
    answer = call("search_code", {"pattern": "hello", "path": path}, settings(tree))

    assert "hello secret" not in answer.content
    assert answer.content.startswith("path: ")


def test_search_code_within_a_folder(call, tree):
    answer = call("search_code", {"pattern": "main", "path": "pkg"}, settings(tree))

    assert answer.content == "Matches (1):\npkg/app.py:2: def main():"

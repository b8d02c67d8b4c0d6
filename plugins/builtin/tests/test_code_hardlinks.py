"""read_source and search_code refuse a file with more than one hard link: it can be outside."""

from __future__ import annotations

import os

REFUSED = "path: files with more than one hard link are not read."


def test_a_hard_link_to_a_file_outside_the_root_is_neither_read_nor_searched(call, tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "app.py").write_text("print('hello')\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("hello from outside\n")
    os.link(outside, root / "notes.txt")
    settings = {"source_roots": [str(root)]}

    read = call("read_source", {"path": "notes.txt"}, settings)
    assert read.content == REFUSED
    assert call("read_source", {"path": "app.py"}, settings).content.startswith("app.py lines")

    found = call("search_code", {"pattern": "hello"}, settings)
    assert found.content == "Matches (1):\napp.py:1: print('hello')"
    pointed = call("search_code", {"pattern": "hello", "path": "notes.txt"}, settings)
    assert pointed.content == "No matches."
    assert "outside" not in read.content + found.content + pointed.content


def test_a_second_link_inside_the_root_is_refused_too(call, tmp_path):
    # Both names are inside, but from the names alone nothing says so: the count decides.
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    os.link(root / "a.py", root / "b.py")

    read = call("read_source", {"path": "a.py"}, {"source_roots": [str(root)]})
    assert read.content == REFUSED

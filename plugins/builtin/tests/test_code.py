"""read_source and search_code: files under the configured roots only."""

from __future__ import annotations

import os
import threading

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


@pytest.fixture
def secrets_tree(tmp_path):
    root = tmp_path / "src"
    (root / "conf").mkdir(parents=True)
    (root / ".env").write_text("DJANGO_SECRET_KEY=9f8e7d6c5b4a\nDB_PASSWORD=hunter2\n")
    (root / ".env.production").write_text("DB_PASSWORD=hunter2\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text('[remote "origin"]\n  url = hunter2\n')
    (root / "conf" / ".npmrc").write_text("hunter2\n")
    for name in [
        "server.pem", "server.key", "store.p12", "store.pfx", "id_rsa", "id_ed25519",
        "id_rsa.pub", "db_secrets.yaml", "aws_credentials", "vault.kdbx", "CLIENT_SECRET.json",
    ]:  # fmt: skip
        (root / "conf" / name).write_text("hunter2\n")
    (root / "conf" / "settings.py").write_text(
        "DEBUG = True\n"
        'DB_PASSWORD = "hunter2"\n'
        "export API_TOKEN=hunter2\n"
        '    "client_secret": "hunter2",\n'
        "auth: hunter2\n"
        "title: hunter2 is not a credential name\n"
    )
    (root / "conf" / "id_map.py").write_text("IDS = 1\n")
    (root / "secrets").mkdir()
    (root / "secrets" / "db.yaml").write_text("hunter2 = 1\n")
    return root


@pytest.mark.parametrize(
    ("path", "reason"),
    [
        (".env", "hidden files and folders are not read"),
        (".env.production", "hidden files and folders are not read"),
        (".git/config", "hidden files and folders are not read"),
        ("conf/.npmrc", "hidden files and folders are not read"),
        ("conf/server.pem", "files named like keys or credentials are not read"),
        ("conf/server.key", "files named like keys or credentials are not read"),
        ("conf/store.p12", "files named like keys or credentials are not read"),
        ("conf/store.pfx", "files named like keys or credentials are not read"),
        ("conf/id_rsa", "files named like keys or credentials are not read"),
        ("conf/id_ed25519", "files named like keys or credentials are not read"),
        ("conf/id_rsa.pub", "files named like keys or credentials are not read"),
        ("conf/db_secrets.yaml", "files named like keys or credentials are not read"),
        ("conf/aws_credentials", "files named like keys or credentials are not read"),
        ("conf/vault.kdbx", "files named like keys or credentials are not read"),
        ("conf/CLIENT_SECRET.json", "files named like keys or credentials are not read"),
        ("secrets/db.yaml", "files named like keys or credentials are not read"),
    ],
)
def test_read_source_refuses_hidden_and_key_like_files(call, secrets_tree, path, reason):
    relative = call("read_source", {"path": path}, settings(secrets_tree))
    absolute = call("read_source", {"path": str(secrets_tree / path)}, settings(secrets_tree))

    for answer in (relative, absolute):
        assert answer.content == f"path: {reason}."
        assert "hunter2" not in answer.content


def test_search_code_skips_hidden_and_key_like_files(call, secrets_tree):
    answer = call("search_code", {"pattern": "="}, settings(secrets_tree))

    assert answer.content == (
        "Matches (4):\n"
        "conf/id_map.py:1: IDS = 1\n"
        "conf/settings.py:1: DEBUG = True\n"
        "conf/settings.py:2: DB_PASSWORD = ***\n"
        "conf/settings.py:3: export API_TOKEN=***"
    )
    hidden = call("search_code", {"pattern": "x", "path": ".git"}, settings(secrets_tree))
    assert hidden.content == "path: hidden files and folders are not read."


def test_credential_assignments_are_masked_in_read_source(call, secrets_tree):
    answer = call("read_source", {"path": "conf/settings.py"}, settings(secrets_tree))

    assert "hunter2 is not a credential name" in answer.content
    assert answer.content.count("hunter2") == 1
    assert answer.content.splitlines()[1:] == [
        "    1  DEBUG = True",
        "    2  DB_PASSWORD = ***",
        "    3  export API_TOKEN=***",
        '    4      "client_secret": ***',
        "    5  auth: ***",
        "    6  title: hunter2 is not a credential name",
    ]


def test_search_code_does_not_confirm_a_masked_value(call, secrets_tree):
    answer = call("search_code", {"pattern": "hunter2"}, settings(secrets_tree))

    assert answer.content == (
        "Matches (1):\nconf/settings.py:6: title: hunter2 is not a credential name"
    )


def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_followed(tmp_path):
    from nrllm_builtin._code import _locate, _read_text, _Refused

    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE SECRET\n")
    path, _ = _locate([root.resolve()], "pkg/f.txt")
    assert _read_text(path) == "inside\n"
    (root / "pkg" / "f.txt").unlink()
    (root / "pkg").rmdir()
    (root / "pkg").symlink_to(outside)

    with pytest.raises(_Refused, match="the file changed while it was opened"):
        _read_text(path)


def test_the_swap_is_caught_without_proc_too(tmp_path, monkeypatch):
    from nrllm_builtin import _code

    root = tmp_path / "src"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "f.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("OUTSIDE SECRET\n")
    path, _ = _code._locate([root.resolve()], "pkg/f.txt")
    monkeypatch.setattr(_code, "_PROC_FD", str(tmp_path / "no-proc"))
    assert _code._read_text(path) == "inside\n"
    (root / "pkg" / "f.txt").unlink()
    (root / "pkg").rmdir()
    (root / "pkg").symlink_to(outside)

    with pytest.raises(_code._Refused, match="the file changed while it was opened"):
        _code._read_text(path)


def _in_thread(function):
    """``function()``'s result, or None if it is still running after five seconds."""
    result = []
    worker = threading.Thread(target=lambda: result.append(function()), daemon=True)
    worker.start()
    worker.join(5)
    return worker, result


def test_a_fifo_under_a_root_is_refused_without_blocking(call, tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.py").write_text("x = 1\n")
    fifo = root / "b.pipe"
    os.mkfifo(fifo)
    try:
        searcher, searched = _in_thread(
            lambda: call("search_code", {"pattern": "x"}, settings(root))
        )
        reader, read = _in_thread(lambda: call("read_source", {"path": "b.pipe"}, settings(root)))
        assert not searcher.is_alive()
        assert not reader.is_alive()
        assert searched[0].content == "Matches (1):\na.py:1: x = 1"
        assert read[0].content == "path: not a regular file."
    finally:
        # A reader blocked on the FIFO (the bug) is released by a writer opening and closing.
        for worker in (searcher, reader):
            if worker.is_alive():
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                worker.join(5)

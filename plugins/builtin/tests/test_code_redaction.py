"""read_source and search_code mask a private key block whole, whatever window is read."""

from __future__ import annotations

import pytest

BODY = ["MIIEpAIBAAKCAQEA3Tz2mr7SZiAMfQyuvBjM9Oi2aEXGQnPLc7ztk9mXrOJJQOXl"] * 3


@pytest.fixture
def root(tmp_path):
    root = tmp_path / "src"
    root.mkdir()
    block = ["-----BEGIN RSA PRIVATE KEY-----", *BODY, "-----END RSA PRIVATE KEY-----"]
    (root / "deploy.txt").write_text("\n".join(["# deploy", *block, "done", ""]))
    return root


def test_read_source_masks_every_line_of_a_key_block(call, root):
    answer = call(
        "read_source", {"path": "deploy.txt", "start_line": 3}, {"source_roots": [str(root)]}
    )

    assert answer.content == (
        "deploy.txt lines 3-7 of 7:\n    3  ***\n    4  ***\n    5  ***\n    6  ***\n    7  done"
    )


def test_search_code_never_shows_a_line_of_a_key_block(call, root):
    answer = call("search_code", {"pattern": "MIIE"}, {"source_roots": [str(root)]})

    assert answer.content == "No matches."

"""``nrllm serve``: loopback by default, a refused remote address, and the printed token line."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import httpx
import pytest
from click.testing import CliRunner

from nrllm_core.cli import cli
from nrllm_core.inspector._guard import cookie_name


@pytest.mark.parametrize("address", ["0.0.0.0", "192.0.2.10", "::", "localhost", "example.org"])
def test_an_address_other_than_loopback_needs_allow_remote(address):
    result = CliRunner().invoke(cli, ["serve", "--host", address, "--port", "0"])
    assert result.exit_code == 2
    assert f"--host {address} is reachable from other machines" in result.output
    assert "--allow-remote" in result.output


def test_serve_prints_the_tokened_address_and_guards_every_request(tmp_path, host_factory):
    config = tmp_path / "nrllm.toml"
    # Writes the configuration next to its scripts; the server loads no in-test plugin.
    host_factory(tmp_path, streaming=False)
    process = subprocess.Popen(
        [sys.executable, "-m", "nrllm_core", "--config", str(config), "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NRLLM_LOAD_PLUGINS": "", "NRLLM_HOME": str(tmp_path / "home")},
        cwd=tmp_path,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()
        line = process.stdout.readline().strip()
        match = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([A-Za-z0-9_-]{43})", line)
        assert match, line
        base = f"http://127.0.0.1:{match[1]}"
        assert httpx.get(f"{base}/", timeout=10).status_code == 401
        swap = httpx.get(line, timeout=10)
        assert swap.status_code == 303
        assert swap.headers["location"] == "/"
        assert "HttpOnly" in swap.headers["set-cookie"]
        cookies = {cookie_name(match[2]): match[2]}
        page = httpx.get(f"{base}/", cookies=cookies, timeout=10)
        assert page.status_code == 200
        assert "nrllm inspector" in page.text
    finally:
        process.terminate()
        _, errors = process.communicate(timeout=15)
    assert match[2] not in errors


def test_importing_the_cli_and_the_inspector_loads_no_web_server():
    code = (
        "import json, sys, nrllm_core.cli, nrllm_core.inspector; "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn', 'playwright'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"

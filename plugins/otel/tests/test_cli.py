"""``nrllm run --otel-console`` and ``nrllm serve --otel-console``: the command, as a host,
prints the spans and metrics on stderr."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from nrllm_core.inspector._guard import cookie_name

SECRET_ESCAPE = "\x1b]0;owned\x07"


@pytest.fixture
def folder(tmp_path: Path, write_config) -> Path:
    write_config(tmp_path, [{"content": f"hello {SECRET_ESCAPE}"}], level="full")
    return tmp_path


def nrllm(folder: Path, *args: str, prelude: str = "", load: str | None = None):
    environ = {k: v for k, v in os.environ.items() if k != "NRLLM_LOAD_PLUGINS"}
    environ["NRLLM_HOME"] = str(folder / "home")
    if load is not None:
        environ["NRLLM_LOAD_PLUGINS"] = load
    code = f"{prelude}\nimport sys\nfrom nrllm_core.cli import main\nsys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, "--config", str(folder / "nrllm.toml"), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=environ,
    )


def test_otel_console_prints_the_spans_and_metrics_on_stderr_through_the_sanitiser(folder):
    done = nrllm(folder, "run", "Hi", "--json", "--otel-console")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert '"name": "invoke_agent nrllm"' in done.stderr
    assert '"name": "chat tiny-1"' in done.stderr
    assert "gen_ai.client.operation.duration" in done.stderr
    # At "full" the model's text is in the spans, but never a raw terminal escape.
    assert "hello" in done.stderr
    assert "\x1b" not in done.stderr


def test_without_the_flag_nothing_is_printed(folder):
    done = nrllm(folder, "run", "Hi", "--json")
    assert done.returncode == 0, done.stderr
    assert "invoke_agent" not in done.stderr


def test_without_the_sdk_the_flag_is_refused_with_the_extra_to_install(folder):
    done = nrllm(
        folder,
        "run",
        "Hi",
        "--otel-console",
        prelude="import sys; sys.modules['opentelemetry.sdk'] = None",
    )
    assert done.returncode == 2
    assert "pip install 'nrllm-core[otel]'" in done.stderr


def test_without_the_plugin_the_flag_is_refused(folder):
    done = nrllm(folder, "run", "Hi", "--otel-console", load="builtin")
    assert done.returncode == 2
    assert "needs the nrllm-otel plugin" in done.stderr


def test_serve_prints_a_runs_spans_and_on_sigterm_its_metrics(folder):
    environ = {k: v for k, v in os.environ.items() if k != "NRLLM_LOAD_PLUGINS"}
    environ["NRLLM_HOME"] = str(folder / "home")
    config = str(folder / "nrllm.toml")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nrllm_core",
            "--config",
            config,
            "serve",
            "--port",
            "0",
            "--otel-console",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()
        address = server.stdout.readline().strip()
        match = re.fullmatch(r"(http://127\.0\.0\.1:\d+)/\?token=(\S+)", address)
        assert match, address
        base, token = match[1], match[2]
        answered = httpx.post(
            f"{base}/api/run",
            json={"prompt": "Hi"},
            cookies={cookie_name(token): token},
            headers={"Origin": base},
            timeout=60,
        )
        assert answered.status_code == 200
        last = json.loads(answered.text.splitlines()[-1])
        assert (last["event"], last["status"]) == ("done", "completed")
    finally:
        server.send_signal(signal.SIGTERM)
        _, errors = server.communicate(timeout=30)
    # uvicorn stopped gracefully, then the signal ended the process, as without the flag.
    assert server.returncode == -signal.SIGTERM
    assert '"name": "invoke_agent nrllm"' in errors
    assert '"name": "chat tiny-1"' in errors
    # Exported by the shutdown the signal handler ran: a signal's end runs no exit hooks.
    assert "gen_ai.client.operation.duration" in errors
    assert "\x1b" not in errors

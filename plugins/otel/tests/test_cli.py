"""``nrllm run --otel-console``: the command, as a host, prints the spans and metrics on stderr."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
    assert '"name": "invoke_agent model"' in done.stderr
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


def test_serve_has_the_flag_too(folder):
    done = nrllm(folder, "serve", "--help")
    assert "--otel-console" in done.stdout

"""get_system_status, list_plugins, fetch_logs and get_env."""

from __future__ import annotations

import pytest


def test_get_system_status(call):
    answer = call("get_system_status", {}, {})

    assert answer.content.splitlines()[0].startswith("python: 3.")
    assert answer.table()["columns"] == ["key", "value"]


def test_list_plugins_reads_entry_point_metadata(call):
    answer = call("list_plugins", {}, {})

    assert "- builtin: nrllm_builtin (nrllm-builtin 0.1.0)" in answer.content
    assert ["builtin", "nrllm_builtin", "nrllm-builtin", "0.1.0"] in answer.table()["rows"]


@pytest.fixture
def log_file(tmp_path):
    path = tmp_path / "app.log"
    lines = [f"line {i}" for i in range(1, 600)]
    lines.append("login by someone@example.com with Bearer abcdefghijklmnopqrstuvwxyz123")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_fetch_logs_tails_through_the_redactor(call, log_file):
    answer = call("fetch_logs", {"lines": 3}, {"log_file": str(log_file)})

    assert answer.content == ("Last 3 log lines:\nline 598\nline 599\nlogin by *** with Bearer ***")


def test_fetch_logs_defaults_to_50_lines_and_caps_at_500(call, log_file):
    default = call("fetch_logs", {}, {"log_file": str(log_file)})
    assert len(default.content.splitlines()) == 51
    refused = call("fetch_logs", {"lines": 501}, {"log_file": str(log_file)})
    assert refused.is_error
    assert "lines" in refused.content


def test_fetch_logs_without_a_readable_file(call, tmp_path):
    assert call("fetch_logs", {}, {}).content == "No log file is configured ([builtin] log_file)."
    missing = call("fetch_logs", {}, {"log_file": str(tmp_path / "none.log")})
    assert missing.content == "The configured log file cannot be read."


def test_get_env_masks_values_unless_allow_listed(call, monkeypatch):
    monkeypatch.setenv("NRLLM_T_PLAIN", "visible-value")
    monkeypatch.setenv("NRLLM_T_SECRET", "hunter2")
    monkeypatch.setenv("NRLLM_T_KEYISH", "token sk-abcdefghijklmnopqrstuvwx")
    answer = call(
        "get_env",
        {"names": ["NRLLM_T_PLAIN", "NRLLM_T_SECRET", "NRLLM_T_KEYISH", "NRLLM_T_UNSET"]},
        {"env_allow": ["NRLLM_T_PLAIN", "NRLLM_T_KEYISH"]},
    )

    assert answer.content == (
        "NRLLM_T_PLAIN=visible-value\n"
        "NRLLM_T_SECRET=***\n"
        "NRLLM_T_KEYISH=token sk-***\n"
        "NRLLM_T_UNSET: (not set)"
    )


def test_get_env_lists_every_name_masked_by_default(call, monkeypatch):
    monkeypatch.setenv("NRLLM_T_SECRET", "hunter2")
    answer = call("get_env", {}, {})

    assert "NRLLM_T_SECRET=***" in answer.content
    assert "hunter2" not in answer.content

"""The ``nrllm`` command: a host application built on the public API."""

from __future__ import annotations

from nrllm_core.cli import _audit, _governance, _run, _serve  # noqa: F401 - registers commands
from nrllm_core.cli._common import BadInput, host_config
from nrllm_core.cli._main import cli, main
from nrllm_core.cli._terminal import echo, echo_json, printable

__all__ = ["BadInput", "cli", "echo", "echo_json", "host_config", "main", "printable"]

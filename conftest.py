"""Test-wide settings: hypothesis profiles (derandomized in CI) and a private data folder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from hypothesis import settings

settings.register_profile("default", deadline=None, max_examples=100)
settings.register_profile("ci", deadline=None, max_examples=100, derandomize=True)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture(autouse=True)
def _private_nrllm_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No test reads or writes the real data folder, or a configuration it did not ask for."""
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path_factory.mktemp("nrllm-home")))
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    monkeypatch.delenv("NRLLM_STATE_KEY", raising=False)


@pytest.fixture(autouse=True)
def _library_logger() -> Iterator[None]:
    """A test that routes nrllm's logger (as the CLI does) cannot hide later tests' events."""
    yield
    from nrllm_core.log import use_logger

    use_logger(None)

"""``nrllm_core.sealing``: a plugin's small secrets, sealed with the state key and bound to a
label, written whole with mode 0600."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nrllm_core.sealing import SealError, read_sealed, write_sealed


def test_a_sealed_file_opens_with_its_label_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secrets" / "one.sealed"
    write_sealed(path, "label-a", b"the secret", data_dir=tmp_path / "data", environ={})

    assert read_sealed(path, "label-a", data_dir=tmp_path / "data", environ={}) == b"the secret"
    assert b"the secret" not in path.read_bytes()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    # Nothing is left aside by the atomic write.
    assert os.listdir(path.parent) == ["one.sealed"]


def test_a_file_sealed_to_another_label_or_altered_does_not_open(tmp_path: Path) -> None:
    path = tmp_path / "one.sealed"
    write_sealed(path, "label-a", b"the secret", data_dir=tmp_path, environ={})

    with pytest.raises(SealError):
        read_sealed(path, "label-b", data_dir=tmp_path, environ={})
    altered = bytearray(path.read_bytes())
    altered[-1] ^= 1
    path.write_bytes(bytes(altered))
    with pytest.raises(SealError):
        read_sealed(path, "label-a", data_dir=tmp_path, environ={})


def test_a_missing_file_reads_as_none_and_a_rewrite_replaces_it(tmp_path: Path) -> None:
    path = tmp_path / "one.sealed"
    assert read_sealed(path, "label", data_dir=tmp_path, environ={}) is None

    write_sealed(path, "label", b"first", data_dir=tmp_path, environ={})
    write_sealed(path, "label", b"second", data_dir=tmp_path, environ={})
    assert read_sealed(path, "label", data_dir=tmp_path, environ={}) == b"second"


def test_the_key_from_the_environment_is_the_one_used(tmp_path: Path) -> None:
    key = "A" * 43
    path = tmp_path / "one.sealed"
    write_sealed(path, "label", b"x", data_dir=tmp_path, environ={"NRLLM_STATE_KEY": key})

    assert not (tmp_path / "state.key").exists()
    with pytest.raises(SealError):
        read_sealed(path, "label", data_dir=tmp_path, environ={})

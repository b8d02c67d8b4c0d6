"""nrllm's data folder is 0700, its SQLite database, WAL and SHM files 0600, whatever the umask."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nrllm_core import AuditRecord, StepKind
from nrllm_core._sealing import load_state_key
from nrllm_core.store import Store

UMASKS = [0o022, 0o000, 0o077, 0o277]


@pytest.fixture(params=UMASKS, ids=[f"umask-{m:03o}" for m in UMASKS])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write(store: Store, run_id: str) -> None:
    store.start_run(run_id)
    store.record_step(
        AuditRecord(
            run_id=run_id,
            sequence=1,
            kind=StepKind.TOOL,
            round=1,
            duration_ms=1.0,
            payload={"kind": "tool"},
        )
    )


def database_files(home: Path) -> dict[str, int]:
    return {p.name: mode(p) for p in sorted(home.iterdir()) if p.name.startswith("nrllm.db")}


def test_the_data_folder_and_database_files_are_private(umask: int, tmp_path: Path) -> None:
    home = tmp_path / "data" / "nrllm"

    store = Store.open(None, data_dir=home)
    try:
        write(store, "r1")
        assert mode(home) == 0o700
        # While the store is open SQLite keeps its write-ahead log and shared memory files.
        assert database_files(home) == {
            "nrllm.db": 0o600,
            "nrllm.db-shm": 0o600,
            "nrllm.db-wal": 0o600,
        }
    finally:
        store.close()

    # Closed, SQLite removes the -wal and -shm files; opened again, it makes them anew.
    again = Store.open(None, data_dir=home)
    try:
        write(again, "r2")
        assert database_files(home) == {
            "nrllm.db": 0o600,
            "nrllm.db-shm": 0o600,
            "nrllm.db-wal": 0o600,
        }
    finally:
        again.close()


def test_files_an_older_nrllm_left_readable_are_made_private(tmp_path: Path) -> None:
    store = Store.open(None, data_dir=tmp_path)
    write(store, "r1")
    for name in ("nrllm.db", "nrllm.db-wal", "nrllm.db-shm"):
        os.chmod(tmp_path / name, 0o644)

    second = Store.open(None, data_dir=tmp_path)
    try:
        assert database_files(tmp_path) == {
            "nrllm.db": 0o600,
            "nrllm.db-shm": 0o600,
            "nrllm.db-wal": 0o600,
        }
    finally:
        second.close()
        store.close()


def test_the_data_folder_made_for_the_state_key_is_private(umask: int, tmp_path: Path) -> None:
    home = tmp_path / "nrllm"
    load_state_key(home, {})
    assert mode(home) == 0o700


def test_an_existing_data_folder_keeps_the_mode_its_owner_gave_it(tmp_path: Path) -> None:
    home = tmp_path / "shared"
    home.mkdir()
    os.chmod(home, 0o750)
    Store.open(None, data_dir=home).close()
    assert mode(home) == 0o750
    assert mode(home / "nrllm.db") == 0o600


@pytest.mark.parametrize("shared", [0o777, 0o770, 0o1777])
def test_a_data_folder_others_may_write_is_refused(tmp_path: Path, shared: int) -> None:
    from nrllm_core import ConfigError

    home = tmp_path / "shared"
    home.mkdir()
    os.chmod(home, shared)
    # Anyone who may write it could link the key or the database to a file of theirs.
    (home / "state.key").symlink_to(tmp_path / "theirs.key")
    with pytest.raises(ConfigError, match="must be the user's own and writable by no one else"):
        Store.open(None, data_dir=home)
    with pytest.raises(ConfigError, match="writable by no one else"):
        load_state_key(home, environ={})
    assert not (home / "nrllm.db").exists()


def _switch_out_of_wal(database: Path) -> str:
    """Another process asks to take the database out of WAL mode, which needs every other
    connection's lock gone: ``locked`` while a connection holds its lock."""
    code = (
        "import sqlite3, sys\n"
        "try:\n"
        "    print(sqlite3.connect(sys.argv[1], timeout=0)"
        ".execute('PRAGMA journal_mode=DELETE').fetchone()[0])\n"
        "except sqlite3.OperationalError:\n"
        "    print('locked')"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(database)], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_opening_the_database_again_keeps_the_open_connections_locks(tmp_path: Path) -> None:
    # A host's audit store and the MCP plugin's pin store share nrllm.db in one process:
    # making the second one's files private must not close a descriptor of the open database,
    # which would drop the first connection's POSIX locks and let another process take the
    # database out of WAL mode under it (it then reads as "malformed").
    store = Store.open(None, data_dir=tmp_path)
    try:
        store.list_runs()
        assert _switch_out_of_wal(tmp_path / "nrllm.db") == "locked"
        Store.open(None, data_dir=tmp_path).close()
        assert _switch_out_of_wal(tmp_path / "nrllm.db") == "locked"
    finally:
        store.close()

"""Sealed run state: the key from the environment or a 0600 key file, and AES-GCM bound to the run.

A sealed state that was tampered with, or moved to another run's row, is refused by ``Host``.
"""

from __future__ import annotations

import base64
import json
import secrets
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core import (
    ApprovalRefused,
    DataClass,
    Effect,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    tool,
)
from nrllm_core._host import Host
from nrllm_core._sealing import SealError, load_state_key, open_sealed, seal

KEY = bytes(range(32))
RUN_IDS = st.text(min_size=1, max_size=40)

written: list[dict[str, Any]] = []


@tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE, data_class=DataClass.PUBLIC_CONTENT)
def write_note(text: str, context: ToolContext) -> ToolResult:
    """Write a note."""
    written.append({"run_id": context.run_id, "text": text})
    return ToolResult.text("written")


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(write_note)


# -- the key -------------------------------------------------------------------------------------


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_the_environment_key_is_accepted_with_or_without_padding(tmp_path, padded):
    key = secrets.token_bytes(32)
    text = base64.urlsafe_b64encode(key).decode()
    assert text.endswith("=")
    if not padded:
        text = text.rstrip("=")

    assert load_state_key(tmp_path, {"NRLLM_STATE_KEY": text}) == key
    assert load_state_key(tmp_path, {"NRLLM_STATE_KEY": f"  {text}\n"}) == key
    assert not (tmp_path / "state.key").exists()


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (base64.urlsafe_b64encode(bytes(16)).decode(), "must decode to 32 bytes, not 16"),
        (base64.urlsafe_b64encode(bytes(33)).decode(), "must decode to 32 bytes, not 33"),
        ("abcde", "is not URL-safe base64"),
        ("!" + base64.urlsafe_b64encode(bytes(32)).decode().rstrip("="), "not URL-safe base64"),
        ("A" * 42 + "é", "is not URL-safe base64"),
    ],
    ids=["short", "long", "bad-length", "stray-character", "non-ascii"],
)
def test_a_bad_environment_key_is_a_clear_error(tmp_path, value, message):
    with pytest.raises(SealError, match=message) as caught:
        load_state_key(tmp_path, {"NRLLM_STATE_KEY": value})
    assert "NRLLM_STATE_KEY" in str(caught.value)
    assert value not in str(caught.value)


def test_the_key_file_is_created_0600_on_first_use_and_reused(tmp_path):
    folder = tmp_path / "data"

    first = load_state_key(folder, {})

    path = folder / "state.key"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(first) == 32
    assert base64.urlsafe_b64decode(path.read_text(encoding="ascii")) == first
    assert load_state_key(folder, {}) == first
    assert load_state_key(folder, {"NRLLM_STATE_KEY": ""}) == first


def test_a_damaged_key_file_is_an_error_naming_the_file_not_a_new_key(tmp_path):
    (tmp_path / "state.key").write_text("c2hvcnQ=", encoding="ascii")
    with pytest.raises(SealError, match=r"state\.key must decode to 32 bytes, not 5"):
        load_state_key(tmp_path, {})
    assert (tmp_path / "state.key").read_text(encoding="ascii") == "c2hvcnQ="


def test_processes_creating_the_key_at_once_all_get_the_one_complete_key(tmp_path):
    barrier = threading.Barrier(16)
    keys: list[bytes] = []
    errors: list[BaseException] = []

    def load() -> None:
        barrier.wait()
        try:
            keys.append(load_state_key(tmp_path, {}))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert len(keys) == 16
    assert len(set(keys)) == 1
    assert [p.name for p in tmp_path.iterdir()] == ["state.key"]
    assert stat.S_IMODE((tmp_path / "state.key").stat().st_mode) == 0o600


# -- sealing -------------------------------------------------------------------------------------


@given(plaintext=st.binary(max_size=2048), run_id=RUN_IDS)
def test_a_sealed_state_opens_only_for_its_run(plaintext, run_id):
    sealed = seal(KEY, run_id, plaintext)

    assert open_sealed(KEY, run_id, sealed) == plaintext
    assert len(sealed) == 12 + len(plaintext) + 16
    with pytest.raises(SealError, match="failed authentication"):
        open_sealed(KEY, run_id + "x", sealed)


@given(plaintext=st.binary(min_size=1, max_size=512), data=st.data())
def test_any_flipped_byte_is_refused(plaintext, data):
    sealed = bytearray(seal(KEY, "run-1", plaintext))
    index = data.draw(st.integers(min_value=0, max_value=len(sealed) - 1))
    sealed[index] ^= data.draw(st.integers(min_value=1, max_value=255))

    with pytest.raises(SealError):
        open_sealed(KEY, "run-1", bytes(sealed))


def test_a_wrong_key_or_a_truncated_state_is_refused():
    sealed = seal(KEY, "run-1", b"state")
    with pytest.raises(SealError, match="failed authentication"):
        open_sealed(bytes(32), "run-1", sealed)
    with pytest.raises(SealError, match="truncated"):
        open_sealed(KEY, "run-1", sealed[:12])


def test_two_seals_of_one_state_differ():
    assert seal(KEY, "run-1", b"state") != seal(KEY, "run-1", b"state")


# -- through the host ----------------------------------------------------------------------------


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    written.clear()
    script = tmp_path / "script.json"
    turns = [
        {"tool_calls": [{"name": "write_note", "arguments": {"text": "hello"}}]},
        {"content": "done"},
    ]
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    built = Host.from_config(
        data={
            "providers": {"model": {"kind": "scripted", "script": str(script)}},
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
        },
        plugins=[Tools()],
        load_entry_points=False,
        data_dir=tmp_path / "home",
        environ={},
    )
    yield built
    built.store.close()


def rows(host_dir: Path) -> sqlite3.Connection:
    return sqlite3.connect(host_dir / "home" / "nrllm.db")


def test_the_host_creates_the_key_file_on_its_first_suspension(host, tmp_path):
    key_file = tmp_path / "home" / "state.key"
    assert not key_file.exists()

    outcome = host.run("go")

    assert outcome.status == "awaiting_approval"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    sealed = host.store.suspension(outcome.run_id).sealed
    key = load_state_key(tmp_path / "home", {})
    assert b'"write_note"' in open_sealed(key, f"{outcome.run_id}:{outcome.turn_digest}", sealed)
    assert b"write_note" not in sealed


def test_a_tampered_state_is_refused_and_nothing_executes(host, tmp_path):
    outcome = host.run("go")
    with rows(tmp_path) as db:
        (sealed,) = db.execute(
            "SELECT sealed FROM suspensions WHERE run_id = ?", (outcome.run_id,)
        ).fetchone()
        flipped = bytearray(sealed)
        flipped[len(flipped) // 2] ^= 0x01
        db.execute(
            "UPDATE suspensions SET sealed = ? WHERE run_id = ?", (bytes(flipped), outcome.run_id)
        )
    db.close()

    with pytest.raises(ApprovalRefused, match="cannot be opened"):
        host.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)

    assert written == []
    assert host.runs()[0].status == "awaiting_approval"


def test_a_state_moved_to_another_run_is_refused(host, tmp_path):
    first = host.run("go")
    second = host.run("go")
    # Identical turns of two runs: still two digests, each naming its run and suspension.
    assert first.turn_digest != second.turn_digest
    with rows(tmp_path) as db:
        (sealed, digest) = db.execute(
            "SELECT sealed, turn_digest FROM suspensions WHERE run_id = ?", (first.run_id,)
        ).fetchone()
        db.execute(
            "UPDATE suspensions SET sealed = ?, turn_digest = ? WHERE run_id = ?",
            (sealed, digest, second.run_id),
        )
    db.close()

    with pytest.raises(ApprovalRefused, match="cannot be opened"):
        host.approve(second.run_id, approver="bob", turn_digest=first.turn_digest)
    assert written == []

    # The state stays valid where it belongs.
    done = host.approve(first.run_id, approver="bob", turn_digest=first.turn_digest)
    assert done.status == "completed"
    assert written == [{"run_id": first.run_id, "text": "hello"}]


@pytest.mark.parametrize(
    "key",
    [base64.urlsafe_b64encode(bytes(32)).decode(), "not a key"],
    ids=["another-key", "invalid-key"],
)
def test_a_state_opened_with_another_or_an_invalid_key_is_refused(host, tmp_path, key):
    outcome = host.run("go")
    other = Host.from_config(
        data={
            "providers": {"model": {"kind": "scripted", "script": str(tmp_path / "script.json")}},
            "defaults": {"provider": "model"},
        },
        plugins=[Tools()],
        load_entry_points=False,
        data_dir=tmp_path / "home",
        environ={"NRLLM_STATE_KEY": key},
    )
    try:
        with pytest.raises(ApprovalRefused, match="cannot be opened"):
            other.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)
    finally:
        other.store.close()
    assert written == []
    assert host.runs()[0].status == "awaiting_approval"


def test_a_finished_run_keeps_no_sealed_state(host, tmp_path):
    outcome = host.run("go")
    host.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)

    with rows(tmp_path) as db:
        (sealed,) = db.execute(
            "SELECT sealed FROM suspensions WHERE run_id = ?", (outcome.run_id,)
        ).fetchone()
    db.close()
    assert sealed == b""

"""The tamper-evident audit: each run's steps chained by HMAC-SHA256, checked by ``verify``.

Every tampering a database writer can do to a run's steps is done here with raw SQL, on SQLite
and on PostgreSQL, and ``verify`` must name the run, the first broken step and the problem.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import inspect, text

from nrllm_core import AuditRecord, StepKind
from nrllm_core._sealing import decode_key
from nrllm_core.cli import cli
from nrllm_core.store import KeySource, RunStatus, Store
from nrllm_core.store._chain import (
    STEP_FIELDS,
    chain_key,
    find_break,
    head_mac,
    initial_mac,
    step_mac,
)

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")

AUDIT_KEY = base64.urlsafe_b64encode(bytes(range(32))).decode()
OTHER_KEY = base64.urlsafe_b64encode(bytes(range(1, 33))).decode()
STATE_KEY = base64.urlsafe_b64encode(bytes(range(2, 34))).decode()


def record(run_id: str, sequence: int, **payload: Any) -> AuditRecord:
    return AuditRecord(
        run_id=run_id,
        sequence=sequence,
        kind=StepKind.TOOL,
        round=1,
        duration_ms=2,
        payload={"kind": "tool", "n": sequence, **payload},
    )


def write_run(store: Store, run_id: str, steps: int = 5) -> None:
    store.start_run(run_id)
    for sequence in range(1, steps + 1):
        store.record_step(record(run_id, sequence))


def sql(store: Store, statement: str, **params: Any) -> None:
    with store._engine.begin() as connection:
        connection.execute(text(statement), params)


def stamp(store: Store, value: datetime) -> Any:
    """A timestamp as raw SQL writes it: SQLite keeps SQLAlchemy's naive UTC text."""
    if store._engine.dialect.name == "sqlite":
        return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return value


def broken(store: Store, run_id: str | None = None) -> list[tuple[str, int, str]]:
    return [(b.run_id, b.sequence, b.problem.value) for b in store.verify(run_id).broken]


@pytest.fixture
def store(backend: Any) -> Iterator[Store]:
    """A ``Store`` holding two runs of five steps."""
    opened = backend.open(environ={"NRLLM_AUDIT_KEY": AUDIT_KEY})
    write_run(opened, "r1")
    write_run(opened, "r2")
    yield opened
    opened.close()


def test_untouched_chains_hold(store: Store) -> None:
    check = store.verify()
    assert (check.runs_checked, check.broken, check.key_source) == (2, (), KeySource.AUDIT_KEY)
    assert store.verify("r1").to_dict() == {"runs_checked": 1, "broken": []}


def run_row(store: Store, run_id: str) -> tuple[int, str, str]:
    """The run row's count, last mac and head."""
    with store._engine.connect() as connection:
        ((count, last, head),) = connection.execute(
            text("SELECT steps, last_mac, chain_head FROM runs WHERE id = :r"), {"r": run_id}
        ).all()
    return count, last, head


def set_run_row(store: Store, run_id: str, count: int, last: str, head: str) -> None:
    sql(
        store,
        "UPDATE runs SET steps = :n, last_mac = :l, chain_head = :h WHERE id = :r",
        n=count,
        l=last,
        h=head,
        r=run_id,
    )


def step_macs(store: Store, run_id: str) -> list[str]:
    with store._engine.connect() as connection:
        return list(
            connection.execute(
                text("SELECT mac FROM run_steps WHERE run_id = :r ORDER BY sequence"),
                {"r": run_id},
            ).scalars()
        )


def test_the_run_reports_its_head_an_hmac_of_its_count_and_last_mac(store: Store) -> None:
    detail = store.get_run("r1")
    assert detail is not None
    last = step_macs(store, "r1")[-1]
    assert run_row(store, "r1") == (5, last, detail.run.chain_head)
    assert detail.run.chain_head == head_mac(KEY, "r1", 5, last)
    assert len(detail.run.chain_head) == 64
    store.record_step(record("r1", 6))
    again = store.get_run("r1")
    assert again is not None
    assert again.run.chain_head == head_mac(KEY, "r1", 6, step_macs(store, "r1")[-1])


def test_a_new_run_stores_the_head_of_no_steps(store: Store) -> None:
    store.start_run("empty")
    start = initial_mac(KEY, "empty")
    assert run_row(store, "empty") == (0, start, head_mac(KEY, "empty", 0, start))


@pytest.mark.parametrize(
    "refit",
    [
        # What fitted before heads were authenticated: the last step left, and the count.
        "chain_head = :last, steps = :count",
        "chain_head = :last, last_mac = :last, steps = :count",
        # The count and last mac the store chains on from, the head left as it was.
        "last_mac = :last, steps = :count",
    ],
)
def test_a_run_cut_short_and_refitted_by_hand_is_a_head_mismatch(store: Store, refit: str) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r1' AND sequence > 3")
    sql(store, f"UPDATE runs SET {refit} WHERE id = 'r1'", last=step_macs(store, "r1")[-1], count=3)
    assert broken(store) == [("r1", 4, "head mismatch")]


def test_a_run_cut_short_and_refitted_takes_no_more_steps(store: Store) -> None:
    """The store checks the head it reads before chaining on: its next step would otherwise
    give the cut run a head that holds."""
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r1' AND sequence > 3")
    last = step_macs(store, "r1")[-1]
    sql(store, "UPDATE runs SET chain_head = :l, last_mac = :l, steps = 3 WHERE id = 'r1'", l=last)
    with pytest.raises(ValueError, match='chain head of run "r1" does not hold'):
        store.record_step(record("r1", 4))
    assert broken(store) == [("r1", 4, "head mismatch")]


def test_a_head_from_another_run_or_count_is_a_head_mismatch(store: Store) -> None:
    write_run(store, "r3", steps=3)
    at_three = run_row(store, "r3")
    store.record_step(record("r3", 4))
    count, last, head = run_row(store, "r3")
    # r3's head after three steps, with its count and last mac of now.
    set_run_row(store, "r3", count, last, at_three[2])
    # r2's head, count and last mac, all three, on r1 (both hold five steps).
    set_run_row(store, "r1", *run_row(store, "r2"))
    assert broken(store) == [("r1", 6, "head mismatch"), ("r3", 5, "head mismatch")]
    # r3's count and last mac of after three steps, with its head of now.
    set_run_row(store, "r3", *at_three[:2], head)
    assert broken(store, "r3") == [("r3", 5, "head mismatch")]


def test_only_a_head_kept_elsewhere_catches_a_saved_one_put_back(store: Store) -> None:
    """What the chain cannot do alone: a writer who saved a run's count, last mac and head
    can cut the run back to that point and restore them. The head a host kept elsewhere
    (``RunInfo.chain_head``) no longer matches."""
    saved = run_row(store, "r1")
    store.record_step(record("r1", 6))
    detail = store.get_run("r1")
    assert detail is not None
    kept = detail.run.chain_head
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r1' AND sequence = 6")
    set_run_row(store, "r1", *saved)

    assert broken(store) == []
    cut = store.get_run("r1")
    assert cut is not None
    assert (cut.run.steps, cut.run.chain_head) == (5, saved[2])
    assert cut.run.chain_head != kept


def test_an_edited_payload_is_named(store: Store) -> None:
    sql(store, "UPDATE run_steps SET payload = :p WHERE run_id = 'r1' AND sequence = 3", p="{}")
    assert broken(store) == [("r1", 3, "edited")]


@pytest.mark.parametrize(
    ("column", "value"),
    [("kind", "'model'"), ("round", "7"), ("duration_ms", "2.5"), ("mac", "NULL")],
)
def test_every_column_of_a_step_is_covered(store: Store, column: str, value: str) -> None:
    sql(store, f"UPDATE run_steps SET {column} = {value} WHERE run_id = 'r2' AND sequence = 2")
    assert broken(store) == [("r2", 2, "edited")]


def test_an_edited_timestamp_is_named(store: Store) -> None:
    at = stamp(store, datetime(2001, 1, 1, tzinfo=UTC))
    sql(store, "UPDATE run_steps SET recorded_at = :at WHERE run_id = 'r1' AND sequence = 1", at=at)
    assert broken(store, "r1") == [("r1", 1, "edited")]


def test_a_deleted_middle_step_is_missing(store: Store) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r1' AND sequence = 3")
    assert broken(store) == [("r1", 3, "missing")]


def test_a_deleted_first_step_is_missing(store: Store) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r2' AND sequence = 1")
    assert broken(store) == [("r2", 1, "missing")]


def test_swapped_sequence_numbers_are_reordered(store: Store) -> None:
    sql(store, "UPDATE run_steps SET sequence = -1 WHERE run_id = 'r1' AND sequence = 2")
    sql(store, "UPDATE run_steps SET sequence = 2 WHERE run_id = 'r1' AND sequence = 4")
    sql(store, "UPDATE run_steps SET sequence = 4 WHERE run_id = 'r1' AND sequence = -1")
    assert broken(store) == [("r1", 2, "reordered")]


def test_a_renumbered_deletion_is_detected(store: Store) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r1' AND sequence = 2")
    for sequence in (3, 4, 5):
        sql(
            store,
            "UPDATE run_steps SET sequence = :to WHERE run_id = 'r1' AND sequence = :at",
            to=sequence - 1,
            at=sequence,
        )
    sql(store, "UPDATE runs SET steps = 4 WHERE id = 'r1'")
    assert broken(store) == [("r1", 2, "edited")]


def test_a_deleted_last_step_is_a_head_mismatch(store: Store) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r2' AND sequence = 5")
    assert broken(store) == [("r2", 5, "head mismatch")]
    # Lowering the count to match does not help: the head still names step 5.
    sql(store, "UPDATE runs SET steps = 4 WHERE id = 'r2'")
    assert broken(store) == [("r2", 5, "head mismatch")]


@pytest.mark.parametrize(
    "change",
    ["chain_head = NULL", "chain_head = :mac", "chain_head = 'é'", "steps = 6", "steps = 4"],
)
def test_a_changed_head_or_count_is_a_head_mismatch(store: Store, change: str) -> None:
    sql(store, f"UPDATE runs SET {change} WHERE id = 'r1'", mac="ab" * 32)
    assert broken(store) == [("r1", 6, "head mismatch")]


def test_a_forged_step_is_detected(store: Store) -> None:
    # A copy of a real step's row and mac, appended under the next number.
    sql(
        store,
        "INSERT INTO run_steps (run_id, sequence, kind, round, duration_ms, payload, "
        "recorded_at, mac) SELECT run_id, 6, kind, round, duration_ms, payload, recorded_at, "
        "mac FROM run_steps WHERE run_id = 'r1' AND sequence = 5",
    )
    assert broken(store) == [("r1", 6, "head mismatch")]
    # Counted in too, it is a step whose mac does not hold.
    sql(store, "UPDATE runs SET steps = 6 WHERE id = 'r1'")
    assert broken(store) == [("r1", 6, "edited")]


def test_a_step_moved_to_another_run_is_detected(store: Store) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r2' AND sequence = 5")
    sql(store, "UPDATE run_steps SET run_id = 'r2' WHERE run_id = 'r1' AND sequence = 5")
    assert broken(store) == [("r1", 5, "head mismatch"), ("r2", 5, "edited")]


def test_an_emptied_run_is_detected(store: Store) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r1'")
    sql(store, "UPDATE runs SET steps = 0 WHERE id = 'r1'")
    assert broken(store) == [("r1", 1, "head mismatch")]


def test_a_run_with_no_steps_holds_and_a_named_absent_run_is_missing(store: Store) -> None:
    store.start_run("empty")
    assert broken(store) == []
    check = store.verify("gone")
    assert check.to_dict() == {
        "runs_checked": 1,
        "broken": [{"run_id": "gone", "sequence": 1, "problem": "missing"}],
    }


def test_purging_whole_runs_is_not_a_break(backend: Any) -> None:
    class Clock:
        now = datetime(2030, 6, 1, tzinfo=UTC)

        def __call__(self) -> datetime:
            return self.now

    clock = Clock()
    store = backend.open(clock=clock)
    try:
        write_run(store, "old")
        store.finish_run("old", RunStatus.COMPLETED)
        clock.now += timedelta(days=40)
        write_run(store, "new")
        assert store.purge(30, 7).finished == 1
        check = store.verify()
        assert (check.runs_checked, check.broken) == (1, ())
    finally:
        store.close()


def test_steps_written_to_one_run_at_once_still_chain(backend: Any) -> None:
    """Two stores (two processes, as it were) record one run's odd and even steps at once:
    every step is chained exactly once, in commit order, whatever that order was."""
    first = backend.open()
    first.start_run("shared")
    stores = [first, backend.open()]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def writer(store: Store, parity: int) -> None:
        try:
            start.wait()
            for sequence in range(1 + parity, 201, 2):
                store.record_step(record("shared", sequence))
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=writer, args=(s, i)) for i, s in enumerate(stores)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    try:
        assert errors == []
        detail = first.get_run("shared")
        assert detail is not None
        assert (len(detail.steps), detail.run.steps) == (200, 200)
        assert first.verify().broken == ()
    finally:
        for store in stores:
            store.close()


def test_verify_sees_a_run_being_written_consistently(backend: Any) -> None:
    writer = backend.open()
    reader = backend.open()
    writer.start_run("live")
    done = threading.Event()
    # The writer waits half way until the reader has checked the half-written run, so the
    # test never depends on how the threads happen to be scheduled.
    halfway, seen_halfway = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def write() -> None:
        try:
            for sequence in range(1, 301):
                writer.record_step(record("live", sequence))
                if sequence == 150:
                    halfway.set()
                    seen_halfway.wait(30)
        except BaseException as exc:
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=write)
    thread.start()
    checks = []
    try:
        while not done.is_set():
            was_halfway = halfway.is_set()
            checks.append(reader.verify("live").broken)
            if was_halfway:
                seen_halfway.set()
        thread.join()
        assert errors == []
        assert seen_halfway.is_set()
        assert set(checks) == {()}
    finally:
        writer.close()
        reader.close()


# -- the key -------------------------------------------------------------------------------------


def test_a_chain_checks_only_under_the_key_it_was_written_with(backend: Any) -> None:
    writer = backend.open(environ={"NRLLM_AUDIT_KEY": AUDIT_KEY})
    write_run(writer, "r1", steps=2)
    writer.close()

    for environ, holds in [
        ({"NRLLM_AUDIT_KEY": AUDIT_KEY}, True),
        ({"NRLLM_AUDIT_KEY": AUDIT_KEY, "NRLLM_STATE_KEY": STATE_KEY}, True),
        ({"NRLLM_AUDIT_KEY": OTHER_KEY}, False),
        ({"NRLLM_STATE_KEY": AUDIT_KEY}, True),
        ({"NRLLM_STATE_KEY": STATE_KEY}, False),
        ({}, False),
    ]:
        reader = backend.open(environ=environ)
        try:
            assert (reader.verify().broken == ()) is holds, environ
        finally:
            reader.close()


def test_the_key_source_is_reported(backend: Any) -> None:
    for environ, source in [
        ({"NRLLM_AUDIT_KEY": AUDIT_KEY, "NRLLM_STATE_KEY": STATE_KEY}, KeySource.AUDIT_KEY),
        ({"NRLLM_STATE_KEY": STATE_KEY}, KeySource.STATE_KEY),
        ({"NRLLM_AUDIT_KEY": ""}, KeySource.DATABASE),
        ({}, KeySource.DATABASE),
    ]:
        store = backend.open(environ=environ)
        try:
            assert store.verify().key_source is source
        finally:
            store.close()


def test_without_a_key_each_database_has_its_own(tmp_path: Path) -> None:
    one = Store.open(None, data_dir=tmp_path / "one", environ={})
    two = Store.open(None, data_dir=tmp_path / "two", environ={})
    try:
        assert one._key().source is KeySource.DATABASE
        assert one._key().secret != two._key().secret
    finally:
        one.close()
        two.close()
    again = Store.open(None, data_dir=tmp_path / "one", environ={})
    try:
        write_run(again, "r1", steps=1)
        assert again.verify().broken == ()
    finally:
        again.close()


def test_the_key_is_read_from_the_process_environment_when_first_needed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NRLLM_AUDIT_KEY", raising=False)
    monkeypatch.delenv("NRLLM_STATE_KEY", raising=False)
    store = Store.open(None, data_dir=tmp_path)
    try:
        monkeypatch.setenv("NRLLM_AUDIT_KEY", AUDIT_KEY)
        write_run(store, "r1", steps=1)
        assert store.verify().key_source is KeySource.AUDIT_KEY
    finally:
        store.close()


def test_the_audit_key_is_never_the_sealing_key() -> None:
    derived = chain_key({"NRLLM_STATE_KEY": STATE_KEY}, bytes)
    assert derived.source is KeySource.STATE_KEY
    assert len(derived.secret) == 32
    assert derived.secret != decode_key(STATE_KEY)
    assert chain_key({"NRLLM_AUDIT_KEY": STATE_KEY}, bytes).secret == derived.secret
    assert STATE_KEY not in repr(derived)


def test_a_malformed_key_refuses_to_record_and_never_shows_its_value(tmp_path: Path) -> None:
    store = Store.open(None, data_dir=tmp_path, environ={"NRLLM_AUDIT_KEY": "not-a-key!"})
    try:
        with pytest.raises(ValueError, match="NRLLM_AUDIT_KEY") as caught:
            store.start_run("r1")
        assert "not-a-key" not in str(caught.value)
    finally:
        store.close()


def test_a_database_that_lost_its_key_refuses_to_record(tmp_path: Path) -> None:
    store = Store.open(None, data_dir=tmp_path, environ={})
    sql(store, "DELETE FROM audit_keys")
    try:
        with pytest.raises(LookupError, match="lost its chain key"):
            store.start_run("r1")
    finally:
        store.close()


@pytest.mark.parametrize(
    "damage",
    ["DROP TABLE audit_keys", "ALTER TABLE audit_keys RENAME COLUMN secret TO withheld"],
)
def test_a_database_whose_key_table_cannot_be_read_says_so_and_records_nothing(
    backend: Any, damage: str
) -> None:
    store = backend.open(environ={})
    sql(store, damage)
    try:
        for attempt in (lambda: store.start_run("r1"), store.verify):
            with pytest.raises(LookupError) as caught:
                attempt()
            assert str(caught.value) == (
                "the audit database's chain key cannot be read: the table audit_keys is "
                "missing or unreadable"
            )
    finally:
        store.close()


def test_a_run_whose_head_was_removed_takes_no_more_steps(store: Store) -> None:
    sql(store, "UPDATE runs SET chain_head = NULL WHERE id = 'r1'")
    with pytest.raises(ValueError, match="lost its audit chain head"):
        store.record_step(record("r1", 6))


def test_the_chain_covers_every_column_of_the_steps_table(store: Store) -> None:
    with store._engine.connect() as connection:
        columns = {c["name"] for c in inspect(connection).get_columns("run_steps")}
    assert columns == {*STEP_FIELDS, "mac"}


# -- steps stored before the chain ---------------------------------------------------------------


def test_the_migration_chains_the_steps_already_stored(backend: Any) -> None:
    from alembic import command

    from nrllm_core.store._database import _alembic_config

    old = Store.connect(backend.url, data_dir=backend.data_dir)
    with old._engine.begin() as connection:
        command.upgrade(_alembic_config(connection), "0002")
        connection.execute(
            text(
                "INSERT INTO runs (id, kind, status, started_at, heartbeat_at, steps, "
                "prompt_tokens, completion_tokens) VALUES "
                "('before', 'run', 'completed', :at, :at, 2, 0, 0), "
                "('idle', 'run', 'running', :at, :at, 0, 0, 0)"
            ),
            {"at": stamp(old, datetime(2030, 1, 1, tzinfo=UTC))},
        )
        for sequence in (1, 2):
            connection.execute(
                text(
                    "INSERT INTO run_steps (run_id, sequence, kind, round, duration_ms, "
                    "payload, recorded_at) VALUES ('before', :s, 'tool', 1, 1.5, '{}', :at)"
                ),
                {"s": sequence, "at": stamp(old, datetime(2030, 1, 1, 0, 0, sequence, tzinfo=UTC))},
            )
    old.close()

    store = Store.connect(
        backend.url, data_dir=backend.data_dir, environ={"NRLLM_AUDIT_KEY": AUDIT_KEY}
    )
    try:
        store.upgrade()
        assert store.verify().to_dict() == {"runs_checked": 2, "broken": []}
        store.record_step(record("before", 3))
        store.record_step(record("idle", 1))
        assert store.verify().broken == ()
        sql(store, "UPDATE run_steps SET payload = '[]' WHERE run_id = 'before' AND sequence = 1")
        assert broken(store) == [("before", 1, "edited")]
    finally:
        store.close()


@pytest.mark.parametrize("environ", [{"NRLLM_AUDIT_KEY": AUDIT_KEY}, {}], ids=["audit", "database"])
def test_migration_0006_authenticates_the_heads_of_a_database_at_0005(
    backend: Any, environ: dict[str, str]
) -> None:
    from alembic import command

    from nrllm_core.store._database import _alembic_config

    old = Store.connect(backend.url, data_dir=backend.data_dir)
    with old._engine.begin() as connection:
        command.upgrade(_alembic_config(connection, environ), "0003")
        connection.execute(
            text(
                "INSERT INTO runs (id, kind, status, started_at, heartbeat_at, steps, "
                "prompt_tokens, completion_tokens) VALUES "
                "('before', 'run', 'completed', :at, :at, 3, 0, 0), "
                "('idle', 'run', 'running', :at, :at, 0, 0, 0), "
                "('headless', 'run', 'running', :at, :at, 0, 0, 0)"
            ),
            {"at": stamp(old, datetime(2030, 1, 1, tzinfo=UTC))},
        )
        for sequence in (1, 2, 3):
            connection.execute(
                text(
                    "INSERT INTO run_steps (run_id, sequence, kind, round, duration_ms, "
                    "payload, recorded_at) VALUES ('before', :s, 'tool', 1, 1.5, '{}', :at)"
                ),
                {"s": sequence, "at": stamp(old, datetime(2030, 1, 1, 0, 0, sequence, tzinfo=UTC))},
            )
        # 0004 chains them, and leaves the last mac as each run's head.
        command.upgrade(_alembic_config(connection, environ), "0005")
        connection.execute(text("UPDATE runs SET chain_head = NULL WHERE id = 'headless'"))
        heads = dict(connection.execute(text("SELECT id, chain_head FROM runs")).all())
    old.close()

    store = Store.connect(backend.url, data_dir=backend.data_dir, environ=environ)
    try:
        store.upgrade()
        key = store._key()
        assert run_row(store, "before") == (
            3,
            heads["before"],
            head_mac(key, "before", 3, heads["before"]),
        )
        assert run_row(store, "idle")[2] == head_mac(key, "idle", 0, initial_mac(key, "idle"))
        assert broken(store) == [("headless", 1, "head mismatch")]
        store.record_step(record("before", 4))
        store.record_step(record("idle", 1))
        assert broken(store) == [("headless", 1, "head mismatch")]
        # What the upgrade closed: a run cut short and refitted as before it is detected.
        sql(store, "DELETE FROM run_steps WHERE run_id = 'before' AND sequence = 4")
        sql(
            store,
            "UPDATE runs SET chain_head = :h, steps = 3 WHERE id = 'before'",
            h=heads["before"],
        )
        assert broken(store, "before") == [("before", 4, "head mismatch")]
    finally:
        store.close()


# -- nrllm runs verify ---------------------------------------------------------------------------


@pytest.fixture
def config(backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("NRLLM_HOME", str(backend.data_dir))
    monkeypatch.setenv("NRLLM_AUDIT_KEY", AUDIT_KEY)
    path = tmp_path / "nrllm.toml"
    store_url = "" if backend.url is None else f"[store]\nurl = {json.dumps(backend.url)}\n"
    path.write_text(store_url, encoding="utf-8")
    return path


def nrllm(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args])


def test_verify_exits_0_when_every_chain_holds(config: Path, store: Store) -> None:
    result = nrllm(config, "runs", "verify", "--all")
    assert (result.exit_code, result.stdout) == (0, "2 run(s) checked: every chain holds\n")
    assert result.stderr == ""

    result = nrllm(config, "runs", "verify", "r1", "--json")
    assert (result.exit_code, json.loads(result.stdout)) == (0, {"runs_checked": 1, "broken": []})


def test_verify_exits_1_naming_the_run_step_and_problem(config: Path, store: Store) -> None:
    sql(store, "DELETE FROM run_steps WHERE run_id = 'r2' AND sequence = 4")

    result = nrllm(config, "runs", "verify", "--all")
    assert result.exit_code == 1
    assert result.stdout == ("run r2: broken at step 4: missing\n2 run(s) checked: 1 broken\n")
    result = nrllm(config, "runs", "verify", "--all", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {
        "runs_checked": 2,
        "broken": [{"run_id": "r2", "sequence": 4, "problem": "missing"}],
    }
    assert nrllm(config, "runs", "verify", "r1").exit_code == 0


def test_verify_without_a_key_says_it_detects_accidents_not_attackers(
    config: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NRLLM_AUDIT_KEY")
    monkeypatch.delenv("NRLLM_STATE_KEY", raising=False)

    result = nrllm(config, "runs", "verify", "--all", "--json")

    # The chains were written under NRLLM_AUDIT_KEY: the database's own key cannot check them.
    assert result.exit_code == 1
    assert "detects accidents, not attackers" in result.stderr
    assert json.loads(result.stdout)["runs_checked"] == 2


def test_verify_prints_a_run_id_planted_in_the_database_inertly(config: Path, store: Store) -> None:
    sql(
        store,
        "INSERT INTO runs (id, kind, status, started_at, heartbeat_at, steps, prompt_tokens, "
        "completion_tokens) SELECT :id, kind, status, started_at, heartbeat_at, 0, 0, 0 "
        "FROM runs WHERE id = 'r1'",
        id="x\x1b[2J\x07",
    )
    text_out = nrllm(config, "runs", "verify", "--all")
    json_out = nrllm(config, "runs", "verify", "--all", "--json")

    for result in (text_out, json_out):
        assert result.exit_code == 1
        assert "\x1b" not in result.output
        assert "\x07" not in result.output
    assert "run x\\x1b[2J\\x07: broken at step 1: head mismatch" in text_out.stdout
    assert json.loads(json_out.stdout)["broken"][0]["run_id"] == "x\x1b[2J\x07"


@pytest.mark.parametrize("args", [(), ("r1", "--all")])
def test_verify_needs_a_run_id_or_all(config: Path, args: tuple[str, ...]) -> None:
    result = nrllm(config, "runs", "verify", *args)
    assert result.exit_code == 2
    assert "name a RUN_ID or give --all" in result.stderr


def test_verify_reports_a_malformed_key_by_name(
    config: Path, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NRLLM_AUDIT_KEY", "bad key value")
    result = nrllm(config, "runs", "verify", "--all")
    assert result.exit_code == 1
    assert "NRLLM_AUDIT_KEY" in result.stderr
    assert "bad key value" not in result.output


# -- any tampering, as a property ----------------------------------------------------------------

KEY = chain_key({"NRLLM_AUDIT_KEY": AUDIT_KEY}, bytes)
EDITS = {
    "kind": lambda v: v + "x",
    "round": lambda v: v + 1,
    "duration_ms": lambda v: v + 0.5,
    "payload": lambda v: v + " ",
    "recorded_at": lambda v: v + timedelta(microseconds=1),
    "run_id": lambda v: v + "x",
}


def chained(steps: int) -> tuple[list[dict[str, Any]], str]:
    head = initial_mac(KEY, "r")
    rows = []
    for sequence in range(1, steps + 1):
        row: dict[str, Any] = {
            "run_id": "r",
            "sequence": sequence,
            "kind": "tool",
            "round": 1,
            "duration_ms": 1.0,
            "payload": f'{{"n":{sequence}}}',
            "recorded_at": datetime(2030, 1, 1, tzinfo=UTC) + timedelta(seconds=sequence),
        }
        head = row["mac"] = step_mac(KEY, head, row)
        rows.append(row)
    return rows, head_mac(KEY, "r", steps, head)


@given(
    steps=st.integers(min_value=1, max_value=12),
    data=st.data(),
)
def test_every_single_tampering_is_detected(steps: int, data: st.DataObject) -> None:
    rows, head = chained(steps)
    assert find_break(KEY, "r", head=head, count=steps, rows=rows) is None
    count = steps
    at = data.draw(st.integers(min_value=0, max_value=steps - 1))
    actions = ["edit", "delete", "insert", "cut", "head", "count"] + (["swap"] if steps > 1 else [])
    action = data.draw(st.sampled_from(actions))
    if action == "edit":
        field = data.draw(st.sampled_from(sorted(EDITS)))
        rows[at] = {**rows[at], field: EDITS[field](rows[at][field])}
    elif action == "delete":
        del rows[at]
    elif action == "swap":
        other = data.draw(st.integers(min_value=0, max_value=steps - 1).filter(lambda i: i != at))
        rows[at], rows[other] = (
            {**rows[other], "sequence": rows[at]["sequence"]},
            {**rows[at], "sequence": rows[other]["sequence"]},
        )
    elif action == "insert":
        count += data.draw(st.integers(min_value=0, max_value=1))
        rows.append({**rows[at], "sequence": steps + 1})
    elif action == "cut":
        # The steps after the first ``at`` deleted, the count and the head refitted as a
        # writer without the key can: to the last mac left.
        del rows[at:]
        count = at
        head = rows[-1]["mac"] if rows else initial_mac(KEY, "r")
    elif action == "head":
        earlier = head_mac(KEY, "r", at, rows[at - 1]["mac"] if at else initial_mac(KEY, "r"))
        head = data.draw(st.sampled_from([rows[at]["mac"], earlier, "00" * 32]))
    else:
        count += data.draw(st.sampled_from([-1, 1]))
    rows.sort(key=lambda row: row["sequence"])

    assert find_break(KEY, "r", head=head, count=count, rows=rows) is not None

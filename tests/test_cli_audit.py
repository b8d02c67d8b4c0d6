"""``nrllm runs``, ``nrllm runs show``, ``nrllm purge`` and ``nrllm db upgrade``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from nrllm_core import AuditRecord, StepKind
from nrllm_core.cli import cli
from nrllm_core.cli._audit import _STATUSES
from nrllm_core.store import RunKind, RunStatus, Store

RUN_KEYS = {
    "run_id",
    "status",
    "provider",
    "zone",
    "skill",
    "actor",
    "started_at",
    "ended_at",
    "termination_reason",
    "kind",
}


@pytest.fixture
def config(backend: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A configuration naming the test's store; SQLite is found through ``NRLLM_HOME``."""
    monkeypatch.setenv("NRLLM_HOME", str(backend.data_dir))
    lines = ["[privacy]", "retention_days = 10", "", "[store]", "unfinished_retention_days = 3"]
    if backend.url is not None:
        lines.append(f"url = {json.dumps(backend.url)}")
    path = tmp_path / "nrllm.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def store(backend: Any) -> Iterator[Store]:
    opened = backend.open()
    yield opened
    opened.close()


def nrllm(config: Path, *args: str) -> Result:
    return CliRunner().invoke(cli, ["--config", str(config), *args])


def add_run(store: Store, run_id: str, *, steps: int = 0, **kwargs: Any) -> None:
    store.start_run(run_id, **kwargs)
    for sequence in range(1, steps + 1):
        store.record_step(
            AuditRecord(
                run_id=run_id,
                sequence=sequence,
                kind=StepKind.TOOL,
                round=1,
                duration_ms=3.5,
                payload={"kind": "tool", "tool_name": "t", "content_redacted": True},
            )
        )


def test_runs_json_lists_every_run_with_its_keys(config: Path, store: Store) -> None:
    add_run(store, "r1", provider="ollama", zone="local", skill="edit", actor="ana")
    add_run(store, "r2", kind=RunKind.INVOKE)
    store.finish_run("r1", RunStatus.COMPLETED, "final_answer")

    result = nrllm(config, "runs", "--json")

    assert result.exit_code == 0, result.output
    listed = {r["run_id"]: r for r in json.loads(result.stdout)}
    assert set(listed) == {"r1", "r2"}
    first = listed["r1"]
    assert set(first) == RUN_KEYS
    assert first["status"] == "completed"
    assert (first["provider"], first["zone"], first["skill"], first["actor"]) == (
        "ollama",
        "local",
        "edit",
        "ana",
    )
    assert first["termination_reason"] == "final_answer"
    assert first["kind"] == "run"
    assert datetime.fromisoformat(first["ended_at"]).tzinfo is not None
    assert listed["r2"]["kind"] == "invoke"
    assert listed["r2"]["ended_at"] is None


def test_runs_filters_by_status(config: Path, store: Store) -> None:
    add_run(store, "r1")
    add_run(store, "r2")
    store.finish_run("r2", RunStatus.FAILED, "audit_unavailable")

    result = nrllm(config, "runs", "--status", "failed", "--json")

    assert result.exit_code == 0, result.output
    assert [r["run_id"] for r in json.loads(result.stdout)] == ["r2"]
    assert nrllm(config, "runs", "--status", "bogus").exit_code == 2


def test_runs_filters_by_actor(config: Path, store: Store) -> None:
    add_run(store, "r1", actor="ana")
    add_run(store, "r2", actor="bo")
    add_run(store, "r3", actor="ana")
    store.finish_run("r3", RunStatus.FAILED, "audit_unavailable")

    result = nrllm(config, "runs", "--actor", "ana", "--json")

    assert result.exit_code == 0, result.output
    assert sorted(r["run_id"] for r in json.loads(result.stdout)) == ["r1", "r3"]
    both = nrllm(config, "runs", "--actor", "ana", "--status", "failed", "--json")
    assert [r["run_id"] for r in json.loads(both.stdout)] == ["r3"]
    assert nrllm(config, "runs", "--actor", "nobody").stdout == "no runs\n"


def test_the_status_choices_are_the_store_statuses() -> None:
    assert set(_STATUSES) == {s.value for s in RunStatus}


def test_runs_prints_one_line_per_run(config: Path, store: Store) -> None:
    assert nrllm(config, "runs").stdout == "no runs\n"
    add_run(store, "r1", steps=2, provider="ollama")

    result = nrllm(config, "runs")

    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert line.startswith("r1  run  running  provider=ollama")
    assert "steps=2" in line


def test_runs_show_json_is_the_run_and_its_filtered_steps(config: Path, store: Store) -> None:
    add_run(store, "r1", steps=3, actor="ana")

    result = nrllm(config, "runs", "show", "r1", "--json")

    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert set(shown) == {"run", "usage", "truncated", "label", "steps"}
    # Its steps record no label (no model was asked).
    assert shown["label"] is None
    assert set(shown["run"]) == RUN_KEYS
    assert shown["run"]["actor"] == "ana"
    assert [s["sequence"] for s in shown["steps"]] == [1, 2, 3]
    first = shown["steps"][0]
    # When it was written, in ISO 8601 UTC.
    assert datetime.fromisoformat(first.pop("recorded_at")).utcoffset() == timedelta(0)
    assert first == {
        "sequence": 1,
        "kind": "tool",
        "round": 1,
        "duration_ms": 3.5,
        "payload": {"kind": "tool", "tool_name": "t", "content_redacted": True},
    }


def test_runs_show_prints_the_timeline(config: Path, store: Store) -> None:
    add_run(store, "r1", steps=1)

    result = nrllm(config, "runs", "show", "r1")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[1:] == [
        "  usage: prompt_tokens 0, completion_tokens 0, cached_tokens 0, reasoning_tokens 0;"
        " truncated: false",
        "  #1 tool round 1 3.5 ms",
        '    {"tool_name":"t","content_redacted":true}',
    ]


def test_runs_show_an_unknown_run_fails(config: Path, store: Store) -> None:
    result = nrllm(config, "runs", "show", "nope", "--json")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert "no run 'nope'" in result.stderr


def test_purge_uses_the_configured_windows(config: Path, backend: Any) -> None:
    now = datetime.now(UTC)
    for age, run_id, status in [
        (11, "old-done", RunStatus.COMPLETED),
        (9, "young-done", RunStatus.COMPLETED),
        (4, "old-parked", RunStatus.AWAITING_APPROVAL),
        (2, "young-parked", RunStatus.AWAITING_APPROVAL),
    ]:
        past = backend.open(clock=lambda age=age: now - timedelta(days=age))
        add_run(past, run_id, steps=1)
        past.finish_run(run_id, status)
        past.close()

    result = nrllm(config, "purge")

    assert result.exit_code == 0, result.output
    assert result.stdout == "Finished runs (10 d): 1\nUnfinished runs (3 d): 1\n"
    store = backend.open()
    try:
        assert {r.run_id for r in store.list_runs()} == {"young-done", "young-parked"}
    finally:
        store.close()


def test_purge_days_overrides_the_finished_window(config: Path, store: Store) -> None:
    add_run(store, "r1")
    store.finish_run("r1", RunStatus.COMPLETED)

    result = nrllm(config, "purge", "--days", "5")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == "Finished runs (5 d): 0"
    assert [r.run_id for r in store.list_runs()] == ["r1"]


def test_purge_past_a_hundred_years_is_refused(config: Path) -> None:
    result = nrllm(config, "purge", "--days", "99999999999")
    assert result.exit_code == 2
    assert "--days: at most 36,500" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("days", ["0", "-3"])
def test_purge_below_one_day_purges_nothing(config: Path, backend: Any, days: str) -> None:
    past = backend.open(clock=lambda: datetime.now(UTC) - timedelta(days=400))
    add_run(past, "ancient")
    past.finish_run("ancient", RunStatus.COMPLETED)
    past.close()

    result = nrllm(config, "purge", "--days", days)

    assert result.exit_code == 0
    assert result.stdout == f"--days must be a positive integer (got {days}); nothing was purged\n"
    store = backend.open()
    try:
        assert [r.run_id for r in store.list_runs()] == ["ancient"]
    finally:
        store.close()


def test_db_upgrade_creates_the_schema(config: Path, backend: Any) -> None:
    result = nrllm(config, "db", "upgrade")

    assert result.exit_code == 0, result.output
    assert result.stdout == "the audit database is up to date\n"
    store = Store.connect(backend.url, data_dir=backend.data_dir)
    try:
        assert store.list_runs() == []
    finally:
        store.close()


def test_an_outdated_database_is_reported(config: Path, store: Store) -> None:
    from sqlalchemy import text

    with store._engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = '0000'"))

    result = nrllm(config, "runs")

    assert result.exit_code == 1
    assert "nrllm db upgrade" in result.stderr


@pytest.mark.parametrize(
    "damage",
    ["DROP TABLE audit_keys", "ALTER TABLE audit_keys RENAME COLUMN secret TO withheld"],
)
def test_verify_without_a_readable_audit_key_table_fails_on_one_clean_line(
    config: Path, store: Store, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    from sqlalchemy import text

    # Without a key in the environment, the chains are checked under the database's own.
    monkeypatch.delenv("NRLLM_AUDIT_KEY", raising=False)
    monkeypatch.delenv("NRLLM_STATE_KEY", raising=False)
    add_run(store, "r1", steps=2)
    with store._engine.begin() as connection:
        connection.execute(text(damage))

    result = nrllm(config, "runs", "verify", "--all")

    assert result.exit_code == 1
    # A clean exit, not an exception the runner caught: no traceback in a terminal either.
    assert isinstance(result.exception, SystemExit)
    assert result.stdout == ""
    assert result.stderr == (
        "Error: the audit database's chain key cannot be read: the table audit_keys is "
        "missing or unreadable\n"
    )


def test_a_bad_configuration_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[privacy]\nlevel = "partial"\n', encoding="utf-8")

    for command in (["runs"], ["purge"], ["runs", "show", "x"]):
        result = nrllm(path, *command)

        # Like every nrllm command: bad input, exit 2, the key named.
        assert result.exit_code == 2
        assert "invalid configuration:" in result.stderr
        assert "privacy.level" in result.stderr

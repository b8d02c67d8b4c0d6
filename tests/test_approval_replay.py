"""A sealed state opens for one decision, ever, and never after its turn is over: the nonce is
consumed in the claim's transaction, the state carries its run's last step and an expiry, and
four-eyes compares people, not spellings. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from nrllm_core import (
    ApprovalRefused,
    ConfigError,
    DataClass,
    Effect,
    RefusalReason,
    Tool,
    ToolContext,
    ToolResult,
    load_config,
)
from nrllm_core._host import Host
from nrllm_core.store import engine_for

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")


class Write(Tool):
    name = "write_note"
    description = "Write a note."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT
    effect = Effect.NON_IDEMPOTENT_WRITE
    parameters = {  # noqa: RUF012 - read once by the catalog
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        self.calls.append(arguments)
        return ToolResult.text("written")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


WRITE_TURN = {"tool_calls": [{"name": "write_note", "arguments": {"text": "hello"}}]}


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_host(
    tmp_path: Path, backend: Any, clock: Clock, tools_plugin: Any
) -> Iterator[Callable[..., tuple[Host, Write]]]:
    hosts: list[Host] = []

    def build(turns: list[dict[str, Any]], **sections: Any) -> tuple[Host, Write]:
        script = tmp_path / "script.json"
        script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
        provider = {"kind": "scripted", "script": str(script), "trust_zone": "local"}
        provider.update(sections.pop("provider", {}))
        data = {
            "providers": {"model": provider},
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
            "store": {"url": backend.url},
            **sections,
        }
        write = Write()
        host = Host.from_config(
            data=data,
            plugins=[tools_plugin(write)],
            load_entry_points=False,
            data_dir=backend.data_dir,
            environ={},
            clock=clock,
        )
        hosts.append(host)
        return host, write

    yield build
    for host in hosts:
        host.store.close()


def suspended(host: Host) -> tuple[str, str]:
    outcome = host.run("write hello")
    assert outcome.status == "awaiting_approval"
    assert outcome.turn_digest is not None
    return outcome.run_id, outcome.turn_digest


class Writer:
    """Someone with write access to the audit database, and nothing else (no state key)."""

    def __init__(self, backend: Any) -> None:
        self.engine = engine_for(backend.url, backend.data_dir)

    def sql(self, statement: str, **values: Any) -> Any:
        with self.engine.begin() as connection:
            return connection.execute(text(statement), values).all()

    def execute(self, statement: str, **values: Any) -> None:
        with self.engine.begin() as connection:
            connection.execute(text(statement), values)

    def chain_head(self, run_id: str) -> tuple[int, str, str]:
        """The run row's count, last mac and head, as a writer can save them for later."""
        ((count, last, head),) = self.sql(
            "SELECT steps, last_mac, chain_head FROM runs WHERE id = :r", r=run_id
        )
        return count, last, head

    def cut_after(self, run_id: str, sequence: int) -> None:
        """Every step of the run after ``sequence`` deleted."""
        self.execute(
            "DELETE FROM run_steps WHERE run_id = :r AND sequence > :s", r=run_id, s=sequence
        )

    def copy_suspension(self, run_id: str) -> bytes:
        ((sealed,),) = self.sql("SELECT sealed FROM suspensions WHERE run_id = :r", r=run_id)
        return bytes(sealed)

    def put_back(self, run_id: str, sealed: bytes) -> None:
        """The attack: the finished run's suspension row restored, the run waiting again."""
        self.execute(
            "UPDATE suspensions SET sealed = :s, decided_at = NULL, decision = NULL, "
            "approver = NULL WHERE run_id = :r",
            s=sealed,
            r=run_id,
        )
        self.execute(
            "UPDATE runs SET status = 'awaiting_approval', ended_at = NULL WHERE id = :r",
            r=run_id,
        )


@pytest.fixture
def writer(backend: Any) -> Iterator[Writer]:
    db = Writer(backend)
    yield db
    db.engine.dispose()


def refusals(host: Host, run_id: str, digest: str) -> tuple[RefusalReason, RefusalReason]:
    """Why deciding the turn, and why showing it, are refused; each message names its reason."""
    with pytest.raises(ApprovalRefused) as deciding:
        host.approve(run_id, approver="bob", turn_digest=digest)
    with pytest.raises(ApprovalRefused) as showing:
        host.pending(run_id)
    for refused in (deciding.value, showing.value):
        assert refused.reason.value in str(refused)
    return deciding.value.reason, showing.value.reason


def approved_once(make_host: Callable[..., tuple[Host, Write]], writer: Writer) -> Any:
    """A run approved once, with what a writer copied while it waited: its suspension row and
    its chain's head."""
    host, write = make_host([WRITE_TURN, {"content": "done"}])
    run_id, digest = suspended(host)
    sealed = writer.copy_suspension(run_id)
    saved_head = writer.chain_head(run_id)
    done = host.approve(run_id, approver="bob", turn_digest=digest)
    assert done.status == "completed"
    assert write.calls == [{"text": "hello"}]
    return host, write, run_id, digest, sealed, saved_head


def suspension_step(writer: Writer, run_id: str) -> int:
    ((sequence,),) = writer.sql(
        "SELECT MAX(sequence) FROM run_steps WHERE run_id = :r AND kind = 'suspension'", r=run_id
    )
    assert sequence is not None
    return int(sequence)


def test_a_state_put_back_after_its_run_finished_is_refused_and_writes_nothing(make_host, writer):
    host, write, run_id, digest, sealed, _ = approved_once(make_host, writer)
    writer.put_back(run_id, sealed)
    assert host.store.suspension(run_id) is not None

    with pytest.raises(ApprovalRefused) as refused:
        host.approve(run_id, approver="bob", turn_digest=digest)

    assert refused.value.reason in (RefusalReason.STALE, RefusalReason.REPLAYED)
    assert write.calls == [{"text": "hello"}]


def test_a_state_whose_run_moved_on_is_stale(make_host, writer):
    host, write, run_id, digest, sealed, _ = approved_once(make_host, writer)
    writer.put_back(run_id, sealed)
    # Even with the record of its claim erased, the steps after the suspension remain.
    writer.execute("DELETE FROM consumed_approvals WHERE run_id = :r", r=run_id)

    assert refusals(host, run_id, digest) == (RefusalReason.STALE, RefusalReason.STALE)
    assert write.calls == [{"text": "hello"}]


@pytest.mark.parametrize(
    "refit",
    [
        # As a writer did before heads were authenticated: the last step left, and the count.
        "chain_head = :last, steps = :count",
        # The count and last mac the store chains on from, the head left as it was.
        "last_mac = :last, steps = :count",
    ],
)
def test_a_replay_with_the_run_cut_back_to_its_suspension_is_refused_tampered(
    make_host, writer, refit
):
    host, write, run_id, digest, sealed, _ = approved_once(make_host, writer)
    suspension = suspension_step(writer, run_id)
    # The four steps of the replay: the steps after the suspension deleted, the run row made
    # to fit what is left, the record of the claim erased and the suspension row put back.
    writer.cut_after(run_id, suspension)
    ((last, count),) = writer.sql(
        "SELECT (SELECT mac FROM run_steps WHERE run_id = :r AND sequence = :s), "
        "(SELECT COUNT(*) FROM run_steps WHERE run_id = :r)",
        r=run_id,
        s=suspension,
    )
    writer.execute(f"UPDATE runs SET {refit} WHERE id = :r", last=last, count=count, r=run_id)
    writer.execute("DELETE FROM consumed_approvals WHERE run_id = :r", r=run_id)
    writer.put_back(run_id, sealed)

    assert refusals(host, run_id, digest) == (RefusalReason.TAMPERED, RefusalReason.TAMPERED)
    assert write.calls == [{"text": "hello"}]
    # Refused before the claim: nothing was decided, and the nonce was not recorded again.
    ((decided,),) = writer.sql("SELECT decided_at FROM suspensions WHERE run_id = :r", r=run_id)
    assert decided is None
    assert writer.sql("SELECT nonce FROM consumed_approvals") == []


def test_a_consumed_nonce_is_replayed_even_with_a_saved_head_put_back(make_host, writer):
    host, write, run_id, digest, sealed, (count, last, head) = approved_once(make_host, writer)
    # The writer also cuts the run back to the suspension and restores the head it saved then:
    # the chain holds and the state is not stale, so the consumed nonce is what refuses it.
    writer.cut_after(run_id, suspension_step(writer, run_id))
    writer.execute(
        "UPDATE runs SET steps = :n, last_mac = :l, chain_head = :h WHERE id = :r",
        n=count,
        l=last,
        h=head,
        r=run_id,
    )
    writer.put_back(run_id, sealed)
    assert host.store.verify(run_id).broken == ()

    with pytest.raises(ApprovalRefused, match="replayed") as refused:
        host.approve(run_id, approver="bob", turn_digest=digest)

    assert refused.value.reason is RefusalReason.REPLAYED
    assert write.calls == [{"text": "hello"}]
    # The claim and the nonce are one transaction: the refused claim left the turn undecided.
    ((decided, status),) = writer.sql(
        "SELECT s.decided_at, r.status FROM suspensions s JOIN runs r ON r.id = s.run_id "
        "WHERE s.run_id = :r",
        r=run_id,
    )
    assert (decided, status) == (None, "awaiting_approval")


def test_claiming_records_the_nonce_once(make_host, writer, clock):
    host, _ = make_host([WRITE_TURN, {"content": "done"}])
    run_id, digest = suspended(host)
    assert writer.sql("SELECT nonce FROM consumed_approvals") == []

    host.approve(run_id, approve=False, approver="bob", turn_digest=digest)

    ((nonce, owner, consumed_at),) = writer.sql(
        "SELECT nonce, run_id, consumed_at FROM consumed_approvals"
    )
    assert (len(nonce), owner) == (32, run_id)
    assert consumed_at is not None


def test_a_turn_past_its_expiry_cannot_be_decided(make_host, clock):
    host, write = make_host([WRITE_TURN, {"content": "done"}], approvals={"ttl_seconds": 60})
    run_id, digest = suspended(host)
    clock.now += timedelta(seconds=60)

    assert refusals(host, run_id, digest) == (RefusalReason.EXPIRED, RefusalReason.EXPIRED)
    assert write.calls == []
    # Nothing was claimed: the run is still waiting, and stays undecidable.
    assert host.store.suspension(run_id) is not None


def test_a_turn_within_its_expiry_is_decided(make_host, clock):
    host, write = make_host([WRITE_TURN, {"content": "done"}], approvals={"ttl_seconds": 60})
    run_id, digest = suspended(host)
    clock.now += timedelta(seconds=59)

    assert host.approve(run_id, approver="bob", turn_digest=digest).status == "completed"
    assert write.calls == [{"text": "hello"}]


def test_a_turn_is_listed_due_when_its_sealed_state_says_it_expired(make_host, clock):
    from nrllm_core.store import RunKind

    host, _ = make_host([WRITE_TURN, {"content": "done"}], approvals={"ttl_seconds": 60})
    run_id, _ = suspended(host)
    clock.now += timedelta(seconds=59)
    assert host.store.due_suspensions(RunKind.RUN) == []
    assert host.pending(run_id) is not None
    clock.now += timedelta(seconds=1)

    assert host.store.due_suspensions(RunKind.RUN) == [run_id]
    with pytest.raises(ApprovalRefused) as refused:
        host.pending(run_id)
    assert refused.value.reason is RefusalReason.EXPIRED


def test_the_default_expiry_is_seven_days(make_host, clock):
    host, _ = make_host([WRITE_TURN, {"content": "done"}])
    run_id, _ = suspended(host)
    clock.now += timedelta(days=7, seconds=-1)
    assert host.pending(run_id) is not None
    clock.now += timedelta(seconds=1)

    with pytest.raises(ApprovalRefused) as refused:
        host.pending(run_id)

    assert refused.value.reason is RefusalReason.EXPIRED


@pytest.mark.parametrize(
    "approver",
    [
        "alice",
        " Alice",
        "ALICE\t",
        "\uff41\uff4c\uff49\uff43\uff45",
        # Invisible code points and lookalike letters: people, not code points.
        "alice\u200b",
        "\u00adal\u2060i\ufeffce",
        "\u0430lice",
        "aIice",
        # Issue 33, item 2: a dot hidden on the i, blank, format and control characters.
        "ali\u0307ce",
        "alice\u2800",
        "alice\ufff9",
        "alice\U0001d159",
        "alice\x01",
        "alice\x7f",
        "alice\x9b",
    ],
)
def test_four_eyes_compares_normalised_ids(make_host, approver):
    host, write = make_host([WRITE_TURN, {"content": "done"}], provider={"four_eyes": True})
    run_id, digest = suspended(host)

    with pytest.raises(ApprovalRefused) as refused:
        host.approve(run_id, approver=approver, turn_digest=digest)

    assert refused.value.reason is RefusalReason.FOUR_EYES
    assert write.calls == []
    assert host.approve(run_id, approver="bob", turn_digest=digest).status == "completed"


@pytest.mark.parametrize(
    "approver", ["", " ", "\u200b", "\u00ad\u2060\ufeff\t", "\u2800", "\x01", "\u3164\x7f"]
)
@pytest.mark.parametrize("four_eyes", [True, False])
def test_an_approver_that_names_nobody_is_refused(make_host, approver, four_eyes):
    host, write = make_host([WRITE_TURN, {"content": "done"}], provider={"four_eyes": four_eyes})
    run_id, digest = suspended(host)

    for decide in (True, False):
        with pytest.raises(ApprovalRefused, match="the approver names nobody") as refused:
            host.approve(run_id, approve=decide, approver=approver, turn_digest=digest)
        assert refused.value.reason is RefusalReason.NO_APPROVER
    assert write.calls == []
    # Nothing was claimed: a person can still decide.
    assert host.approve(run_id, approver="bob", turn_digest=digest).status == "completed"


# -- configuration -------------------------------------------------------------------------------


def test_approvals_ttl_defaults_to_seven_days() -> None:
    assert load_config(data={}).approvals.ttl_seconds == 604_800
    assert load_config(data={"approvals": {"ttl_seconds": 60}}).approvals.ttl_seconds == 60


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (59, "approvals.ttl_seconds: must be at least 60"),
        (0, "approvals.ttl_seconds: must be at least 60"),
        ("3600", "approvals.ttl_seconds: expected an integer"),
    ],
)
def test_a_ttl_below_a_minute_is_a_config_error(value: Any, expected: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(expected)):
        load_config(data={"approvals": {"ttl_seconds": value}})


def test_approvals_has_no_other_key() -> None:
    with pytest.raises(ConfigError, match=re.escape("approvals.ttl: unknown key")):
        load_config(data={"approvals": {"ttl": 60}})


# -- ending a suspended run ---------------------------------------------------------------------


def test_cancel_ends_a_suspended_run_and_records_who_did(make_host, backend):
    host, write = make_host([WRITE_TURN, {"content": "done"}])
    run_id, digest = suspended(host)

    assert host.cancel(run_id, by="carol")

    (info,) = host.runs()
    assert (info.status, info.termination_reason) == ("cancelled", "cancelled")
    assert host.store.suspension(run_id) is None
    assert host.pending(run_id) is None
    detail = host.store.get_run(run_id)
    approval, finish = detail.steps[-2].payload, detail.steps[-1].payload
    assert (approval["decision"], approval["approver"], approval["reason"]) == (
        "cancelled",
        "carol",
        "cancelled",
    )
    assert finish["status"] == "cancelled"
    assert host.store.verify(run_id).broken == ()
    with host.store._engine.connect() as connection:
        (sealed,) = connection.execute(
            text("SELECT sealed FROM suspensions WHERE run_id = :r"), {"r": run_id}
        ).one()
    assert bytes(sealed) == b""
    with pytest.raises(ApprovalRefused, match="was cancelled") as refused:
        host.approve(run_id, approver="bob", turn_digest=digest)
    assert refused.value.reason is RefusalReason.CANCELLED
    assert write.calls == []
    assert not host.cancel(run_id)


def test_cancel_ends_an_expired_turn_and_refuses_a_canceller_naming_nobody(make_host, clock):
    host, _ = make_host([WRITE_TURN, {"content": "done"}])
    run_id, _ = suspended(host)
    clock.now += timedelta(days=8)

    with pytest.raises(ApprovalRefused) as refused:
        host.cancel(run_id, by="\u200b")
    assert refused.value.reason is RefusalReason.NO_APPROVER
    assert host.cancel(run_id)
    assert host.runs()[0].status == "cancelled"


def test_cancel_of_a_run_that_waits_for_nothing_is_false(make_host):
    host, _ = make_host([{"content": "done"}])
    done = host.run("hello")

    assert not host.cancel(done.run_id)
    assert not host.cancel("no-such-run")
    assert host.runs()[0].status == "completed"

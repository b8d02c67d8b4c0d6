"""Host.submit: a direct call whose approval suspends its run into the store, decided by any
host that shares the store and the state key (what ``nrllm mcp serve`` instances share)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from nrllm_core import ApprovalRefused, Host, RefusalReason, TrustZone

# write_note (a write that needs approval, appending to ``calls``) and read_secret (none).
from .test_host_invoke_gated import Tools, calls

# Both drivers, and both stores: the second host is another process's view of the same store.
pytestmark = pytest.mark.usefixtures("driven")


@pytest.fixture
def make_host(backend: Any) -> Iterator[Callable[..., Host]]:
    hosts: list[Host] = []

    def build(**sections: Any) -> Host:
        host = Host.from_config(
            data={"actor": {"id": "alice"}, "store": {"url": backend.url}, **sections},
            plugins=[Tools()],
            load_entry_points=False,
            data_dir=backend.data_dir,
            environ={},
        )
        hosts.append(host)
        return host

    calls.clear()
    yield build
    for host in hosts:
        host.store.close()


def submitted(host: Host) -> Any:
    outcome = host.submit("write_note", {"text": "hi"}, zone=TrustZone.LOCAL, kind="mcp")
    assert outcome.status == "awaiting_approval"
    return outcome


def kinds(host: Host, run_id: str) -> list[str]:
    detail = host.store.get_run(run_id)
    assert detail is not None
    return [step.kind for step in detail.steps]


def approval(host: Host, run_id: str) -> dict[str, Any]:
    detail = host.store.get_run(run_id)
    assert detail is not None
    (step,) = [s for s in detail.steps if s.kind == "approval"]
    return dict(step.payload)


def test_a_call_that_needs_approval_suspends_and_another_host_runs_it(make_host):
    first, second = make_host(), make_host()
    outcome = submitted(first)
    assert calls == []
    (pending,) = outcome.pending
    assert (pending.name, pending.arguments) == ("write_note", {"text": "hi"})
    assert outcome.call is None
    assert kinds(first, outcome.run_id) == ["start", "gate", "suspension"]
    # The other host sees the same waiting call, and decides it.
    seen = second.pending(outcome.run_id)
    assert seen is not None
    assert (seen.turn_digest, seen.pending) == (outcome.turn_digest, outcome.pending)
    done = second.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)
    assert (done.status, done.termination_reason) == ("completed", "completed")
    assert done.call is not None
    assert (done.call.content, done.call.is_error, done.final_content) == (
        "wrote hi",
        False,
        "wrote hi",
    )
    assert calls == ["hi"]
    assert kinds(first, outcome.run_id) == [
        "start",
        "gate",
        "suspension",
        "start",
        "approval",
        "tool",
        "finish",
    ]
    (run,) = first.runs()
    assert (run.kind.value, run.zone, run.status.value) == ("mcp", "local", "completed")
    detail = first.store.get_run(outcome.run_id)
    assert detail is not None
    # The resumed segment says what the run is, as its first did.
    assert detail.steps[3].payload["run_kind"] == "mcp"
    assert detail.steps[3].payload["zone"] == "local"
    assert not first.store.verify(outcome.run_id).broken
    step = approval(first, outcome.run_id)
    assert (step["decision"], step["approver"], step["turn_digest"]) == (
        "approved",
        "bob",
        outcome.turn_digest,
    )


def test_a_denied_call_never_runs(make_host):
    host = make_host()
    outcome = submitted(host)
    done = host.approve(
        outcome.run_id, approve=False, approver="bob", turn_digest=outcome.turn_digest
    )
    assert done.call is not None
    assert (done.call.content, done.call.is_error) == (
        'Error: tool "write_note" was denied by the operator.',
        True,
    )
    assert done.status == "completed"
    assert calls == []
    assert approval(host, outcome.run_id)["decision"] == "denied"


def test_a_call_is_decided_once(make_host):
    first, second = make_host(), make_host()
    outcome = submitted(first)
    first.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)
    with pytest.raises(ApprovalRefused) as refused:
        second.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)
    assert refused.value.reason is RefusalReason.NOT_AWAITING
    assert calls == ["hi"]


@pytest.mark.parametrize("reason", [RefusalReason.CANCELLED, RefusalReason.UNANSWERED])
def test_a_waiting_call_ended_unanswered_or_cancelled_says_which(make_host, reason):
    first, second = make_host(), make_host()
    outcome = submitted(first)
    assert second.cancel(outcome.run_id, by="bob", reason=reason)
    step = approval(first, outcome.run_id)
    assert (step["decision"], step["reason"], step["approver"]) == (
        reason.value,
        reason.value,
        "bob",
    )
    with pytest.raises(ApprovalRefused) as refused:
        first.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)
    assert refused.value.reason is RefusalReason.CANCELLED
    assert calls == []


def test_a_run_is_ended_only_as_cancelled_or_unanswered(make_host):
    host = make_host()
    outcome = submitted(host)
    with pytest.raises(ValueError, match="cancelled or unanswered"):
        host.cancel(outcome.run_id, reason=RefusalReason.FOUR_EYES)
    assert host.pending(outcome.run_id) is not None


def test_a_call_that_needs_no_approval_is_answered_at_once(make_host):
    host = make_host()
    outcome = host.submit("read_secret", {}, zone=TrustZone.LOCAL, kind="mcp")
    assert (outcome.status, outcome.final_content, outcome.pending) == (
        "completed",
        "s3cret",
        (),
    )
    assert outcome.call is not None
    assert outcome.call.content == "s3cret"
    assert kinds(host, outcome.run_id) == ["start", "gate", "tool", "finish"]


def test_a_call_the_gate_refuses_is_refused_without_a_question(make_host):
    host = make_host(tools={"disabled": ["write_note"]})
    outcome = host.submit("write_note", {"text": "hi"}, zone=TrustZone.LOCAL, kind="mcp")
    assert outcome.status == "completed"
    assert outcome.call is not None
    assert outcome.call.is_error
    assert calls == []


def test_the_live_gate_decides_again_when_the_call_is_approved(make_host):
    host = make_host()
    outcome = submitted(host)
    # Meanwhile the tool was switched off: the approval is recorded, the call is not run.
    later = make_host(tools={"disabled": ["write_note"]})
    done = later.approve(outcome.run_id, approver="bob", turn_digest=outcome.turn_digest)
    assert done.call is not None
    assert done.call.content == (
        'Error: tool "write_note" is no longer permitted and was not executed.'
    )
    assert calls == []
    assert approval(host, outcome.run_id)["decision"] == "approved"

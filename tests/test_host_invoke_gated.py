"""Host.invoke for a zone no provider stands for, as a run of another kind, with an approval
asked of a callback (what ``nrllm mcp serve`` builds on)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from nrllm_core import (
    DataClass,
    Effect,
    Host,
    ToolRegistry,
    ToolResult,
    TrustZone,
    hookimpl,
    tool,
)
from nrllm_core.store import RunFilter

# Every test here runs against both drivers: Host as it is, and AsyncHost.
pytestmark = pytest.mark.usefixtures("driven")

calls: list[str] = []


@tool(group="content", name="write_note", effect=Effect.NON_IDEMPOTENT_WRITE)
def write_note(text: str) -> ToolResult:
    """Write a note."""
    calls.append(text)
    return ToolResult.text(f"wrote {text}")


@tool(group="content", name="read_secret", data_class=DataClass.SECRET_ADJACENT)
def read_secret() -> ToolResult:
    """Read a secret."""
    return ToolResult.text("s3cret")


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(write_note)
        registry.register(read_secret)


@pytest.fixture
def host(tmp_path):
    calls.clear()
    made = Host.from_config(
        data={"actor": {"id": "alice"}},
        plugins=[Tools()],
        load_entry_points=False,
        data_dir=tmp_path,
    )
    yield made
    made.store.close()


def test_a_zone_gates_the_call_and_the_run_has_the_kind_given(host):
    refused = host.invoke("read_secret", {}, zone=TrustZone.EXTERNAL_GLOBAL, kind="mcp")
    assert (refused.content, refused.is_error) == ('Error: tool "read_secret" not permitted', True)
    allowed = host.invoke("read_secret", {}, zone=TrustZone.LOCAL, kind="mcp")
    assert allowed.content == "s3cret"
    runs = host.runs()
    assert [r.kind.value for r in runs] == ["mcp", "mcp"]
    assert {r.zone for r in runs} == {"externalGlobal", "local"}
    detail = host.store.get_run(runs[-1].run_id)
    assert detail is not None
    assert detail.decisions[0].reason == "trustZone"


@pytest.mark.parametrize(
    ("asked", "kept"),
    [("we\x00ather", "we\ufffdather"), ("w" * 300, "w" * 255)],
    ids=["nul", "long"],
)
def test_a_call_of_any_name_is_stored_whole_on_every_backend(backend, asked, kept):
    made = Host.from_config(
        data={"actor": {"id": "alice"}, "store": {"url": backend.url}},
        plugins=[Tools()],
        load_entry_points=False,
        data_dir=backend.data_dir,
    )
    try:
        refused = made.invoke(asked, {}, zone=TrustZone.EXTERNAL_GLOBAL, kind="mcp")
        assert refused.is_error is True
        (run,) = made.runs()
        detail = made.store.get_run(run.run_id)
        assert detail is not None
        assert [s.kind for s in detail.steps] == ["start", "gate", "tool", "finish"]
        assert [(d.tool, d.reason) for d in detail.decisions] == [(kept, "notRegistered")]
        assert made.store.verify(run.run_id).broken == ()
    finally:
        made.store.close()


def test_a_nul_in_a_steps_content_is_stored_as_a_replacement_character(backend):
    made = Host.from_config(
        data={
            "actor": {"id": "alice"},
            "store": {"url": backend.url},
            "privacy": {"level": "full"},
        },
        plugins=[Tools()],
        load_entry_points=False,
        data_dir=backend.data_dir,
    )
    try:
        wire = made.invoke(
            "write_note", {"text": "a\x00b"}, zone=TrustZone.LOCAL, approve=lambda p, d: "bob"
        )
        assert wire.content == "wrote a\x00b"
        (run,) = made.runs()
        detail = made.store.get_run(run.run_id)
        assert detail is not None
        (step,) = [s for s in detail.steps if s.kind == "tool"]
        assert step.payload["tool_result"] == "wrote a\ufffdb"
        assert made.store.verify(run.run_id).broken == ()
        # Listed by the tool it called, through the index that reads the payload as JSON.
        assert [r.run_id for r in made.store.list_runs(where=RunFilter(tool="write_note"))] == [
            run.run_id
        ]
    finally:
        made.store.close()


def test_an_approval_is_asked_recorded_and_bound_to_the_call(host):
    asked = []

    def approve(pending, digest):
        asked.append((pending.name, pending.arguments, digest))
        return "bob"

    before = datetime.now(UTC)
    wire = host.invoke(
        "write_note", {"text": "hi"}, zone=TrustZone.LOCAL, kind="mcp", approve=approve
    )
    after = datetime.now(UTC)
    assert wire.content == "wrote hi"
    assert calls == ["hi"]
    ((name, arguments, digest),) = asked
    assert (name, arguments, len(digest)) == ("write_note", {"text": "hi"}, 64)
    (run,) = host.runs()
    detail = host.store.get_run(run.run_id)
    assert detail is not None
    kinds = [s.kind for s in detail.steps]
    assert kinds == ["start", "gate", "approval", "tool", "finish"]
    approval = detail.steps[2].payload
    assert (approval["decision"], approval["approver"], approval["turn_digest"]) == (
        "approved",
        "bob",
        digest,
    )
    # When the person answered, as the approval of a suspended run records it.
    assert before <= datetime.fromisoformat(approval["decided_at"]) <= after


def test_a_denied_approval_runs_nothing(host):
    wire = host.invoke(
        "write_note", {"text": "hi"}, zone=TrustZone.LOCAL, kind="mcp", approve=lambda p, d: None
    )
    assert (wire.content, wire.is_error) == (
        'Error: tool "write_note" was denied by the operator.',
        True,
    )
    assert calls == []
    (run,) = host.runs()
    detail = host.store.get_run(run.run_id)
    assert detail is not None
    assert detail.steps[2].payload["decision"] == "denied"


def test_an_approval_nobody_can_give_refuses_with_the_callbacks_message(host):
    from nrllm_core import NoApprover

    def approve(pending, digest):
        raise NoApprover(f'Error: tool "{pending.name}" needs an approval nobody here can give')

    wire = host.invoke("write_note", {"text": "hi"}, zone=TrustZone.LOCAL, approve=approve)

    assert (wire.content, wire.is_error) == (
        'Error: tool "write_note" needs an approval nobody here can give',
        True,
    )
    assert calls == []
    (run,) = host.runs()
    detail = host.store.get_run(run.run_id)
    assert detail is not None
    approval, tool = detail.steps[2].payload, detail.steps[3].payload
    # Nobody decided: not a person's denial.
    assert (approval["decision"], approval.get("approver")) == ("refused", None)
    assert tool["tool_outcome"] == "refused"


def test_a_tool_the_zone_refuses_is_not_even_asked_about(host):
    asked = []
    host.invoke(
        "write_note",
        {"text": "hi"},
        zone=TrustZone.LOCAL,
        skill="none",
        approve=lambda p, d: asked.append(p) or "bob",
    )
    assert asked == []
    assert calls == []


@pytest.fixture
def four_eyes_host(tmp_path):
    calls.clear()
    made = Host.from_config(
        data={
            "actor": {"id": "alice"},
            "skills": {"desk": {"allowed_tools": ["write_note"], "four_eyes": True}},
        },
        plugins=[Tools()],
        load_entry_points=False,
        data_dir=tmp_path,
    )
    yield made
    made.store.close()


def _approval_of_last_run(host):
    (run,) = host.runs()
    detail = host.store.get_run(run.run_id)
    assert detail is not None
    return next(s.payload for s in detail.steps if s.kind == "approval")


@pytest.mark.parametrize("approver", ["", " ", "\u200b", "\u00ad\u2060"])
def test_a_direct_call_approver_that_names_nobody_is_refused(host, approver):
    wire = host.invoke(
        "write_note", {"text": "hi"}, zone=TrustZone.LOCAL, approve=lambda p, d: approver
    )

    assert wire.is_error
    assert "the approver names nobody" in wire.content
    assert calls == []
    approval = _approval_of_last_run(host)
    assert (approval["decision"], approval.get("approver"), approval["reason"]) == (
        "refused",
        None,
        "no_approver",
    )


@pytest.mark.parametrize("initiator", ["alice", " ALICE", "alice\u200b", "\u0430lice"])
def test_a_direct_call_under_four_eyes_refuses_the_initiator_as_approver(four_eyes_host, initiator):
    wire = four_eyes_host.invoke(
        "write_note",
        {"text": "hi"},
        zone=TrustZone.LOCAL,
        skill="desk",
        approve=lambda p, d: initiator,
    )

    assert wire.is_error
    assert "four-eyes" in wire.content
    assert calls == []
    approval = _approval_of_last_run(four_eyes_host)
    assert (approval["decision"], approval["reason"]) == ("refused", "four_eyes")


def test_a_direct_call_under_four_eyes_runs_when_another_person_approves(four_eyes_host):
    wire = four_eyes_host.invoke(
        "write_note",
        {"text": "hi"},
        zone=TrustZone.LOCAL,
        skill="desk",
        approve=lambda p, d: "bob",
    )

    assert (wire.content, wire.is_error) == ("wrote hi", False)
    approval = _approval_of_last_run(four_eyes_host)
    assert (approval["decision"], approval["approver"]) == ("approved", "bob")
    assert "reason" not in approval


def test_a_callback_names_the_refusal_reason_it_refuses_for(host):
    from nrllm_core import NoApprover, RefusalReason

    def approve(pending, digest):
        raise NoApprover("Error: only the initiator is here", RefusalReason.FOUR_EYES)

    wire = host.invoke("write_note", {"text": "hi"}, zone=TrustZone.LOCAL, approve=approve)

    assert wire.content == "Error: only the initiator is here"
    assert _approval_of_last_run(host)["reason"] == "four_eyes"


@pytest.mark.parametrize(
    ("decision", "reason", "approver"),
    [
        ("cancelled", "cancelled", "bob"),
        ("unanswered", "unanswered", None),
        ("denied", None, "bob"),
    ],
)
def test_a_callback_names_the_outcome_and_who_gave_it(host, decision, reason, approver):
    from nrllm_core import NoApprover, RefusalReason

    def approve(pending, digest):
        why = None if reason is None else RefusalReason(reason)
        raise NoApprover("Error: not run", why, decision=decision, approver=approver)

    wire = host.invoke("write_note", {"text": "hi"}, zone=TrustZone.LOCAL, approve=approve)

    assert (wire.content, calls) == ("Error: not run", [])
    approval = _approval_of_last_run(host)
    assert (approval["decision"], approval.get("approver")) == (decision, approver)
    assert approval.get("reason") == reason


def test_no_approver_takes_only_a_refusal_as_its_decision():
    from nrllm_core import NoApprover

    with pytest.raises(ValueError, match="decision must be one of"):
        NoApprover("Error: x", decision="approved")

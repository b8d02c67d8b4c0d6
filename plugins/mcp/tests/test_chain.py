"""A chain of two nrllm hosts: one host's ``[mcp.servers]`` runs another's ``nrllm mcp
serve``. The downstream host's approval question goes up to the upstream host's person (the
downstream asks by "input required", the upstream's client answers through its run), and
only that person's answer lets the downstream write run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from structlog.testing import capture_logs

from nrllm_core import Host, PersonAnswer, Question, TrustZone

from .test_serve import notes, runs_of


def chain(configure: Any, served: dict[str, str], **settings: Any) -> None:
    # The downstream gateway, started by the upstream host's MCP client over stdio.
    downstream = {
        "command": sys.executable,
        "args": ["-m", "nrllm_core", "mcp", "serve"],
        "env": served,
        "data_class": "publicContent",
        **settings,
    }
    configure({"down": downstream})


def write(home: Path, handler: Any) -> Any:
    host = Host.from_config(data_dir=home, on_elicitation=handler)
    try:
        with capture_logs():
            # The upstream needs its own approval of the write, given here.
            wire = host.invoke(
                "down__write_note",
                {"text": "buy milk"},
                zone=TrustZone.LOCAL,
                approve=lambda pending, digest: "bob",
            )
        (run,) = host.runs()
        detail = host.store.get_run(run.run_id)
        return wire, [s.payload for s in detail.steps if s.kind == "elicitation"]
    finally:
        host.store.close()


def test_the_downstream_approval_is_asked_of_the_upstream_person(configure, served, home):
    chain(configure, served, elicitation=True)
    asked: list[Question] = []

    def handler(question: Question) -> PersonAnswer:
        asked.append(question)
        return PersonAnswer.accepted({})

    wire, elicitations = write(home, handler)
    assert (wire.content, wire.is_error) == ("noted", False)
    assert notes(served) == ["buy milk"]
    (question,) = asked
    assert question.tool == "down__write_note"
    assert "write_note" in question.message
    assert [e["action"] for e in elicitations] == ["accept"]
    ((_, detail),) = runs_of(served)
    approval = next(s for s in detail.steps if s.kind == "approval").payload
    assert (approval["decision"], approval["approver"]) == (
        "approved",
        "alice (through the MCP client)",
    )


def test_a_declined_downstream_approval_runs_nothing(configure, served, home):
    chain(configure, served, elicitation=True)
    wire, elicitations = write(home, lambda question: PersonAnswer.declined())
    assert wire.is_error
    assert notes(served) == []
    assert [e["action"] for e in elicitations] == ["decline"]


def test_without_elicitation_upstream_the_downstream_refuses_clearly(configure, served, home):
    chain(configure, served)
    wire, elicitations = write(home, lambda question: PersonAnswer.accepted({}))
    assert wire.is_error
    assert "needs an approval this client cannot give" in wire.content
    assert notes(served) == []
    assert elicitations == []

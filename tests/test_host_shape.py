"""The host reads as its flows: no module of the core is a monolith, ``AsyncHost`` drives
``Host``'s flows through their named interface only, and a run's status is a ``RunStatus``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import Effect, RunOutcome, RunStatus, ToolContext, ToolResult, store
from nrllm_core.store import Store

from .conftest import Counting, ToolsPlugin

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "nrllm_core"
MOST_LINES = 750


def oversized(folder: Path) -> dict[str, int]:
    """The modules under ``folder`` longer than 750 lines, by path, with their line counts."""
    sizes = {
        str(path.relative_to(folder)): len(path.read_text(encoding="utf-8").splitlines())
        for path in folder.rglob("*.py")
    }
    return {path: n for path, n in sizes.items() if n > MOST_LINES}


def test_no_core_module_exceeds_750_lines():
    assert len(list(CORE.rglob("*.py"))) > 50
    assert oversized(CORE) == {}


def test_the_size_check_sees_a_long_module(tmp_path):
    (tmp_path / "inner").mkdir()
    (tmp_path / "inner" / "big.py").write_text("x = 1\n" * (MOST_LINES + 1), encoding="utf-8")
    (tmp_path / "small.py").write_text("x = 1\n" * MOST_LINES, encoding="utf-8")
    assert oversized(tmp_path) == {str(Path("inner") / "big.py"): MOST_LINES + 1}


def _private_reads(path: Path) -> list[str]:
    """Every ``x._name`` in ``path`` on anything but ``self``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            found.append(f"{ast.unparse(node)} (line {node.lineno})")
    return found


def test_async_host_reaches_for_no_private_member_of_the_host():
    assert _private_reads(CORE / "_async_host.py") == []


def test_the_private_read_check_sees_one(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f(self):\n    return self.host._run_flow, self._own\n")
    assert _private_reads(module) == ["self.host._run_flow (line 2)"]


WRITE_TURN = {"content": "", "tool_calls": [{"id": "c1", "name": "write_note", "arguments": {}}]}


def _plain(outcome: RunOutcome) -> str:
    status = outcome.to_dict()["status"]
    assert type(status) is str
    return status


def test_every_outcome_status_is_a_run_status_and_its_dict_a_plain_string(nrllm):
    nrllm.load(ToolsPlugin(Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)))

    waiting = nrllm.run("go", script=[WRITE_TURN, {"content": "done"}])
    pending = nrllm.host.pending(waiting.run_id)
    assert pending is not None
    done = nrllm.host.approve(waiting.run_id, approver="bob", turn_digest=waiting.turn_digest)

    assert waiting.status is RunStatus.AWAITING_APPROVAL
    assert pending.status is RunStatus.AWAITING_APPROVAL
    assert done.status is RunStatus.COMPLETED
    assert [_plain(o) for o in (waiting, pending, done)] == [
        "awaiting_approval",
        "awaiting_approval",
        "completed",
    ]
    assert json.loads(json.dumps(done.to_dict()))["status"] == "completed"


def test_a_failed_run_reports_the_failed_run_status(nrllm, monkeypatch):
    nrllm.load(ToolsPlugin(Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE)))

    def broken(*args: Any, **kwargs: Any) -> None:
        raise OSError("disk unplugged")

    monkeypatch.setattr(Store, "suspend_run", broken)
    unsuspended = nrllm.run("go", script=[WRITE_TURN])
    monkeypatch.setattr(Store, "record_decisions", broken)
    crashed = nrllm.run("go", script=[{"content": "never"}])

    for outcome, reason in ((unsuspended, "suspend_failed"), (crashed, "internal_error")):
        assert (outcome.status, outcome.termination_reason) == (RunStatus.FAILED, reason)
        assert outcome.status is RunStatus.FAILED
        assert _plain(outcome) == "failed"


def test_a_cancelled_run_reports_the_cancelled_run_status(nrllm):
    class Cancelling(Counting):
        def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
            nrllm.host.cancel(context.run_id)
            return super().execute(arguments, context)

    nrllm.load(ToolsPlugin(Cancelling("lookup")))
    turn = {"content": "", "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {}}]}

    outcome = nrllm.run("go", script=[turn, {"content": "never asked"}])

    assert outcome.status is RunStatus.CANCELLED
    assert _plain(outcome) == "cancelled"


def test_an_outcome_status_given_as_a_string_is_checked():
    made = RunOutcome(run_id="r", status="failed", termination_reason=None, final_content="")
    assert made.status is RunStatus.FAILED
    assert (
        RunOutcome(run_id="r", status=None, termination_reason=None, final_content="").status
        is None
    )
    with pytest.raises(ValueError, match="finished"):
        RunOutcome(run_id="r", status="finished", termination_reason=None, final_content="")


def test_run_status_is_one_enum_that_loads_without_the_store():
    code = (
        "import json, sys, nrllm_core; s = nrllm_core.RunStatus.COMPLETED; "
        "print(json.dumps(['sqlalchemy' in sys.modules, s.value]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert json.loads(done.stdout) == [False, "completed"]
    assert RunStatus is store.RunStatus

"""An approval: a person's decision on a suspended turn, claimed once and written to the
audit before anything runs, then the run resumed from that turn (a submitted direct call's
run: its one call, with no model)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from nrllm_core._config import HostConfig
from nrllm_core._direct_flow import resumed_call
from nrllm_core._gate import live_gate
from nrllm_core._loop import SuspendedRunState, TerminationReason, resumed_segment
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import TraceEvent
from nrllm_core._recorder import RunRecorder
from nrllm_core._segment import (
    Flow,
    HostParts,
    approval_step,
    failed,
    start_step,
)

__all__ = ["approval_flow"]


def approval_flow(
    parts: HostParts,
    run_id: str,
    *,
    approve: bool,
    approver: str,
    turn_digest: str | None,
    on_event: Callable[[TraceEvent], None] | None = None,
    deps: Any = None,
) -> Flow[RunOutcome]:
    """Claim the turn (an approval that cannot be applied raises ``ApprovalRefused`` before
    anything is recorded), then resume the run with the decision."""
    config = parts.config
    claim = parts.suspensions.claim(
        config, run_id, approve=approve, approver=approver, turn_digest=turn_digest
    )
    state = claim.state
    recorder = parts.recorder(
        config, run_id, first_sequence=parts.store.last_sequence(run_id) + 1, on_event=on_event
    )
    zone = state.zone if state.kind != "run" else config.zone_for(state.provider)
    start = functools.partial(
        start_step,
        config,
        state.kind,
        None if zone is None else zone.value,
        provider=state.provider,
        skill=state.skill,
        trace_context=claim.trace_context,
    )
    body = _resume_segment(parts, recorder, config, state, approve, approver, deps)
    return (yield from parts.segment(recorder, start, body))


def _resume_segment(
    parts: HostParts,
    recorder: RunRecorder,
    config: HostConfig,
    state: SuspendedRunState,
    approve: bool,
    approver: str,
    deps: Any,
) -> Flow[RunOutcome]:
    run_id = recorder.run_id
    audited = recorder.record(
        approval_step(
            round=state.iterations,
            approved=approve,
            approver=approver,
            turn_digest=state.digest,
            decided_at=parts.clock(),
        )
    )
    actor = state.actor
    if not audited:
        outcome = failed(
            run_id, "the approval could not be written to the audit; nothing was executed"
        )
        return parts.settle(recorder, config, outcome, reason=TerminationReason.AUDIT_UNAVAILABLE)
    if state.kind != "run":
        return (yield from resumed_call(parts, recorder, config, state, approve, deps))
    report = parts.gate(config, provider=state.provider, skill=state.skill, actor=actor)
    catalog = parts.pm.catalog()
    permits = live_gate(
        parts.pm, parts.load, provider=state.provider, skill=state.skill, actor=actor
    )
    core = resumed_segment(
        pm=parts.pm,
        state=state,
        approved=approve,
        offered=[catalog.tools[n] for n in report.offered_names if n in catalog.tools],
        permits=permits,
        context_for=parts.context_for(recorder, actor, config, deps),
        limits=config.run,
        zone=report.zone,
        policy=config.policy,
    )
    return (yield from parts.driven(recorder, config, state.provider, core))

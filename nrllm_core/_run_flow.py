"""A run: a prompt gated, recorded and driven to its answer, or to a turn that waits for a
person."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from nrllm_core._approval_flow import approval_flow
from nrllm_core._config import HostConfig
from nrllm_core._gate import GateReport, gate_step, live_gate
from nrllm_core._invoke import new_run_id
from nrllm_core._loop import PendingCall, clamp_rounds, first_segment
from nrllm_core._messages import ChatMessage
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import TraceEvent
from nrllm_core._recorder import RunRecorder
from nrllm_core._segment import (
    Flow,
    HostParts,
    decision_records,
    names,
    start_step,
)
from nrllm_core._values import Actor

__all__ = ["run_flow"]


def run_flow(
    parts: HostParts,
    prompt: str,
    *,
    provider: str | None = None,
    skill: str | None = None,
    max_rounds: int | None = None,
    actor: Actor | None = None,
    system: str | None = None,
    on_event: Callable[[TraceEvent], None] | None = None,
    deps: Any = None,
    approve: Callable[[tuple[PendingCall, ...], str], str | None] | None = None,
) -> Flow[RunOutcome]:
    """Start the run (a bad prompt, provider or skill raises before anything is recorded),
    then its first segment. With ``approve``, each turn the run suspends on is put to
    ``approve(pending, turn_digest)``, and an approver it names resumes the run in this same
    flow, through the approval every other one goes through (the one approver rule, recorded
    before anything runs; a refused approver raises ``ApprovalRefused``, the run still
    suspended). ``None`` leaves the run suspended."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("the prompt is empty")
    config = parts.config
    actor = actor or config.actor()
    provider_name = parts.provider_name(config, provider)
    if skill is not None and skill not in config.skills:
        raise ValueError(
            f'no skill named "{skill}" is configured (configured: {names(config.skills)})'
        )
    rounds = clamp_rounds(max_rounds, default=config.run.max_rounds, cap=config.run.max_rounds_cap)
    run_id = new_run_id()
    # Made before the gate decides: it hands each plugin its settings, which the gate's hooks
    # may read.
    recorder = parts.recorder(config, run_id, on_event=on_event)
    report = parts.gate(config, provider=provider_name, skill=skill, actor=actor)
    parts.store.start_run(
        run_id, provider=provider_name, zone=report.zone.value, skill=skill, actor=actor.id
    )
    start = functools.partial(
        start_step, config, "run", report.zone.value, provider=provider_name, skill=skill
    )
    body = _first_segment(parts, recorder, config, report, prompt, system, rounds, actor, deps)
    outcome = yield from parts.segment(recorder, start, body)
    while approve is not None and outcome.turn_digest is not None:
        approver = approve(outcome.pending, outcome.turn_digest)
        if approver is None:
            break
        outcome = yield from approval_flow(
            parts,
            run_id,
            approve=True,
            approver=approver,
            turn_digest=outcome.turn_digest,
            on_event=on_event,
            deps=deps,
        )
    return outcome


def _first_segment(
    parts: HostParts,
    recorder: RunRecorder,
    config: HostConfig,
    report: GateReport,
    prompt: str,
    system: str | None,
    rounds: int,
    actor: Actor,
    deps: Any,
) -> Flow[RunOutcome]:
    provider_name, skill = report.provider, report.skill
    run_id = recorder.run_id
    recorder.record(gate_step(report))
    # Like the gate's step, its decisions guard nothing: the first request, the run's first
    # guarded write, commits them.
    parts.store.record_decisions(run_id, decision_records(report), deferred=True)
    messages = [ChatMessage.system(system)] if system else []
    messages.append(ChatMessage.user(prompt))
    catalog = parts.pm.catalog()
    permits = live_gate(parts.pm, parts.load, provider=provider_name, skill=skill, actor=actor)
    core = first_segment(
        pm=parts.pm,
        run_id=run_id,
        provider_name=provider_name,
        skill=skill,
        messages=messages,
        offered=[catalog.tools[n] for n in report.offered_names if n in catalog.tools],
        permits=permits,
        context_for=parts.context_for(recorder, actor, config, deps),
        actor=actor,
        max_rounds=rounds,
        limits=config.run,
        zone=report.zone,
        policy=config.policy,
    )
    return (yield from parts.driven(recorder, config, provider_name, core))

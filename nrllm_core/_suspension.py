"""A turn that waits for a person: sealed when the run suspends, opened only while the turn
is open, bound to its run and its turn, and claimed once, by someone four-eyes allows."""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, final

import attrs

from nrllm_core import _json
from nrllm_core._config import HostConfig
from nrllm_core._identity import NAMES_NOBODY, names_nobody
from nrllm_core._loop import SuspendedRunState
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import RunStep, StepKind
from nrllm_core._sealing import SealError, load_state_key, open_sealed, seal
from nrllm_core._status import RunStatus
from nrllm_core._values import Actor
from nrllm_core.log import logger

if TYPE_CHECKING:
    from nrllm_core.store import Store

__all__ = [
    "ApprovalRefused",
    "Claim",
    "RefusalReason",
    "Review",
    "Suspensions",
    "check_approver",
    "suspension_step",
]


class RefusalReason(enum.StrEnum):
    """Why an approval was refused."""

    NOT_AWAITING = "not_awaiting"
    NO_DIGEST = "no_digest"
    DIGEST_MISMATCH = "digest_mismatch"
    UNOPENABLE = "unopenable"
    EXPIRED = "expired"
    STALE = "stale"
    TAMPERED = "tampered"
    FOUR_EYES = "four_eyes"
    NO_APPROVER = "no_approver"
    ALREADY_DECIDED = "already_decided"
    REPLAYED = "replayed"
    CANCELLED = "cancelled"
    UNANSWERED = "unanswered"


class ApprovalRefused(Exception):
    """An approval that cannot be applied: unknown run, not waiting, stale digest, four-eyes,
    an expired or stale turn, a run whose audit chain does not hold (tampered), a replayed
    state. ``reason`` says which; the message is safe to show."""

    def __init__(self, message: str, reason: RefusalReason) -> None:
        super().__init__(message)
        self.reason = reason


@final
@attrs.frozen(kw_only=True)
class Claim:
    """A decided turn: the state claimed, and the trace context stored with the turn."""

    state: SuspendedRunState
    trace_context: Mapping[str, str] | None


@final
@attrs.frozen(kw_only=True)
class Suspensions:
    """The suspended turns of one host: its store, the state key (from its data folder or
    environment) and its clock."""

    store: Store
    data_dir: Path
    environ: Mapping[str, str]
    clock: Callable[[], datetime]

    def suspend(
        self,
        run_id: str,
        state: SuspendedRunState,
        *,
        ttl_seconds: float,
        trace_context: Mapping[str, str] | None,
    ) -> None:
        """Seal the turn, open for ``ttl_seconds``, and park the run on it."""
        turn = _SealedTurn(
            state=state,
            last_sequence=self.store.last_sequence(run_id),
            expires_at=self.clock() + timedelta(seconds=ttl_seconds),
        )
        key = load_state_key(self.data_dir, dict(self.environ))
        sealed = seal(key, _binding(run_id, state.digest), _turn_to_json(turn))
        self.store.suspend_run(
            run_id,
            sealed=sealed,
            turn_digest=state.digest,
            trace_context=trace_context,
            expires_at=turn.expires_at,
        )

    def pending(self, run_id: str, *, content_kept: bool = False) -> RunOutcome | None:
        """The suspended turn of ``run_id`` as an outcome, or ``None``; refused when its state
        cannot be opened, has expired or is stale. ``content_kept``: the host's privacy level
        keeps content, so the excerpts of untrusted results are shown."""
        turn = self._pending_turn(run_id)
        return None if turn is None else _outcome(run_id, turn, content_kept)

    def review(
        self, config: HostConfig, run_id: str, *, person: str, content_kept: bool = False
    ) -> Review | None:
        """The suspended turn of ``run_id`` as ``person`` would decide it: the turn, when it
        expires, and what :func:`check_approver` says of that person approving or denying it
        now. ``None`` and refusals as :meth:`pending`. The rule is the claim's own, so what
        a page offers is what a decision would get (the claim checks again: this is a view)."""
        turn = self._pending_turn(run_id)
        if turn is None:
            return None
        state = turn.state
        refusals: list[ApprovalRefused | None] = []
        for approve in (True, False):
            try:
                check_approver(
                    config,
                    person,
                    approve=approve,
                    initiator=state.actor,
                    provider=state.provider,
                    skill=state.skill,
                )
            except ApprovalRefused as exc:
                refusals.append(exc)
            else:
                refusals.append(None)
        return Review(
            outcome=_outcome(run_id, turn, content_kept),
            expires_at=turn.expires_at,
            approve_refused=refusals[0],
            deny_refused=refusals[1],
        )

    def _pending_turn(self, run_id: str) -> _SealedTurn | None:
        """The open sealed turn of ``run_id``, or ``None`` when it waits on none."""
        suspension = self.store.suspension(run_id)
        if suspension is None:
            return None
        key = self._state_key(run_id)
        turn = self._open_turn(run_id, suspension.turn_digest, suspension.sealed, key)
        self._check_open(run_id, turn)
        return turn

    def claim(
        self,
        config: HostConfig,
        run_id: str,
        *,
        approve: bool,
        approver: str,
        turn_digest: str | None,
    ) -> Claim:
        """Decide the turn named by ``turn_digest``, once: the turn must wait and be open, and
        the approver pass :func:`check_approver`."""
        suspension = self.store.suspension(run_id)
        if suspension is None:
            raise self._not_awaiting(run_id)
        if not turn_digest:
            raise ApprovalRefused(
                "an approval must name the turn digest it approves", RefusalReason.NO_DIGEST
            )
        if suspension.turn_digest != turn_digest:
            raise ApprovalRefused(
                "the digest does not match the pending turn; it may be stale",
                RefusalReason.DIGEST_MISMATCH,
            )
        key = self._state_key(run_id)
        state = self._open_state(run_id, turn_digest, suspension.sealed, key)
        check_approver(
            config,
            approver,
            approve=approve,
            initiator=state.actor,
            provider=state.provider,
            skill=state.skill,
        )
        from nrllm_core.store import ClaimRefused

        # Claiming is atomic across processes: a second approval of the same turn, or of a
        # state whose nonce was consumed before, fails here, and the state resumed is the one
        # claimed, read in the claiming transaction.
        try:
            sealed = self.store.claim_suspension(
                run_id,
                turn_digest=turn_digest,
                nonce=state.nonce,
                decision="approved" if approve else "denied",
                approver=approver,
            )
        except ClaimRefused as exc:
            raise ApprovalRefused(str(exc), RefusalReason(exc.reason)) from None
        # The claimed state itself, not checked for its turn again: the claim decided that.
        claimed = self._open_turn(run_id, turn_digest, sealed, key).state
        return Claim(state=claimed, trace_context=suspension.trace_context)

    def cancel(self, run_id: str, *, by: str) -> str | None:
        """End the suspended run ``run_id``, cancelled by ``by`` (who must name somebody):
        the digest of the turn it waited on, or ``None`` when it waits on none. Its state is
        never opened, so an expired or unopenable turn can be ended too."""
        if names_nobody(by):
            raise ApprovalRefused(f"the canceller {NAMES_NOBODY}", RefusalReason.NO_APPROVER)
        suspension = self.store.suspension(run_id)
        if suspension is None or not self.store.cancel_suspension(run_id, by=by):
            return None
        logger().info("nrllm.run.cancelled_suspended", run_id=run_id)
        return suspension.turn_digest

    def _not_awaiting(self, run_id: str) -> ApprovalRefused:
        detail = self.store.get_run(run_id)
        if detail is not None and detail.run.status is RunStatus.CANCELLED:
            return ApprovalRefused(
                f'run "{run_id}" was cancelled; it can no longer be decided',
                RefusalReason.CANCELLED,
            )
        return ApprovalRefused(
            f'run "{run_id}" is not awaiting approval', RefusalReason.NOT_AWAITING
        )

    def _open_state(
        self, run_id: str, turn_digest: str, sealed: bytes, key: bytes
    ) -> SuspendedRunState:
        """The state sealed for this run and this turn, while its turn is still open.

        A state whose expiry has passed does not open, nor one whose run has any step after
        the suspension: that turn is over, whatever the database says. The run's steps are
        only counted once its audit chain holds: steps deleted to make a decided turn look
        open again break it.
        """
        turn = self._open_turn(run_id, turn_digest, sealed, key)
        self._check_open(run_id, turn)
        return turn.state

    def _check_open(self, run_id: str, turn: _SealedTurn) -> None:
        """Refuse a turn that is over: expired, on a tampered run, or stale."""
        if self.clock() >= turn.expires_at:
            raise ApprovalRefused(
                f"the suspended turn expired at {turn.expires_at.isoformat()}; "
                "it can no longer be decided",
                RefusalReason.EXPIRED,
            )
        broken = self.store.verify(run_id).broken
        if broken:
            (first,) = broken
            logger().warning(
                "nrllm.run.chain_broken",
                run_id=run_id,
                sequence=first.sequence,
                problem=first.problem.value,
            )
            raise ApprovalRefused(
                f"the run's audit chain does not hold (tampered: broken at step "
                f"{first.sequence}, {first.problem.value}); the turn cannot be decided",
                RefusalReason.TAMPERED,
            )
        if self.store.last_sequence(run_id) > turn.last_sequence:
            logger().warning("nrllm.run.state_stale", run_id=run_id)
            raise ApprovalRefused(
                "the suspended turn is stale: the run has steps after it", RefusalReason.STALE
            )

    def _state_key(self, run_id: str) -> bytes:
        """The state key, read once per decision (a missing or unreadable one: unopenable)."""
        try:
            return load_state_key(self.data_dir, dict(self.environ))
        except (SealError, OSError, ValueError) as exc:
            raise _unopenable(run_id, exc) from None

    def _open_turn(self, run_id: str, turn_digest: str, sealed: bytes, key: bytes) -> _SealedTurn:
        """What was sealed for this run and this turn. A state from another run or another
        turn of this run does not open: a refusal that never shows why (the log does)."""
        try:
            turn = _turn_from_json(open_sealed(key, _binding(run_id, turn_digest), sealed))
        except (SealError, OSError, ValueError, KeyError, TypeError, BaseExceptionGroup) as exc:
            raise _unopenable(run_id, exc) from None
        if turn.state.run_id != run_id or turn.state.digest != turn_digest:
            logger().warning("nrllm.run.state_mismatch", run_id=run_id)
            raise ApprovalRefused("the suspended state cannot be opened", RefusalReason.UNOPENABLE)
        return turn


@final
@attrs.frozen(kw_only=True)
class Review:
    """A suspended turn as one person would decide it (see :meth:`Suspensions.review`)."""

    outcome: RunOutcome
    # When the turn stops being decidable: sealed with it, so a changed TTL does not move it.
    expires_at: datetime
    # Why this person may not approve, or deny, the turn now; ``None`` when they may.
    approve_refused: ApprovalRefused | None
    deny_refused: ApprovalRefused | None


def _outcome(run_id: str, turn: _SealedTurn, content_kept: bool) -> RunOutcome:
    state = turn.state
    return RunOutcome(
        run_id=run_id,
        status=RunStatus.AWAITING_APPROVAL,
        termination_reason=None,
        final_content="",
        pending=state.pending,
        turn_digest=state.digest,
        usage=state.usage,
        untrusted=state.turn_label.shown(content_kept),
    )


def _unopenable(run_id: str, error: BaseException) -> ApprovalRefused:
    logger().warning("nrllm.run.state_unopenable", run_id=run_id, error=type(error).__name__)
    return ApprovalRefused("the suspended state cannot be opened", RefusalReason.UNOPENABLE)


def suspension_step(state: SuspendedRunState) -> RunStep:
    """The turn that waits: its calls by id and name and the digest an approval must name. No
    arguments, no previews. The name is masked and bounded like any audited name; the id, as
    every call id, by the privacy view below ``full``, so that it still matches its call's."""
    from nrllm_core.redact import redact

    return RunStep(
        kind=StepKind.SUSPENSION,
        round=state.iterations,
        duration_ms=0.0,
        fields={
            "turn_digest": state.digest,
            "pending_calls": [
                {
                    "id": p.call_id,
                    "name": redact(p.name),
                    "requires_approval": p.requires_approval,
                    # Why the policy sent it to a person, when it did.
                    **({} if p.policy_reason is None else {"policy_reason": p.policy_reason}),
                }
                for p in state.pending
            ],
            # What the model had read when it asked: why the policy may have stepped in.
            "label": state.turn_label.audited(),
        },
    )


def check_approver(
    config: HostConfig,
    approver: str,
    *,
    approve: bool,
    initiator: Actor,
    provider: str | None,
    skill: str | None,
) -> None:
    """The one rule for who may decide a call, in a run, a direct call or an MCP call: the
    approver names somebody, and under four-eyes an approval comes from someone other than
    the initiator (a denial may come from anyone). :class:`ApprovalRefused` says which."""
    if names_nobody(approver):
        raise ApprovalRefused(f"the approver {NAMES_NOBODY}", RefusalReason.NO_APPROVER)
    # Four-eyes refuses, so look-alikes count as the initiator.
    if (
        approve
        and config.four_eyes(provider, skill)
        and initiator.same_person_for_refusal(approver)
    ):
        raise ApprovalRefused(
            "four-eyes: the approver must differ from the run's initiator",
            RefusalReason.FOUR_EYES,
        )


@final
@attrs.frozen(kw_only=True)
class _SealedTurn:
    """What a suspension seals: the run's state, and how long that turn stays open."""

    state: SuspendedRunState
    # The run's last stored step at suspension: a run with any later step is past this turn.
    last_sequence: int
    expires_at: datetime


@functools.cache
def _state_converter() -> Any:
    """The one converter at the suspension boundary (cattrs loads on first use)."""
    from cattrs.preconf.json import make_converter

    return make_converter(forbid_extra_keys=True)


def _turn_to_json(turn: _SealedTurn) -> bytes:
    return _json.dumps(_state_converter().unstructure(turn))


def _turn_from_json(data: bytes) -> _SealedTurn:
    turn: _SealedTurn = _state_converter().structure(_json.loads(data), _SealedTurn)
    if turn.expires_at.tzinfo is None:
        raise ValueError("a sealed expiry must carry its timezone")
    return turn


def _binding(run_id: str, turn_digest: str) -> str:
    """What a sealed state is bound to: its run and its turn."""
    return f"{run_id}:{turn_digest}"

"""The host's flows as its two drivers see them: ``Host`` walks them on the caller's thread,
``AsyncHost`` on an event loop; neither decides anything the flows do not."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypedDict, Unpack, final

from nrllm_core._approval_flow import approval_flow
from nrllm_core._direct_flow import InvokeOptions, SubmitOptions, direct_flow, submit_flow
from nrllm_core._drive import Cancellation
from nrllm_core._loop import PendingCall, TerminationReason
from nrllm_core._outcome import RunOutcome
from nrllm_core._payloads import TraceEvent, WirePayload
from nrllm_core._run_flow import run_flow
from nrllm_core._segment import Flow, HostParts, approval_step
from nrllm_core._status import RunStatus
from nrllm_core._suspension import RefusalReason
from nrllm_core._values import Actor
from nrllm_core.log import logger

__all__ = ["Flows", "RunOptions"]


class RunOptions(TypedDict, total=False):
    """The keyword arguments of ``run`` and ``stream``, each optional: ``provider``,
    ``skill``, ``max_rounds``, ``actor``, ``system``, ``on_event``, ``deps`` and
    ``approve``."""

    provider: str | None
    skill: str | None
    max_rounds: int | None
    actor: Actor | None
    system: str | None
    on_event: Callable[[TraceEvent], None] | None
    deps: Any
    approve: Callable[[tuple[PendingCall, ...], str], str | None] | None


@final
class Flows:
    """A host's runs, approvals and direct calls, each a :data:`Flow` to walk, and the runs
    being driven now, which ``cancel`` reaches from any thread."""

    __slots__ = ("_running", "_running_lock", "parts")

    def __init__(self, parts: HostParts) -> None:
        self.parts = parts
        self._running: dict[str, Cancellation] = {}
        self._running_lock = threading.Lock()

    def run(self, prompt: str, **options: Unpack[RunOptions]) -> Flow[RunOutcome]:
        return run_flow(self.parts, prompt, **options)

    def approve(
        self,
        run_id: str,
        *,
        approve: bool,
        approver: str,
        turn_digest: str | None,
        on_event: Callable[[TraceEvent], None] | None,
        deps: Any,
    ) -> Flow[RunOutcome]:
        return approval_flow(
            self.parts,
            run_id,
            approve=approve,
            approver=approver,
            turn_digest=turn_digest,
            on_event=on_event,
            deps=deps,
        )

    def invoke(
        self, tool_name: str, arguments: Mapping[str, Any], **options: Unpack[InvokeOptions]
    ) -> Flow[WirePayload]:
        return direct_flow(self.parts, tool_name, arguments, **options)

    def submit(
        self, tool_name: str, arguments: Mapping[str, Any], **options: Unpack[SubmitOptions]
    ) -> Flow[RunOutcome]:
        return submit_flow(self.parts, tool_name, arguments, **options)

    @contextlib.contextmanager
    def cancellable(self, run_id: str) -> Iterator[Cancellation]:
        """The cancellation of ``run_id`` while a driver drives one of its loop cores."""
        cancellation = Cancellation()
        with self._running_lock:
            self._running[run_id] = cancellation
        try:
            yield cancellation
        finally:
            with self._running_lock:
                self._running.pop(run_id, None)

    def cancel(
        self,
        run_id: str,
        *,
        by: str | None = None,
        reason: RefusalReason = RefusalReason.CANCELLED,
    ) -> bool:
        """Cancel the run of that id being driven now, else end it if it is suspended (``by``,
        default the configured actor, is recorded as who did, and ``reason`` as the decision:
        ``cancelled``, or ``unanswered`` for a question nobody answered); ``False`` when
        neither."""
        if reason not in _ENDINGS:
            raise ValueError(f"a run is ended as cancelled or unanswered, not {reason.value}")
        with self._running_lock:
            cancellation = self._running.get(run_id)
        if cancellation is not None:
            logger().info("nrllm.run.cancel_requested", run_id=run_id)
            cancellation.cancel()
            return True
        parts = self.parts
        config = parts.config
        by = config.actor().id if by is None else by
        digest = parts.suspensions.cancel(run_id, by=by)
        if digest is None:
            return False
        parts.kept.discard(run_id)
        recorder = parts.recorder(
            config, run_id, first_sequence=parts.store.last_sequence(run_id) + 1
        )
        recorder.record(
            approval_step(
                round=0,
                approved=False,
                approver=by,
                turn_digest=digest,
                decided_at=parts.clock(),
                reason=reason.value,
                decision=reason.value,
            )
        )
        # The run settled with the cancellation; this settles nothing and commits the step.
        parts.finish(recorder, RunStatus.CANCELLED, TerminationReason.CANCELLED)
        return True


# How a suspended run can be ended without a decision on its turn.
_ENDINGS = frozenset({RefusalReason.CANCELLED, RefusalReason.UNANSWERED})

"""The caps of one model turn: how many calls it may make, that each call's id is its own,
and how large each call's arguments may be."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence

from nrllm_core import _json
from nrllm_core._config import RunConfig
from nrllm_core._messages import ToolCall

__all__ = ["turn_caps"]


def turn_caps(limits: RunConfig, calls: Sequence[ToolCall]) -> list[str | None]:
    """The fixed answer of each call a cap of the turn refuses (``None``: not refused).

    Applied before the approval scan: a refused call never runs, shows no preview and never
    makes its turn wait for a person. A turn's decisions, approvals and answers are keyed by
    call id, so calls that share one are all refused: none can borrow another's decision.
    """
    shared = {i for i, n in Counter(call.id for call in calls).items() if n > 1}
    refusals: list[str | None] = []
    for index, call in enumerate(calls):
        if index >= limits.max_tool_calls_per_turn:
            refusals.append(
                f"Error: too many tool calls in one turn (limit {limits.max_tool_calls_per_turn})"
            )
        elif call.id in shared:
            refusals.append("Error: another call of this turn has the same id")
        elif _argument_bytes(call) > limits.max_argument_bytes:
            refusals.append(
                f"Error: the arguments of this call exceed {limits.max_argument_bytes} bytes"
            )
        else:
            refusals.append(None)
    return refusals


def _argument_bytes(call: ToolCall) -> int:
    try:
        return len(_json.dumps(dict(call.arguments)))
    except _json.EncodeError:
        # Arguments with no canonical JSON form (a provider plugin's own values) have no size
        # to measure: they count as too large, so the call is refused (fail closed).
        return sys.maxsize

"""How ``nrllm mcp serve`` asks the person at the client about a call that needs approval.

Up to 2025-11-25 the server sends an ``elicitation/create`` request during the call. From
2026-07-28 on there is no such back channel, and HTTP is stateless: the call is submitted
(``Host.submit``), so its run suspends into the store on the call, sealed as any suspended
turn; the call answers "input required" with the question and a request state naming the run
and its turn digest, and the client calls again with the answer and that state. The second
round may reach any instance that shares the store and the state key.

The request state comes back from the client, so it is treated as hostile: it only names a
waiting turn (the digest holds the suspension's 128 random bits, so it cannot be guessed), and
the turn decides everything else: its sealed state must open with the state key, the call
must be the one that waits (tool and arguments) and the caller the person whose call it is;
the turn expires and is decided once, as any approval. Nothing runs on a refused state.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from nrllm_core import NoApprover, RefusalReason

__all__ = [
    "APPROVAL_REQUEST",
    "APPROVER_SUFFIX",
    "decided",
    "question",
    "refusal",
    "request_state",
    "waiting_turn",
]

APPROVER_SUFFIX: Final = "(through the MCP client)"
# The key of the one input request nrllm sends: the approval question.
APPROVAL_REQUEST: Final = "nrllm_approval"
# The most of a call's arguments the question shows.
_MAX_ARGUMENTS_CHARS: Final = 2000
_VERSION: Final = "v2"
# A run id (a UUID's hex) and a SHA-256 digest, and nothing else.
_STATE: Final = re.compile(r"v2\.([0-9a-f]{32})\.([0-9a-f]{64})")


def request_state(run_id: str, digest: str) -> str:
    """The request state of a suspended call: its run and its turn."""
    return f"{_VERSION}.{run_id}.{digest}"


def waiting_turn(state: object) -> tuple[str, str] | None:
    """The run and the turn digest ``state`` names, or ``None`` when it is not a state."""
    if not isinstance(state, str):
        return None
    match = _STATE.fullmatch(state)
    return None if match is None else (match[1], match[2])


def question(pending: Any, digest: str) -> str:
    """What the person is asked: the tool, its arguments (the client sent them: nothing new
    to it), the tool's preview and the turn digest."""
    try:
        shown = json.dumps(pending.arguments, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        shown = "(not JSON)"
    if len(shown) > _MAX_ARGUMENTS_CHARS:
        shown = shown[:_MAX_ARGUMENTS_CHARS] + " …"
    lines = [f'nrllm asks for approval: tool "{pending.name}"', f"arguments: {shown}"]
    lines += pending.preview
    lines.append(f"turn digest: {digest}")
    return "\n".join(lines)


def decided(name: str, action: str | None, approver: str) -> str:
    """The approver for ``accept``; otherwise raises the refusal (see :func:`refusal`)."""
    if action == "accept":
        return approver
    raise refusal(name, action, approver)


def refusal(name: str, action: str | None, approver: str) -> NoApprover:
    """An answer that is not ``accept``, one outcome each: a person's ``decline`` is a
    denial, ``cancel`` a cancelled question, anything else (a failed, malformed, expired or
    missing answer) a question nobody answered."""
    if action == "decline":
        return NoApprover(
            f'Error: tool "{name}" was denied by the operator.',
            None,
            decision="denied",
            approver=approver,
        )
    if action == "cancel":
        return NoApprover(
            f'Error: tool "{name}" was not run: the approval was cancelled.',
            RefusalReason.CANCELLED,
            decision="cancelled",
            approver=approver,
        )
    return NoApprover(
        f'Error: tool "{name}" was not run: the approval went unanswered.',
        RefusalReason.UNANSWERED,
        decision="unanswered",
    )

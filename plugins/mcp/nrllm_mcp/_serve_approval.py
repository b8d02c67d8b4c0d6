"""How ``nrllm mcp serve`` asks the person at the client about a call that needs approval.

Up to 2025-11-25 the server sends an ``elicitation/create`` request during the call. From
2026-07-28 on there is no such back channel: the call answers "input required" with the same
question, and the client calls again with the answer and the request state it was given
(Multi Round-Trip Requests). Between the two rounds the run waits in this process, as it
waits for an elicitation's answer on the older revisions; the request state names it.

The request state comes back from the client, so it is treated as hostile: it is
authenticated with a key this process made (a state minted by another process, or before a
restart, names no waiting run and is refused), bound to the run, the turn digest, the tool
and its arguments, expires, and is used once. Nothing runs on a refused state.
"""

from __future__ import annotations

import base64
import concurrent.futures
import hashlib
import hmac
import json
import secrets
import threading
import time
from typing import Any, Final, final

from nrllm_core import NoApprover, RefusalReason

__all__ = [
    "APPROVAL_REQUEST",
    "APPROVER_SUFFIX",
    "Parked",
    "Waiting",
    "arguments_digest",
    "decided",
    "question",
]

APPROVER_SUFFIX: Final = "(through the MCP client)"
# The key of the one input request nrllm sends: the approval question.
APPROVAL_REQUEST: Final = "nrllm_approval"
# How long a call waits for its second round at most, whatever [approvals] ttl_seconds says:
# a waiting call holds a thread.
MAX_WAIT_SECONDS: Final = 900
# How many calls may wait for their second round at once; more are refused unasked.
MAX_WAITING: Final = 32
# A request state longer than this is refused before it is parsed.
_MAX_STATE_CHARS: Final = 2048
# The most of a call's arguments the question shows.
_MAX_ARGUMENTS_CHARS: Final = 2000
_VERSION: Final = "v1"
_LABEL: Final = b"nrllm mcp serve approval v1\x00"


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
    """The approver for ``accept``; otherwise the refusal, one outcome each: a person's
    ``decline`` is a denial, ``cancel`` a cancelled question, anything else (a failed,
    malformed, expired or missing answer) a question nobody answered."""
    if action == "accept":
        return approver
    if action == "decline":
        raise NoApprover(
            f'Error: tool "{name}" was denied by the operator.',
            None,
            decision="denied",
            approver=approver,
        )
    if action == "cancel":
        raise NoApprover(
            f'Error: tool "{name}" was not run: the approval was cancelled.',
            RefusalReason.CANCELLED,
            decision="cancelled",
            approver=approver,
        )
    raise NoApprover(
        f'Error: tool "{name}" was not run: the approval went unanswered.',
        RefusalReason.UNANSWERED,
        decision="unanswered",
    )


def arguments_digest(name: str, arguments: dict[str, Any], caller: str) -> str:
    """The call a request state belongs to: its tool, its arguments and who called,
    canonically."""
    try:
        text = json.dumps([name, arguments, caller], sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr([name, sorted(arguments.items(), key=lambda item: str(item[0])), caller])
    return hashlib.sha256(text.encode()).hexdigest()


@final
class Parked:
    """One call waiting for its second round: what binds it, and where its answer goes."""

    __slots__ = ("answer", "call", "digest", "expires", "result", "run_id", "token")

    def __init__(
        self,
        *,
        token: str,
        run_id: str,
        digest: str,
        call: str,
        expires: float,
        result: concurrent.futures.Future[Any],
    ) -> None:
        self.token = token
        self.run_id = run_id
        self.digest = digest
        self.call = call
        self.expires = expires
        self.result = result
        self.answer: concurrent.futures.Future[str | None] = concurrent.futures.Future()


@final
class Waiting:
    """The calls of one server waiting for their second round, and the key of their states."""

    __slots__ = ("_key", "_lock", "_parked")

    def __init__(self) -> None:
        # Made here, never stored: a state outlives neither this process nor its waiting run.
        self._key = secrets.token_bytes(32)
        self._lock = threading.Lock()
        self._parked: dict[str, Parked] = {}

    def park(
        self,
        *,
        run_id: str,
        digest: str,
        call: str,
        seconds: float,
        result: concurrent.futures.Future[Any],
    ) -> tuple[Parked, str] | None:
        """Hold a call for its second round; the parked call and its request state, or
        ``None`` when too many calls wait already."""
        expires = time.time() + seconds
        parked = Parked(
            token=secrets.token_urlsafe(18),
            run_id=run_id,
            digest=digest,
            call=call,
            expires=expires,
            result=result,
        )
        with self._lock:
            if len(self._parked) >= MAX_WAITING:
                return None
            self._parked[parked.token] = parked
        fields = {"t": parked.token, "r": run_id, "d": digest, "c": call, "x": int(expires) + 1}
        return parked, self._seal(fields)

    def wait(self, parked: Parked) -> str | None:
        """The client's answer (its ``action``), or ``None`` when none came in time. Runs on
        the call's own thread."""
        try:
            return parked.answer.result(timeout=max(parked.expires - time.time(), 0.0))
        except concurrent.futures.TimeoutError:
            with self._lock:
                gone = self._parked.pop(parked.token, None) is None
            if not gone:
                return None
            # A second round took it just now: its answer is on the way.
            return parked.answer.result()

    def claim(self, state: str, call: str) -> tuple[Parked | None, str]:
        """The waiting call ``state`` names, taken (a state works once), with ``ok``; or
        ``None`` and why not (a fixed word for the log)."""
        fields = self._open(state)
        if fields is None:
            return None, "unauthentic"
        if fields["x"] < time.time():
            return None, "expired"
        with self._lock:
            parked = self._parked.pop(fields["t"], None)
        if parked is None:
            return None, "unknown"
        bound = (parked.run_id, parked.digest, parked.call)
        if bound != (fields["r"], fields["d"], fields["c"]) or not hmac.compare_digest(
            call, parked.call
        ):
            # Taken, so it cannot be tried again: the waiting run settles as unanswered.
            parked.answer.set_result(None)
            return None, "mismatch"
        return parked, "ok"

    def _seal(self, fields: dict[str, Any]) -> str:
        body = _b64(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode())
        return f"{_VERSION}.{body}.{_b64(self._mac(body))}"

    def _open(self, state: str) -> dict[str, Any] | None:
        if not isinstance(state, str) or len(state) > _MAX_STATE_CHARS:
            return None
        version, _, rest = state.partition(".")
        body, _, mac = rest.partition(".")
        if version != _VERSION or not body or not mac:
            return None
        try:
            if not hmac.compare_digest(_unb64(mac), self._mac(body)):
                return None
            fields = json.loads(_unb64(body))
        except ValueError:
            return None
        if not isinstance(fields, dict):
            return None
        kinds = {"t": str, "r": str, "d": str, "c": str, "x": int}
        if any(type(fields.get(name)) is not kind for name, kind in kinds.items()):
            return None
        return fields

    def _mac(self, body: str) -> bytes:
        return hmac.new(self._key, _LABEL + body.encode("ascii"), hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode("ascii").rstrip("=")


def _unb64(text: str) -> bytes:
    # ValueError (binascii.Error is one) for anything that is not URL-safe base64.
    return base64.urlsafe_b64decode(text.encode("ascii") + b"=" * (-len(text) % 4))

"""The runs listing's query string, its page cursors, a run's totals from its steps, and the
verdict of its audit chain."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TypeVar, final

import attrs

from nrllm_core import _json
from nrllm_core._status import RunStatus
from nrllm_core.store import (
    ChainCheck,
    KeySource,
    Problem,
    RunCursor,
    RunFilter,
    RunInfo,
    RunKind,
    StoredStep,
)

__all__ = [
    "MAX_PAGE",
    "BadQuery",
    "Cursors",
    "RunsQuery",
    "chain_verdict",
    "parse_runs_query",
    "run_totals",
]

DEFAULT_PAGE: Final = 50
# A page is read, serialised and rendered at once: a bound keeps each request short.
MAX_PAGE: Final = 200
# As long as the store's columns: a longer value can match nothing.
_MAX_NAME: Final = 255
_MAX_CURSOR: Final = 1024
_NAMES: Final = ("provider", "actor", "tool")
_KNOWN: Final = frozenset({"status", "kind", *_NAMES, "after", "before", "limit", "cursor"})
# The guard reads the page's first request's token; it is not a filter.
_IGNORED: Final = frozenset({"token"})

E = TypeVar("E", RunStatus, RunKind)


class BadQuery(Exception):
    """A query the runs API refuses with 400; the message is written for the person."""


@final
@attrs.frozen(kw_only=True)
class RunsQuery:
    """A checked request for a page of runs."""

    where: RunFilter
    limit: int
    cursor: str | None


def parse_runs_query(params: Sequence[tuple[str, str]]) -> RunsQuery:
    """The filters, page size and cursor of ``params`` (the query string's pairs, in order),
    each checked; raises ``BadQuery`` naming the first that is wrong."""
    given: dict[str, str] = {}
    for key, value in params:
        if key in _IGNORED:
            continue
        if key not in _KNOWN:
            raise BadQuery(f'Unknown parameter "{key}": use {", ".join(sorted(_KNOWN))}.')
        if key in given:
            raise BadQuery(f'"{key}" is given more than once.')
        if value != "":
            given[key] = value
    names = {key: _name(key, given.get(key)) for key in _NAMES}
    where = RunFilter(
        status=_choice("status", given.get("status"), RunStatus),
        kind=_choice("kind", given.get("kind"), RunKind),
        provider=names["provider"],
        actor=names["actor"],
        tool=names["tool"],
        started_after=_time("after", given.get("after")),
        started_before=_time("before", given.get("before")),
    )
    cursor = given.get("cursor")
    if cursor is not None and len(cursor) > _MAX_CURSOR:
        raise BadQuery("The page cursor is not one this page gave: start from the first page.")
    return RunsQuery(where=where, limit=_limit(given.get("limit")), cursor=cursor)


def _choice(key: str, value: str | None, kinds: type[E]) -> E | None:
    if value is None:
        return None
    try:
        return kinds(value)
    except ValueError:
        known = ", ".join(k.value for k in kinds)
        raise BadQuery(f'Unknown {key} "{value[:80]}": one of {known}.') from None


def _name(key: str, value: str | None) -> str | None:
    if value is not None and len(value) > _MAX_NAME:
        raise BadQuery(f'"{key}" is longer than {_MAX_NAME} characters.')
    return value


def _time(key: str, value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise BadQuery(f'"{key}" must be an ISO 8601 time, such as 2026-01-31T09:30:00Z.') from None
    if moment.tzinfo is None:
        # A time without its zone means a different moment on every machine reading it.
        raise BadQuery(f'"{key}" needs a time zone (Z or an offset such as +01:00).')
    return moment


def _limit(value: str | None) -> int:
    if value is None:
        return DEFAULT_PAGE
    # ASCII digits only, and few: int() cannot read "²" and reads thousands of digits slowly.
    digits = value.isascii() and value.isdigit() and len(value) <= 6
    if not digits or not 1 <= int(value) <= MAX_PAGE:
        raise BadQuery(f'"limit" must be a whole number from 1 to {MAX_PAGE}.')
    return int(value)


@final
class Cursors:
    """Page cursors the server signs, bound to the filters they were made under.

    A cursor names the last run of a page; signed, it cannot be edited to read past a run
    it does not name, and bound, it cannot carry one listing's place into another's. The key
    lives as long as the app: a cursor from an earlier start is refused (400), and the page
    falls back to the first page.
    """

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    def make(self, where: RunFilter, last: RunInfo) -> str:
        body = _json.dumps([last.started_at.isoformat(), last.run_id])
        encoded = base64.urlsafe_b64encode(body).decode().rstrip("=")
        return f"{encoded}.{self._mac(where, encoded)}"

    def read(self, where: RunFilter, cursor: str) -> RunCursor:
        """The place ``cursor`` names; raises ``BadQuery`` for one this app did not make under
        the same filters."""
        encoded, dot, mac = cursor.partition(".")
        if not dot or not hmac.compare_digest(mac, self._mac(where, encoded)):
            raise BadQuery(
                "The page cursor is not one this page gave for these filters "
                "(it was edited, or the inspector restarted): start from the first page."
            )
        try:
            padded = encoded + "=" * (-len(encoded) % 4)
            started_at, run_id = _json.loads(base64.urlsafe_b64decode(padded))
            moment = datetime.fromisoformat(started_at)
            if not isinstance(run_id, str) or moment.tzinfo is None:
                raise TypeError
            return RunCursor(started_at=moment, run_id=run_id)
        except (ValueError, TypeError, binascii.Error):
            # Signed by this app, so never expected: refused all the same, not a 500.
            raise BadQuery("The page cursor cannot be read: start from the first page.") from None

    def _mac(self, where: RunFilter, encoded: str) -> str:
        bound = _json.dumps([_filter_key(where), encoded])
        return hmac.new(self._key, bound, hashlib.sha256).hexdigest()[:32]


def _filter_key(where: RunFilter) -> list[Any]:
    def text(value: Any) -> Any:
        if value is None:
            return None
        return value.isoformat() if isinstance(value, datetime) else str(value)

    return [text(getattr(where, field.name)) for field in attrs.fields(RunFilter)]


def recorded_level(steps: Sequence[StoredStep]) -> str:
    """The privacy level the run's steps were stored at, as its segments' ``start`` steps
    recorded it (the configuration may have changed since): several, in order, when its
    segments differ; ``unknown`` when no start step says."""
    levels: list[str] = []
    for step in steps:
        level = step.payload.get("privacy_level") if step.kind == "start" else None
        if isinstance(level, str) and level not in levels:
            levels.append(level)
    return ", ".join(levels) or "unknown"


def run_totals(info: RunInfo, steps: Sequence[Mapping[str, Any]]) -> dict[str, float | int | None]:
    """What a run took, from its stored steps: model and tool time, tokens, tool calls and
    the calls that failed. ``wall_ms`` is ``None`` while the run has not ended."""
    totals: dict[str, float | int | None] = {
        "wall_ms": None,
        "model_ms": 0.0,
        "tool_ms": 0.0,
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cached_tokens": 0,
        "reasoning_tokens": 0,
        "calls": 0,
        "errors": 0,
    }
    if info.ended_at is not None:
        totals["wall_ms"] = round((info.ended_at - info.started_at).total_seconds() * 1000, 3)
    model = tool = 0.0
    for step in steps:
        kind = step.get("kind")
        if kind == "llm":
            model += _number(step.get("duration_ms"))
            for key in ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens"):
                totals[key] = int(totals[key] or 0) + _count(step.get(key))
        elif kind == "tool":
            tool += _number(step.get("duration_ms"))
            totals["calls"] = int(totals["calls"] or 0) + 1
            if step.get("tool_is_error") is True:
                totals["errors"] = int(totals["errors"] or 0) + 1
    totals["model_ms"] = round(model, 3)
    totals["tool_ms"] = round(tool, 3)
    return totals


def _number(value: Any) -> float:
    # A stored payload is read back as the audit kept it: anything odd counts for nothing.
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return 0.0
    return float(value)


def _count(value: Any) -> int:
    return value if type(value) is int and value > 0 else 0


# What each break means to the person reading the run, in the words of `nrllm runs verify`'s
# docstring: edited, deleted, inserted or reordered.
_PROBLEMS: Final = {
    Problem.EDITED: "it was changed after it was recorded",
    Problem.MISSING: "it is missing: deleted from the store",
    Problem.REORDERED: "it is stored under another step's sequence number: reordered",
    Problem.HEAD_MISMATCH: (
        "the run's chain head does not fit its steps: steps were inserted, or cut from the end"
    ),
}


def chain_verdict(check: ChainCheck) -> dict[str, Any]:
    """One run's :meth:`Store.verify` as the inspector shows it: ``verified``, where it broke
    (``null`` when it holds), the same as text, and a note when the key cannot stop an
    attacker."""
    found = check.broken[0] if check.broken else None
    if found is None:
        text = "Verified: no stored step was edited, deleted, inserted or reordered."
        broken = None
    else:
        text = f"Broken at step {found.sequence}: {_PROBLEMS[found.problem]}."
        broken = {"sequence": found.sequence, "problem": found.problem.value}
    note = None
    if check.key_source is KeySource.DATABASE:
        # As `nrllm runs verify` warns: whoever can write the database can read this key.
        note = (
            "No NRLLM_AUDIT_KEY or NRLLM_STATE_KEY is set: the chain uses a key kept in the "
            "database itself, so it detects accidents, not attackers."
        )
    return {
        "verified": found is None,
        "broken": broken,
        "text": text,
        "key_source": check.key_source.value,
        "note": note,
    }

"""The audit hash chain: each run's steps linked by HMAC-SHA256, and the check that they still are.

A run's chain starts from ``initial = HMAC-SHA256(key, canonical JSON of
["nrllm audit chain v1", run_id])``. Each stored step carries ``mac = HMAC-SHA256(key,
previous mac (32 bytes) ‖ canonical JSON of the stored row)``, the row being every column of
the step but the mac itself, in :data:`STEP_FIELDS` order. The run row keeps the number of
chained steps, the last mac, and its head: ``HMAC-SHA256(key, canonical JSON of
["nrllm audit chain head v1", run_id, count, last mac])``, which nobody without the key can
compute for a count and a last mac of their choosing, so a run cut short cannot be given a
head that fits. The chain follows commit order, which is sequence order for a run recorded one
step at a time.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, final

import attrs

from nrllm_core import _json
from nrllm_core._sealing import decode_key

__all__ = [
    "STEP_FIELDS",
    "ChainBreak",
    "ChainCheck",
    "ChainHead",
    "ChainKey",
    "KeySource",
    "Problem",
    "chain_key",
    "derived_key",
    "find_break",
    "head_mac",
    "initial_mac",
    "step_mac",
]

# Every persisted column of a step but its mac; a test pins this against the table.
STEP_FIELDS: Final = (
    "run_id",
    "sequence",
    "kind",
    "round",
    "duration_ms",
    "payload",
    "recorded_at",
)
_VERSION: Final = "nrllm audit chain v1"
# Its own label: a head is never a valid initial value or step mac, nor one of those a head.
_HEAD_VERSION: Final = "nrllm audit chain head v1"
# Its own label too: no derived key is an initial value, a head or the chain's key.
_DERIVED_VERSION: Final = "nrllm audit derived key v1"
# A stored step: a dict, or SQLAlchemy's RowMapping (whose keys are not typed as str).
Row = Mapping[Any, Any]
# Distinct from anything else derived from the same secret: the audit key is never the
# sealing key, even when both come from NRLLM_STATE_KEY.
_HKDF_INFO: Final = b"nrllm audit chain key v1"


class KeySource(enum.StrEnum):
    """Where the chain's key comes from, in order of preference."""

    AUDIT_KEY = "NRLLM_AUDIT_KEY"
    STATE_KEY = "NRLLM_STATE_KEY"
    # Anyone who can write the database can read this key: it detects accidents, not attackers.
    DATABASE = "database"


class Problem(enum.StrEnum):
    """What is wrong at the first place a run's chain breaks."""

    EDITED = "edited"
    MISSING = "missing"
    REORDERED = "reordered"
    HEAD_MISMATCH = "head mismatch"


@final
@attrs.frozen(kw_only=True)
class ChainKey:
    """The HMAC key of the chain and where it was derived from."""

    secret: bytes = attrs.field(repr=False)
    source: KeySource


@final
@attrs.frozen(kw_only=True)
class ChainBreak:
    """The first place a run's chain does not hold."""

    run_id: str
    sequence: int
    problem: Problem

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "sequence": self.sequence, "problem": self.problem.value}


@final
@attrs.frozen(kw_only=True)
class ChainCheck:
    """The outcome of checking the chains of ``runs_checked`` runs."""

    runs_checked: int
    broken: tuple[ChainBreak, ...]
    key_source: KeySource

    def to_dict(self) -> dict[str, Any]:
        """The JSON ``nrllm runs verify --json`` prints."""
        return {"runs_checked": self.runs_checked, "broken": [b.to_dict() for b in self.broken]}


def chain_key(environ: Mapping[str, str], stored: Callable[[], bytes]) -> ChainKey:
    """The key derived from ``NRLLM_AUDIT_KEY``, else ``NRLLM_STATE_KEY``, else ``stored()``.

    The variables hold URL-safe base64 of 32 bytes, as ``NRLLM_STATE_KEY`` always has; a
    malformed one raises rather than falling back to a weaker key.
    """
    from cryptography.hazmat.primitives.hashes import SHA256
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    source, material = KeySource.DATABASE, b""
    for variable in (KeySource.AUDIT_KEY, KeySource.STATE_KEY):
        text = environ.get(variable.value)
        if text:
            source, material = variable, decode_key(text, variable.value)
            break
    else:
        material = stored()
    secret = HKDF(algorithm=SHA256(), length=32, salt=None, info=_HKDF_INFO).derive(material)
    return ChainKey(secret=secret, source=source)


def derived_key(key: ChainKey, purpose: str) -> bytes:
    """A 32-byte key for ``purpose`` alone: whoever holds it cannot compute the chain's macs,
    nor the key of another purpose."""
    return hmac.digest(key.secret, _json.dumps([_DERIVED_VERSION, purpose]), "sha256")


def initial_mac(key: ChainKey, run_id: str) -> str:
    """The value a run's first step chains from, as hex."""
    return hmac.digest(key.secret, _json.dumps([_VERSION, run_id]), "sha256").hex()


def head_mac(key: ChainKey, run_id: str, count: int, last: str) -> str:
    """The head of a run whose chain is ``count`` steps long and ends at ``last``, as hex.

    A JSON array of a string, a string, an integer and a string has one encoding and no two
    values share it, so no head of one run, count or last mac is the head of another.
    """
    return hmac.digest(
        key.secret, _json.dumps([_HEAD_VERSION, run_id, count, last]), "sha256"
    ).hex()


@final
@attrs.frozen(kw_only=True)
class ChainHead:
    """Where a run's chain stands: ``count`` steps ending at the mac ``last``, and the ``head``
    that authenticates both (what the run row stores in ``steps``, ``last_mac`` and
    ``chain_head``)."""

    count: int
    last: str
    head: str

    @classmethod
    def start(cls, key: ChainKey, run_id: str) -> ChainHead:
        """The head of a run with no steps yet."""
        last = initial_mac(key, run_id)
        return cls(count=0, last=last, head=head_mac(key, run_id, 0, last))

    def after(self, key: ChainKey, run_id: str, mac: str) -> ChainHead:
        """The head once the step whose mac is ``mac`` is chained after this one."""
        count = self.count + 1
        return ChainHead(count=count, last=mac, head=head_mac(key, run_id, count, mac))


def step_mac(key: ChainKey, previous: str, row: Row) -> str:
    """The mac of a stored step ``row`` (a mapping with every :data:`STEP_FIELDS` key), as hex."""
    fields = {name: row[name] for name in STEP_FIELDS}
    recorded_at: datetime = fields["recorded_at"]
    if recorded_at.tzinfo is None:
        raise ValueError("audit timestamps must be timezone-aware")
    fields["recorded_at"] = recorded_at.astimezone(UTC).isoformat(timespec="microseconds")
    message = bytes.fromhex(previous) + _json.dumps(fields)
    return hmac.digest(key.secret, message, "sha256").hex()


def find_break(
    key: ChainKey,
    run_id: str,
    *,
    head: str | None,
    count: int,
    rows: Sequence[Row],
) -> ChainBreak | None:
    """Where the chain of ``rows`` (the run's steps in sequence order, each with its ``mac``)
    first fails to reach the run's ``head`` after ``count`` steps, or ``None`` when it holds.

    The head is checked as an HMAC of the count and the last mac the rows reach, not compared
    with either: a head and count set by hand to fit the steps left after some were deleted
    do not hold without the key.
    """
    current = initial_mac(key, run_id)
    used = [False] * len(rows)
    start = consumed = last = 0
    while True:
        while start < len(rows) and used[start]:
            start += 1
        if start == len(rows):
            break
        # The next link is almost always the next row; a run recorded concurrently may have
        # committed its steps out of sequence order, so look further before giving up.
        found = next(
            (
                i
                for i in range(start, len(rows))
                if not used[i] and _links(key, current, rows[i], rows[i]["mac"])
            ),
            None,
        )
        if found is None:
            rest = [row for row, done in zip(rows, used, strict=True) if not done]
            sequence, problem = _diagnose(key, current, last, consumed + len(rest), count, rest)
            return ChainBreak(run_id=run_id, sequence=sequence, problem=problem)
        used[found] = True
        current, last, consumed = rows[found]["mac"], rows[found]["sequence"], consumed + 1
    if consumed != count or head != head_mac(key, run_id, consumed, current):
        return ChainBreak(run_id=run_id, sequence=last + 1, problem=Problem.HEAD_MISMATCH)
    return None


def _diagnose(
    key: ChainKey,
    current: str,
    last: int,
    present: int,
    count: int,
    rest: Sequence[Row],
) -> tuple[int, Problem]:
    """Name what broke the chain after the step numbered ``last``, none of ``rest`` linking."""
    expected = rest[0]["sequence"]
    macs = {row["mac"] for row in rest}
    if any(_links(key, current, {**row, "sequence": expected}, *macs) for row in rest):
        # A step that belongs here sits under another sequence number.
        return expected, Problem.REORDERED
    if present < count:
        return last + 1, Problem.MISSING
    if present > count:
        # Rows the head never counted: inserted.
        return expected, Problem.HEAD_MISMATCH
    return expected, Problem.EDITED


def _links(key: ChainKey, previous: str, row: Row, *macs: str | None) -> bool:
    try:
        mac = step_mac(key, previous, row)
    except (ValueError, TypeError, AttributeError):
        # A value no writer of this store produces: edited in the database.
        return False
    return mac in macs

"""Best-effort masking of credentials and e-mail addresses in text bound for persistence."""

from __future__ import annotations

import re
from typing import Final

__all__ = [
    "LEAF_MAX_CHARS",
    "REDACTION_MASK",
    "TRUNCATION_MARKER",
    "mask_secrets",
    "redact",
    "redact_tree",
]

REDACTION_MASK: Final = "***"
LEAF_MAX_CHARS: Final = 2000
TRUNCATION_MARKER: Final = "… [truncated]"

# Inputs are bounded to depth 64 upstream; this only stops a hostile or cyclic value from
# exhausting the stack.
_MAX_TREE_DEPTH: Final = 100

# A mask can expose a shape its original neighbour hid (``ftp://a@b.com:pw@host`` only reads
# as userinfo once the address is gone), so the catalogue runs until nothing changes. Two
# passes settle every input found so far; the cap only guards against a pathological chain.
_MAX_PASSES: Final = 4

# A cheap necessary condition for every pattern below: text without any of these fragments
# cannot match, so it skips the catalogue entirely.
_TRIGGER: Final = re.compile(
    r"@|[?&;][\w\-]+=|(?i:bearer)|sk-|k_(?:live|test)_|AKIA|gh[pousr]_|github_pat_"
    r"|xox[abprs]-|xapp-|AIza|SG\.|eyJ|-us\d"
)

# The user part and password stop at quotes, commas and semicolons so that a port followed
# later by an unrelated address (``"https://example.com:8080","contact":"a@b.org"``) is never
# read as ``user:password@``. The lookbehind only lets a scheme start at the beginning of a
# run, which keeps the scan linear on long dotted strings.
_URL_USERINFO: Final = re.compile(
    r"(?<![\w+.\-])([a-z][a-z0-9+.\-]*://[^\s:/?#@\"'<>`,;\\]*):[^\s/?#@\"'<>`,;\\]+@",
    re.IGNORECASE,
)

# ``client_secret``, ``x_api_key`` or ``X-Amz-Signature``: any name *ending* in a credential
# word counts, but a bare ``key``, ``sig`` or ``auth`` only on its own, so ``sort_key`` and
# ``max_tokens`` survive. ``&amp;`` covers URLs quoted in HTML. The value stops at structural
# characters so that fragments, JSON, HTML and Markdown neighbours survive.
_URL_QUERY_CREDENTIAL: Final = re.compile(
    r"(&amp;|[?&])"
    r"((?:[a-z0-9]+[_\-])*(?:api[_\-]?key|secret[_\-]?key|private[_\-]?key|token|secret"
    r"|password|passwd|signature|credential)|key|sig|auth)"
    r"=[^&\s\"'#<>`)\\]+",
    re.IGNORECASE,
)

# Runs before the vendor shapes so ``Bearer sk-…`` collapses to one mask. The lookahead asks
# for something token-like (a digit, an inner symbol, or 20+ characters) so that prose such
# as "the bearer of this letter" is left alone.
_BEARER: Final = re.compile(
    r"\b((?i:bearer)\s+)"
    r"(?=[A-Za-z0-9._~+/\-]{20}|[A-Za-z0-9._~+/\-]*?(?:[0-9]|[._~+/\-][A-Za-z0-9._~+/\-]))"
    r"[A-Za-z0-9._~+/\-]+=*"
)

# One alternation rather than one pass per vendor: the leftmost shape wins, so a key whose
# body happens to contain another vendor's prefix is masked whole instead of half-eaten.
# The trailing ``\w*`` takes any glued word characters along, so a mask never leaves a word
# character behind it that could start a new match on the next pass. A JWT glued to a hyphen
# gets a bounded header: unbounded, a long ``eyJ-eyJ-…`` run would be rescanned from every
# hyphen, which is quadratic.
_VENDOR_KEY: Final = re.compile(
    r"""
    \b(?:
        (?P<openai>sk-)[A-Za-z0-9_\-]{16,}
      | [sp]k_(?:live|test)_[A-Za-z0-9]{24,}
      | AKIA[0-9A-Z]{16,}
      | gh[pousr]_[A-Za-z0-9]{36,}
      | github_pat_\w{22,}
      | xox[abprs]-[A-Za-z0-9\-]{10,}
      | xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+
      | AIza[0-9A-Za-z_\-]{35,}
      | [a-f0-9]{32}-us\d{1,2}
      | SG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}
      | (?<![\w\-])eyJ[\w\-]++\.[\w\-]++\.[\w\-]++
      | (?<=-)eyJ[\w\-]{1,1024}+\.[\w\-]++\.[\w\-]++
    )\w*
    """,
    re.ASCII | re.VERBOSE,
)

# The lookbehind makes a match start only where a run of address characters starts, which
# keeps a long run without ``@`` linear instead of quadratic. ``_`` is allowed in the local
# part so ``first_last@…`` is not half-masked.
_EMAIL: Final = re.compile(
    r"(?<![\w.%+\-])[\w.%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\w*",
    re.ASCII,
)

# Order is the contract: URL credentials, then ``Bearer``, then vendor shapes, then e-mail.
_CATALOGUE: Final[tuple[tuple[re.Pattern[str], str], ...]] = (
    (_URL_USERINFO, rf"\1:{REDACTION_MASK}@"),
    (_URL_QUERY_CREDENTIAL, rf"\1\2={REDACTION_MASK}"),
    (_BEARER, rf"\1{REDACTION_MASK}"),
    # The OpenAI mask keeps ``sk-`` so a reader can tell what was removed; the group is empty
    # for every other shape.
    (_VENDOR_KEY, rf"\g<openai>{REDACTION_MASK}"),
    (_EMAIL, REDACTION_MASK),
)


def mask_secrets(text: str) -> str:
    """Mask credentials and e-mail addresses in ``text`` with ``***``, without a length cap."""
    if _TRIGGER.search(text) is None:
        return text
    for _ in range(_MAX_PASSES):
        masked = text
        for pattern, replacement in _CATALOGUE:
            masked = pattern.sub(replacement, masked)
        if masked == text:
            break
        text = masked
    return text


def redact(text: str) -> str:
    """Mask ``text`` and cap it at ``LEAF_MAX_CHARS`` characters plus ``TRUNCATION_MARKER``."""
    masked = mask_secrets(text)
    if len(masked) <= LEAF_MAX_CHARS:
        return masked
    return masked[:LEAF_MAX_CHARS] + TRUNCATION_MARKER


def redact_tree(value: object) -> object:
    """Apply ``redact`` to every string leaf of nested dicts, lists and tuples.

    Keys are kept as they are, tuples come back as lists and other scalars are unchanged. A
    container nested more than 100 levels deep, or one that contains itself, becomes ``***``.
    """
    return _redact_node(value, 1, set())


def _redact_node(value: object, depth: int, ancestors: set[int]) -> object:
    if isinstance(value, str):
        return redact(value)
    if not isinstance(value, dict | list | tuple):
        return value
    if depth > _MAX_TREE_DEPTH or id(value) in ancestors:
        return REDACTION_MASK
    ancestors.add(id(value))
    try:
        if isinstance(value, dict):
            return {key: _redact_node(item, depth + 1, ancestors) for key, item in value.items()}
        return [_redact_node(item, depth + 1, ancestors) for item in value]
    finally:
        ancestors.discard(id(value))

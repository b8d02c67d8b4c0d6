"""Who is who: the two comparisons of identities, and the names configuration may not use.

A check that refuses compares people loosely, so that no spelling slips past it:
:func:`same_person_for_refusal` (four-eyes, by way of ``Actor.same_person_for_refusal``) takes
look-alikes for one person. A check that grants compares ids exactly, so that no look-alike
gains by it: :func:`same_id_for_grant` (a repurpose job's owner, by way of
``Actor.same_id_for_grant``) sets aside only case and what never tells people apart. The
skeleton makes ``kim`` and ``kirn`` one person, the safe side for refusing and the wrong one
for granting: every caller picks one of the two.

Both drop the code points that never tell two people apart (:data:`NAMES_NOBODY` is said of an
id made of nothing else): default-ignorable, control and format characters, spaces and line
breaks, and characters drawn as nothing (U+2800 BRAILLE PATTERN BLANK).

The Unicode work is plain Python over tables read out of ICU (``_identity_tables.json``,
written by ``scripts/gen_identity_tables.py``, loaded by the first ``Actor`` or comparison,
never at import): NFKC_Casefold and canonical caseless matching; the UTS #39 confusable
skeleton and hidden-overlay check; and the UTS #39 checks that a name keeps to one script and
one digit system. The comparison is therefore ICU 72's (Unicode 15.0) on every platform and
every Python, whatever Unicode version the running ``unicodedata`` knows, and installing nrllm
needs no compiler. ``unicodedata`` only names code points in refusals and says which are
control characters (a set Unicode never changes), and ``str.strip`` trims Python's whitespace
off a configured name, whose surrounding spaces are allowed.
"""

from __future__ import annotations

import bisect
import functools
import json
import unicodedata
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Final, final

import attrs

__all__ = [
    "NAMES_NOBODY",
    "identity_key",
    "identity_lookalike",
    "identity_refusal",
    "names_nobody",
    "same_id_for_grant",
    "same_person_for_refusal",
]

# The skeleton can leave what folding changes again (``0`` becomes ``O``): fold and skeleton
# until nothing changes. Every single code point settles within three rounds; the bound only
# keeps hostile text from buying more.
_ROUNDS: Final = 4
_NO_SCRIPT: Final = frozenset({"Common", "Inherited", "Unknown"})
# Said of an id whose key is empty. Such an id is nobody, and nobody differs from everyone: as
# an approver it would pass four-eyes against any initiator.
NAMES_NOBODY: Final = (
    "names nobody: nothing is left of it once invisible, control and blank characters are set aside"
)
_TABLES: Final = "_identity_tables.json"
# What ``unseen`` holds of ASCII: the controls and the space.
_ASCII_UNSEEN: Final = dict.fromkeys([*range(0x21), 0x7F])
_DOT_ABOVE: Final = "\u0307"
# Hangul syllables decompose and compose by arithmetic (The Unicode Standard, 3.12).
_S_BASE: Final = 0xAC00
_L_BASE: Final = 0x1100
_V_BASE: Final = 0x1161
_T_BASE: Final = 0x11A7
_L_COUNT: Final = 19
_V_COUNT: Final = 21
_T_COUNT: Final = 28
_S_COUNT: Final = _L_COUNT * _V_COUNT * _T_COUNT
# UTS #39 5.1: Han is written with Bopomofo, with Hiragana and Katakana, and with Hangul.
_HAN_WRITTEN_WITH: Final = frozenset({"Hanb", "Jpan", "Kore"})
_AUGMENTED: Final = {
    "Hani": _HAN_WRITTEN_WITH,
    "Hira": frozenset({"Jpan"}),
    "Kana": frozenset({"Jpan"}),
    "Hang": frozenset({"Kore"}),
    "Bopo": frozenset({"Hanb"}),
}


@final
@attrs.frozen(kw_only=True, eq=False)
class _Unicode:
    """The tables, built once and only read after, so safe to share between threads."""

    # Canonical combining classes other than 0.
    ccc: Mapping[str, int]
    # Full decompositions, Hangul syllables aside: canonical, compatibility, NFKC_Casefold's,
    # canonical caseless matching's (NFD, case folding, NFD).
    nfd: Mapping[str, str]
    nfkd: Mapping[str, str]
    nfkc_casefold: Mapping[str, str]
    caseless: Mapping[str, str]
    # The two code points each composite is composed from, Hangul aside.
    compose: Mapping[str, str]
    ignorable: frozenset[str]
    # What never tells two people apart: default-ignorable, control and format characters,
    # White_Space, and the characters drawn as nothing.
    unseen: frozenset[str]
    # The characters after which ICU finds a combining dot above hidden (they have a dot, or
    # look like a character that has one).
    dot_leads: frozenset[str]
    # <noBreak> compatibility forms: the character itself, but for line breaking.
    no_break: frozenset[str]
    # Punctuation and White_Space, which end a word.
    word_breaks: frozenset[str]
    # Characters NFD leaves alone, to their UTS #39 prototype (decomposed).
    skeleton: Mapping[str, str]
    # Script runs: ``scripts[i]`` from ``script_starts[i]`` on; Unknown between runs.
    script_starts: tuple[int, ...]
    scripts: tuple[str, ...]
    script_extensions: Mapping[str, frozenset[str]]
    script_names: Mapping[str, str]
    # Each decimal digit to the zero of its digit system.
    digit_zero: Mapping[str, str]

    def nfc_of(self, text: str) -> str:
        if text.isascii():
            return text
        return self._composed(self._decomposed(_as_icu_reads(text), self.nfd))

    def nfkc_of(self, text: str) -> str:
        if text.isascii():
            return text
        return self._composed(self._decomposed(_as_icu_reads(text), self.nfkd))

    def nfkc_casefold_of(self, text: str) -> str:
        """NFKC_Casefold, without what is unseen (NFKC makes a space of some characters)."""
        if text.isascii():
            return text.lower().translate(_ASCII_UNSEEN)
        chars = self._decomposed(_as_icu_reads(text), self.nfkc_casefold, drop=self.unseen)
        return self._composed(chars)

    def caseless_of(self, text: str) -> str:
        """NFC of canonical caseless matching's form, without what is unseen."""
        if text.isascii():
            return text.lower().translate(_ASCII_UNSEEN)
        return self._composed(
            self._decomposed(_as_icu_reads(text), self.caseless, drop=self.unseen)
        )

    def skeleton_of(self, text: str) -> str:
        """The UTS #39 skeleton, without what is unseen or hidden under another character."""
        decomposed = self._decomposed(_as_icu_reads(text), self.nfd, drop=self.unseen)
        hidden = set(self.hidden_dots(decomposed))
        mapped = "".join(
            self.skeleton.get(char, char) for at, char in enumerate(decomposed) if at not in hidden
        )
        return "".join(self._decomposed(mapped, self.nfd, drop=self.unseen))

    def hidden_dots(self, chars: Sequence[str]) -> list[int]:
        """Where in ``chars`` a combining dot above is hidden by the character it follows
        (UTS #39's hidden overlay, as ICU's USPOOF_HIDDEN_OVERLAY finds it): ``i`` and ``j``
        already have a dot."""
        hidden: list[int] = []
        lead = False
        for at, char in enumerate(chars):
            if lead and char == _DOT_ABOVE:
                hidden.append(at)
            # Marks of other classes than the dot's do not come between it and its base.
            if self.ccc.get(char, 0) in (0, 230):
                lead = char in self.dot_leads
        return hidden

    def script(self, char: str) -> str:
        """The short name of ``char``'s script (``Latn``, ``Zyyy`` for Common)."""
        return self.scripts[bisect.bisect_right(self.script_starts, ord(char)) - 1]

    def mixes_scripts(self, name: str) -> bool:
        """UTS #39 as ICU's SpoofChecker checks it: more than Highly Restrictive (5.2), or
        digits from more than one decimal system (5.3)."""
        if name.isascii():
            return False
        name = _as_icu_reads(name)
        # A name of several words (``user_٤٢``, ``Иван Smith``) may write each in its own
        # script; only a mix within a word reads as a disguise.
        words = "".join(" " if char in self.word_breaks else char for char in name).split(" ")
        if not all(self._restricted(word) for word in words):
            return True
        return len({self.digit_zero[char] for char in name if char in self.digit_zero}) > 1

    def _restricted(self, name: str) -> bool:
        """Highly Restrictive or better: one script, Common and Inherited aside."""
        resolved = self._resolved(name, without=None)
        if resolved is None or resolved:
            return True
        # Latin with Han and Japanese, Korean or Bopomofo.
        without_latin = self._resolved(name, without="Latn")
        return without_latin is None or bool(without_latin & _HAN_WRITTEN_WITH)

    def _resolved(self, name: str, *, without: str | None) -> frozenset[str] | None:
        """The resolved script set (UTS #39 5.1) of ``name``'s characters not in script
        ``without``; ``None`` stands for every script."""
        resolved: frozenset[str] | None = None
        for char in name:
            augmented = self._augmented(char)
            if augmented is None or without in augmented:
                continue
            resolved = augmented if resolved is None else resolved & augmented
        return resolved

    def _augmented(self, char: str) -> frozenset[str] | None:
        scripts = self.script_extensions.get(char) or frozenset({self.script(char)})
        if "Zyyy" in scripts or "Zinh" in scripts:
            return None
        for script in scripts & _AUGMENTED.keys():
            scripts |= _AUGMENTED[script]
        return scripts

    def _decomposed(
        self, text: str, mapping: Mapping[str, str], *, drop: frozenset[str] = frozenset()
    ) -> list[str]:
        """``text`` fully decomposed by ``mapping``, without ``drop``, in canonical order."""
        chars: list[str] = []
        for char in text:
            syllable = ord(char) - _S_BASE
            if 0 <= syllable < _S_COUNT:
                chars.append(chr(_L_BASE + syllable // (_V_COUNT * _T_COUNT)))
                chars.append(chr(_V_BASE + syllable // _T_COUNT % _V_COUNT))
                if syllable % _T_COUNT:
                    chars.append(chr(_T_BASE + syllable % _T_COUNT))
            elif char not in drop:
                chars.extend(part for part in mapping.get(char, char) if part not in drop)
        ccc = self.ccc
        start = 0
        while start < len(chars):
            if chars[start] not in ccc:
                start += 1
                continue
            end = start + 1
            while end < len(chars) and chars[end] in ccc:
                end += 1
            # A stable sort: marks of one class keep their order.
            chars[start:end] = sorted(chars[start:end], key=ccc.__getitem__)
            start = end
        return chars

    def _composed(self, chars: list[str]) -> str:
        """Canonical composition of decomposed, canonically ordered ``chars``."""
        out: list[str] = []
        starter = -1
        # The class of the last mark kept after the starter; -1 while none came between.
        between = -1
        for char in chars:
            klass = self.ccc.get(char, 0)
            if starter >= 0 and (between == -1 or between < klass):
                composite = self._pair(out[starter], char)
                if composite is not None:
                    out[starter] = composite
                    continue
            if klass:
                between = klass
            else:
                starter, between = len(out), -1
            out.append(char)
        return "".join(out)

    def _pair(self, first: str, second: str) -> str | None:
        if (composite := self.compose.get(first + second)) is not None:
            return composite
        leading, vowel = ord(first) - _L_BASE, ord(second) - _V_BASE
        if 0 <= leading < _L_COUNT and 0 <= vowel < _V_COUNT:
            return chr(_S_BASE + (leading * _V_COUNT + vowel) * _T_COUNT)
        syllable, trailing = ord(first) - _S_BASE, ord(second) - _T_BASE
        if 0 <= syllable < _S_COUNT and not syllable % _T_COUNT and 0 < trailing < _T_COUNT:
            return chr(ord(first) + trailing)
        return None


@functools.cache
def _unicode() -> _Unicode:
    """The tables, read on the first comparison."""
    tables = json.loads(resources.files("nrllm_core").joinpath(_TABLES).read_text(encoding="utf-8"))
    ignorable = frozenset(_expanded(tables["ignorable"]))
    nfd: dict[str, str] = tables["nfd"]
    nfkd = nfd | tables["nfkd"]
    starts, scripts = [0], ["Zzzz"]
    for first, last, script in tables["script"]:
        if starts[-1] != first:
            starts.append(first)
            scripts.append(script)
        else:
            scripts[-1] = script
        starts.append(last + 1)
        scripts.append("Zzzz")
    return _Unicode(
        ccc={
            chr(cp): klass for first, last, klass in tables["ccc"] for cp in range(first, last + 1)
        },
        nfd=nfd,
        nfkd=nfkd,
        nfkc_casefold=nfkd | dict.fromkeys(ignorable, "") | tables["nfkc_cf"],
        caseless=nfd | tables["caseless"],
        compose=tables["compose"],
        ignorable=ignorable,
        unseen=frozenset(_expanded(tables["unseen"])),
        dot_leads=frozenset(_expanded(tables["dot_leads"])),
        no_break=frozenset(_expanded(tables["no_break"])),
        word_breaks=frozenset(_expanded(tables["word_breaks"])),
        skeleton=tables["skeleton"],
        script_starts=tuple(starts),
        scripts=tuple(scripts),
        script_extensions={
            chr(cp): frozenset(extensions.split())
            for first, last, extensions in tables["script_extensions"]
            for cp in range(first, last + 1)
        },
        script_names=tables["script_names"],
        digit_zero={
            chr(zero + value): chr(zero) for zero in tables["digit_zeros"] for value in range(10)
        },
    )


def _expanded(runs: list[list[int]]) -> list[str]:
    return [chr(cp) for first, last in runs for cp in range(first, last + 1)]


def same_person_for_refusal(first: str, second: str) -> bool:
    """Whether two ids may name one person, for a check that refuses (four-eyes): their
    :func:`identity_key` is equal, or they are confusable as written (UTS #39, before case
    folding, where a capital ``I`` is an ``l``). Look-alikes are one person here, so never
    grant anything by it: ``kim`` and ``kirn`` are one."""
    if identity_key(first) == identity_key(second):
        return True
    return _written_skeleton(first) == _written_skeleton(second)


def same_id_for_grant(first: str, second: str) -> bool:
    """Whether two ids are one id, for a check that grants access or ownership: equal after
    NFC and case folding (canonical caseless matching), once the characters that never tell
    people apart are removed. No look-alike is folded: ``kim`` is not ``kirn``, and a Cyrillic
    ``a`` (U+0430) is not a Latin one."""
    unicode = _unicode()
    return unicode.caseless_of(first) == unicode.caseless_of(second)


def identity_key(name: str) -> str:
    """``name`` as a person, for refusing: NFKC_Casefold without the characters that never
    tell people apart, then the UTS #39 skeleton (hidden dots removed), folded again.

    Not for display: a skeleton is only for comparing (``emma`` has the key ``ernrna``).
    """
    unicode = _unicode()
    key = unicode.nfkc_casefold_of(name)
    for _ in range(_ROUNDS):
        again = unicode.nfkc_casefold_of(unicode.skeleton_of(key))
        if again == key:
            break
        key = again
    return key


def names_nobody(name: str) -> bool:
    """Whether ``name`` is empty as a person (``""``, spaces, ``\\u200b``, ``\\x01``, U+2800):
    no id may be that."""
    return not identity_key(name)


def identity_refusal(name: str) -> str | None:
    """Why ``name`` cannot be a configured identity, else ``None``.

    A configured name must show every character it has: no invisible, control, format or
    blank character but the space, no compatibility form (a ``<noBreak>`` one, such as the
    non-breaking hyphen, is the character itself), no dot hidden on a letter that has one, no
    mix of scripts within a word nor of digit systems. Case is visible and surrounding spaces
    are trimmed: both are allowed, and so is a name that looks like another
    (:func:`identity_lookalike`), since only refusing checks fold look-alikes. The reason names
    code points, never the hostile text itself.
    """
    if names_nobody(name):
        return f"it {NAMES_NOBODY}"
    unicode = _unicode()
    name = name.strip()
    for char in name:
        if char in unicode.ignorable:
            return f"{_described(char)} is invisible"
        if unicodedata.category(char) == "Cc":
            return f"{_described(char)} is a control character"
        if char in unicode.unseen and char != " ":
            return f"{_described(char)} is a format, space or blank character"
        compatible = unicode.nfkc_of(char)
        if compatible != unicode.nfc_of(char) and char not in unicode.no_break:
            return f"{_described(char)} is a compatibility form of {compatible!a}"
    if unicode.hidden_dots(name):
        return f"{_described(_DOT_ABOVE)} is hidden by the letter it follows, which has a dot"
    if unicode.mixes_scripts(name):
        lookalike = identity_lookalike(name)
        if lookalike is not None:
            return lookalike
        scripts = {unicode.script_names[unicode.script(char)] for char in name}
        return f"it mixes scripts or digit systems ({', '.join(sorted(scripts - _NO_SCRIPT))})"
    return None


def identity_lookalike(name: str) -> str | None:
    """What plain ASCII name ``name`` reads as, when it is spelled otherwise (a Cyrillic
    ``\u0421\u0430\u0440\u0430`` reads as ``capa``), else ``None``. Four-eyes takes the two for
    one person."""
    unicode = _unicode()
    key = identity_key(name)
    folded = unicode.nfkc_casefold_of(name)
    if not key.isascii() or folded.isascii():
        return None
    other = next(char for char in unicode.nfc_of(name) if not char.isascii())
    return f"it reads as {key!a} but is spelled with {_described(other)}"


def _written_skeleton(name: str) -> str:
    """The UTS #39 skeleton of ``name`` as written: compatibility forms and unseen code
    points gone, case kept."""
    unicode = _unicode()
    return unicode.skeleton_of(unicode.nfkc_of(name))


def _as_icu_reads(text: str) -> str:
    """``text`` as PyICU handed it to ICU, which this comparison replaced and still follows.

    Valid text is unchanged. Surrogate code points (undecodable bytes read with
    ``surrogateescape``, say) went in as UTF-16 code units, so a high and a low one made the
    character they encode; from a string holding a character beyond the BMP, each became
    U+FFFD.
    """
    if text.isascii():
        return text
    try:
        text.encode()
    except UnicodeEncodeError:
        if max(text) > "\uffff":
            return "".join("\ufffd" if "\ud800" <= char <= "\udfff" else char for char in text)
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
    return text


def _described(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")

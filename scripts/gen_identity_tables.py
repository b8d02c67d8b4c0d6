"""Write ``nrllm_core/_identity_tables.json``: the Unicode data identities are compared with.

The tables are ICU's own, read through PyICU, so that ``nrllm_core._identity`` compares people
exactly as ICU does while nrllm installs from wheels alone. ICU is a tool for this script only:
run it once per deliberate Unicode upgrade, with PyICU in the environment
(``pip install PyICU``; it builds against the system's ICU, Debian's ``libicu-dev``)::

    python scripts/gen_identity_tables.py

and review the diff: the file records the ICU and Unicode versions it was read from.

Python's ``unicodedata`` is read for one thing: which two code points a composite character
was composed of, which PyICU does not expose. Canonical decompositions never change once a
character is assigned, and the script stops unless ICU composes exactly those pairs back.
"""

from __future__ import annotations

import json
import sys
import unicodedata
from pathlib import Path
from typing import Any

import icu

OUT = Path(__file__).resolve().parent.parent / "nrllm_core" / "_identity_tables.json"
# Not characters: ICU maps none of them, and gives them the script Unknown, which is what
# nrllm_core._identity assumes of a code point no table lists.
SURROGATES = range(0xD800, 0xE000)
# Hangul syllables decompose and compose by arithmetic, in nrllm_core._identity as in ICU.
HANGUL = range(0xAC00, 0xD7A4)
# Drawn as nothing, though no Unicode property says so: these are letters or symbols by
# category, so neither Default_Ignorable_Code_Point, the format and control categories nor
# White_Space covers them. Checked by name, so that a renumbering stops the script.
BLANK_GLYPHS = {
    0x2800: "BRAILLE PATTERN BLANK",
    0x16FE4: "KHITAN SMALL SCRIPT FILLER",
    0x1D159: "MUSICAL SYMBOL NULL NOTEHEAD",
}
# ICU's UDecompositionType U_DT_NOBREAK, which PyICU does not name.
NO_BREAK = 11
# USPOOF_HIDDEN_OVERLAY (ICU 62), which PyICU does not name.
HIDDEN_OVERLAY = 256
DOT_ABOVE = "\u0307"


def code_points() -> list[int]:
    return [cp for cp in range(0x110000) if cp not in SURROGATES]


def ranges(members: list[int]) -> list[list[int]]:
    """Sorted code points as ``[first, last]`` runs."""
    runs: list[list[int]] = []
    for cp in members:
        if runs and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    return runs


def valued_ranges(values: dict[int, Any]) -> list[list[Any]]:
    """``[first, last, value]`` runs of code points that share a value."""
    runs: list[list[Any]] = []
    for cp in sorted(values):
        if runs and runs[-1][1] == cp - 1 and runs[-1][2] == values[cp]:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, values[cp]])
    return runs


def main() -> None:
    nfd = icu.Normalizer2.getNFDInstance()
    nfc = icu.Normalizer2.getNFCInstance()
    nfkd = icu.Normalizer2.getNFKDInstance()
    casefold = icu.Normalizer2.getNFKCCasefoldInstance()
    skeleton = icu.SpoofChecker()
    ignorable_set = icu.UnicodeSet("[:Default_Ignorable_Code_Point:]")
    # What never tells two people apart: the invisible code points, control and format
    # characters, spaces and line breaks, and the characters drawn as nothing.
    unseen_set = icu.UnicodeSet("[[:Default_Ignorable_Code_Point:][:Cc:][:Cf:][:White_Space:]]")
    for cp, name in BLANK_GLYPHS.items():
        if icu.Char.charName(cp) != name:
            sys.exit(f"U+{cp:04X} is not {name}")
        unseen_set.add(chr(cp))
    # Where a word ends, for the check that a name keeps to one script within each word.
    word_break_set = icu.UnicodeSet("[[:P:][:White_Space:]]")
    overlay = icu.SpoofChecker()
    overlay.setChecks(HIDDEN_OVERLAY)
    if icu.Char.getIntPropertyValue(0x2011, icu.UProperty.DECOMPOSITION_TYPE) != NO_BREAK:
        sys.exit("U+2011 is not a <noBreak> compatibility form: NO_BREAK is not ICU's")
    digit = icu.UCharCategory.DECIMAL_DIGIT_NUMBER

    ccc: dict[int, int] = {}
    decomposed: dict[str, str] = {}
    compatible: dict[str, str] = {}
    folded: dict[str, str] = {}
    pairs: dict[str, str] = {}
    ignorable: list[int] = []
    unseen: list[int] = []
    dot_leads: list[int] = []
    no_break: list[int] = []
    word_breaks: list[int] = []
    caseless: dict[str, str] = {}
    confusable: dict[str, str] = {}
    script: dict[int, str] = {}
    extensions: dict[int, str] = {}
    names: dict[str, str] = {}
    zeros: set[int] = set()

    for cp in code_points():
        char = chr(cp)
        if klass := icu.Char.getCombiningClass(cp):
            ccc[cp] = klass
        canonical = str(nfd.normalize(char))
        if canonical != char and cp not in HANGUL:
            decomposed[char] = canonical
        compat = str(nfkd.normalize(char))
        if compat != canonical and cp not in HANGUL:
            compatible[char] = compat
        if ignorable_set.contains(char):
            ignorable.append(cp)
        if unseen_set.contains(char):
            unseen.append(cp)
        # ICU looks for a hidden dot only after a base character or a mark of the dot's
        # class, and checks the text as written: a dot it flags after ``char`` is hidden.
        if klass in (0, 230) and overlay.check(char + DOT_ABOVE) & HIDDEN_OVERLAY:
            dot_leads.append(cp)
        if word_break_set.contains(char):
            word_breaks.append(cp)
        if icu.Char.getIntPropertyValue(cp, icu.UProperty.DECOMPOSITION_TYPE) == NO_BREAK:
            no_break.append(cp)
        # Canonical caseless matching (The Unicode Standard, 3.13): NFD, full case folding,
        # NFD again; kept only where it is not the canonical decomposition.
        caseless_fold = str(nfd.normalize(str(icu.UnicodeString(canonical).foldCase())))
        if caseless_fold != canonical and cp not in HANGUL:
            caseless[char] = caseless_fold
        # What NFKC_Casefold maps the character to, decomposed as the normalizer works on it;
        # kept only where it is not what NFKD (or, for an ignorable, nothing) already gives.
        fold = str(nfd.normalize(str(casefold.normalize(char))))
        if fold != ("" if ignorable_set.contains(char) else compat):
            folded[char] = fold
        if canonical != char and str(nfc.normalize(canonical)) == char and cp not in HANGUL:
            pairs[composed_of(char, canonical, nfd, nfc)] = char
        # Only characters NFD leaves alone ever reach the skeleton's mapping.
        if canonical == char and (prototype := str(skeleton.getSkeleton(0, char))) != char:
            confusable[char] = prototype
        code = icu.Script.getScript(cp)
        short = code.getShortName()
        names[short] = code.getName()
        script[cp] = short
        extended = sorted(icu.Script(c).getShortName() for c in icu.Script.getScriptExtensions(cp))
        if extended != [short]:
            extensions[cp] = " ".join(extended)
        if icu.Char.charType(cp) == digit:
            zeros.add(cp - int(icu.Char.getNumericValue(cp)))

    for zero in sorted(zeros):
        # Each digit system is ten code points from its zero on: Unicode's promise, which the
        # tables keep as the zeros alone.
        for value in range(10):
            if icu.Char.charType(zero + value) != digit or (
                icu.Char.getNumericValue(zero + value) != value
            ):
                sys.exit(f"U+{zero + value:04X} is not the digit {value} after U+{zero:04X}")
    tables = {
        "icu": icu.ICU_VERSION,
        "unicode": icu.UNICODE_VERSION,
        "ccc": valued_ranges(ccc),
        "nfd": decomposed,
        "nfkd": compatible,
        "nfkc_cf": folded,
        "compose": pairs,
        "ignorable": ranges(ignorable),
        "unseen": ranges(unseen),
        "dot_leads": ranges(dot_leads),
        "no_break": ranges(no_break),
        "word_breaks": ranges(word_breaks),
        "caseless": caseless,
        "skeleton": confusable,
        "script": [run for run in valued_ranges(script) if run[2] != "Zzzz"],
        "script_extensions": valued_ranges(extensions),
        "script_names": dict(sorted(names.items())),
        "digit_zeros": sorted(zeros),
    }
    write(tables)
    sizes = ", ".join(
        f"{key} {len(value)}" for key, value in tables.items() if not isinstance(value, str)
    )
    print(f"{OUT}: ICU {icu.ICU_VERSION}, Unicode {icu.UNICODE_VERSION}: {sizes}")


def composed_of(char: str, canonical: str, nfd: Any, nfc: Any) -> str:
    """The two code points ``char`` is composed of, checked against ICU's decomposition."""
    fields = unicodedata.decomposition(char).split()
    if len(fields) != 2 or fields[0].startswith("<"):
        sys.exit(f"U+{ord(char):04X}: Python's unicodedata has no canonical pair for it")
    pair = "".join(chr(int(field, 16)) for field in fields)
    if str(nfd.normalize(pair)) != canonical or str(nfc.normalize(pair)) != char:
        sys.exit(f"U+{ord(char):04X}: Python's unicodedata disagrees with ICU")
    return pair


def write(tables: dict[str, Any]) -> None:
    # One table a line: a regeneration's diff says which tables changed.
    lines = [
        f"{json.dumps(key)}:{json.dumps(value, ensure_ascii=False, separators=(',', ':'))}"
        for key, value in tables.items()
    ]
    OUT.write_text("{\n" + ",\n".join(lines) + "\n}\n", encoding="utf-8")


if __name__ == "__main__":
    main()

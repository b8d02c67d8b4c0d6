"""Who is who: the one comparison of identities, and the names configuration may not use.

Four-eyes, the approver named by ``--as`` and a plugin's owner check (a repurpose job's)
compare people through :func:`same_identity`, by way of ``Actor.same_as``, never code points.

ICU does the Unicode work (loaded by the first ``Actor`` or comparison, never at import): it
implements NFKC_Casefold, which is NFKC and case folding with every Default_Ignorable_Code_Point
removed, and the UTS #39 confusable skeleton, each from the Unicode data itself, so nothing
here copies a table that would age.
"""

from __future__ import annotations

import functools
import unicodedata
from typing import Any, Final, final

import attrs

__all__ = ["NAMES_NOBODY", "identity_key", "identity_refusal", "names_nobody", "same_identity"]

# The skeleton can leave what folding changes again (``0`` becomes ``O``): fold and skeleton
# until nothing changes. Every single code point settles within three rounds; the bound only
# keeps hostile text from buying more.
_ROUNDS: Final = 4
_NO_SCRIPT: Final = frozenset({"Common", "Inherited", "Unknown"})
# Said of an id whose key is empty. Such an id is nobody, and nobody differs from everyone: as
# an approver it would pass four-eyes against any initiator.
NAMES_NOBODY: Final = (
    "names nobody: nothing is left of it once invisible code points, spaces and case are set aside"
)


@final
@attrs.frozen(kw_only=True)
class _Unicode:
    """ICU's services; each is safe to share between threads once built."""

    casefold: Any
    nfc: Any
    nfkc: Any
    ignorable: Any
    skeleton: Any
    spoof: Any


@functools.cache
def _unicode() -> _Unicode:
    import icu

    spoof = icu.SpoofChecker()
    # A name in one script, or Latin with Han and Japanese or Korean: the mixes people
    # write. Digits from two decimal systems are a mix too.
    spoof.setChecks(icu.USpoofChecks.RESTRICTION_LEVEL | icu.USpoofChecks.MIXED_NUMBERS)
    spoof.setRestrictionLevel(icu.URestrictionLevel.HIGHLY_RESTRICTIVE)
    ignorable = icu.UnicodeSet("[:Default_Ignorable_Code_Point:]")
    ignorable.freeze()
    return _Unicode(
        casefold=icu.Normalizer2.getNFKCCasefoldInstance(),
        nfc=icu.Normalizer2.getNFCInstance(),
        nfkc=icu.Normalizer2.getNFKCInstance(),
        ignorable=ignorable,
        skeleton=icu.SpoofChecker(),
        spoof=spoof,
    )


def same_identity(first: str, second: str) -> bool:
    """Whether two ids name one person: their :func:`identity_key` is equal, or they are
    confusable as written (UTS #39, before case folding, where a capital ``I`` is an ``l``)."""
    if identity_key(first) == identity_key(second):
        return True
    return _written_skeleton(first) == _written_skeleton(second)


def identity_key(name: str) -> str:
    """``name`` as a person: NFKC_Casefold, trimmed, then the UTS #39 skeleton, folded again.

    Not for display: a skeleton is only for comparing (``emma`` has the key ``ernrna``).
    """
    unicode = _unicode()
    key = _folded(name)
    for _ in range(_ROUNDS):
        again = _folded(str(unicode.skeleton.getSkeleton(0, key)))
        if again == key:
            break
        key = again
    return key


def names_nobody(name: str) -> bool:
    """Whether ``name`` is empty as a person (``""``, spaces, ``\\u200b``): no id may be that."""
    return not identity_key(name)


def identity_refusal(name: str) -> str | None:
    """Why ``name`` cannot be a configured identity, else ``None``.

    A configured name must read as it is spelled: no invisible or control code point, no
    compatibility form, not another name's lookalike (its key is a plain ASCII name it is
    not written as), no mix of scripts. Case is visible and surrounding spaces are trimmed:
    both are allowed. The reason names code points, never the hostile text itself.
    """
    key = identity_key(name)
    if not key:
        return f"it {NAMES_NOBODY}"
    unicode = _unicode()
    for char in name.strip():
        if unicode.ignorable.contains(char):
            return f"{_described(char)} is invisible"
        if unicodedata.category(char) == "Cc":
            return f"{_described(char)} is a control character"
        compatible = str(unicode.nfkc.normalize(char))
        if compatible != str(unicode.nfc.normalize(char)):
            return f"{_described(char)} is a compatibility form of {compatible!a}"
    folded = _folded(name)
    if key.isascii() and not folded.isascii():
        other = next(char for char in folded if not char.isascii())
        return f"it reads as {key!a} but is spelled with {_described(other)}"
    if unicode.spoof.check(name):
        scripts = sorted({_script(char) for char in name} - _NO_SCRIPT)
        return f"it mixes scripts or digit systems ({', '.join(scripts)})"
    return None


def _folded(name: str) -> str:
    return str(_unicode().casefold.normalize(name)).strip()


def _written_skeleton(name: str) -> str:
    """The UTS #39 skeleton of ``name`` as written: compatibility forms and invisible code
    points gone, case kept."""
    unicode = _unicode()
    visible = "".join(char for char in name if not unicode.ignorable.contains(char))
    return str(unicode.skeleton.getSkeleton(0, str(unicode.nfkc.normalize(visible)).strip()))


def _script(char: str) -> str:
    import icu

    return str(icu.Script.getScript(char).getName())


def _described(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")

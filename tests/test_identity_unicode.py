"""Identities are compared without ICU, from Unicode tables that ship in the package: the same
comparison on every platform and every Python, whatever its ``unicodedata`` knows."""

from __future__ import annotations

import json
import sys
from importlib import resources

import pytest

from nrllm_core import _identity
from nrllm_core._identity import identity_key, identity_refusal, same_person_for_refusal


def test_identities_are_compared_without_icu(monkeypatch):
    # None in sys.modules makes `import icu` fail, as where PyICU is not installed.
    monkeypatch.setitem(sys.modules, "icu", None)
    _identity._unicode.cache_clear()
    assert identity_key("\u0430lice") == identity_key("ALICE\u200b") == "alice"
    assert same_person_for_refusal("aIice", "alice")
    assert not same_person_for_refusal("aiice", "alice")
    assert identity_refusal("ivan\u0438") == "it mixes scripts or digit systems (Cyrillic, Latin)"


def test_the_tables_ship_with_the_package_and_load():
    path = resources.files("nrllm_core").joinpath("_identity_tables.json")
    tables = json.loads(path.read_text(encoding="utf-8"))
    assert (tables["icu"], tables["unicode"]) == ("72.1", "15.0")
    unicode = _identity._unicode()
    # Default_Ignorable_Code_Point in Unicode 15.0, as tests/test_identity.py counts it.
    assert len(unicode.ignorable) == 4174
    assert unicode.skeleton["\u0430"] == "a"
    assert unicode.script("\u0430") == "Cyrl"
    assert unicode.script("\U000e0000") == "Zzzz"


@pytest.mark.parametrize(
    ("spelled", "plain"),
    [
        # U+1E030 MODIFIER LETTER CYRILLIC SMALL A, new in Unicode 15.0, is a compatibility
        # form of the Cyrillic a, which reads as a Latin one.
        ("\U0001e030lice", "alice"),
        # U+11F42 KAWI CONJOINER, new in 15.0, has combining class 9: the acute after it is
        # not blocked from the a, and composes with it.
        ("a\U00011f42\u0301", "\u00e1\U00011f42"),
    ],
)
def test_the_key_is_unicode_15s_whatever_pythons_unicodedata_knows(spelled, plain):
    assert identity_key(spelled) == identity_key(plain)


@pytest.mark.parametrize(
    "name",
    [
        "tanaka\u5c71\u7530\u305f\u308d\u3046",  # Latin, Han and Hiragana
        "kim\uae40\ucca0\uc218",  # Latin and Hangul
        "li\u674e\u3105",  # Latin, Han and Bopomofo
        "\u0438\u0432\u0430\u043d-1",  # Cyrillic with Common characters
        "\u13e3\u13b3\u13a9",  # Cherokee
    ],
)
def test_a_name_in_one_script_or_latin_with_east_asian_scripts_is_configurable(name):
    assert identity_refusal(name) is None


@pytest.mark.parametrize(
    ("name", "scripts"),
    [
        ("ivan\u0438", "Cyrillic, Latin"),
        ("a\u5c71\u305f\u308d\u3046\uae40", "Han, Hangul, Hiragana, Latin"),
        # One script, two decimal digit systems: ASCII's and Devanagari's.
        ("\u0930\u093e\u092e1\u0967", "Devanagari"),
        ("\u5c71\u75301\u0968", "Devanagari, Han"),
    ],
)
def test_a_name_mixing_scripts_or_digit_systems_is_refused(name, scripts):
    assert identity_refusal(name) == f"it mixes scripts or digit systems ({scripts})"


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        # Python's str holds surrogate code points; ICU was handed them as UTF-16, where a
        # high and a low one are the character they encode.
        ("\ud83d\ude00", "\U0001f600", True),
        ("a\udcffb", "a\udcfeb", False),
    ],
)
def test_surrogates_compare_as_icu_read_them(first, second, same):
    assert same_person_for_refusal(first, second) is same

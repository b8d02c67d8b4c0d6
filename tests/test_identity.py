"""Four-eyes compares people, not code points: a refusing check takes every spelling that reads
as one person for that person (NFKC, case folding, every character that never tells people
apart removed, the UTS #39 confusable skeleton), a granting check compares ids exactly, and the
configured names that hide characters or mix scripts within a word are refused."""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core._config import ConfigError, load_config
from nrllm_core._identity import (
    identity_key,
    identity_lookalike,
    identity_refusal,
    names_nobody,
    same_id_for_grant,
    same_person_for_refusal,
)
from nrllm_core._values import Actor

GOVERNANCE = Path(__file__).resolve().parent.parent / "docs" / "explanation" / "governance.md"
# The test oracle: Default_Ignorable_Code_Point as DerivedCoreProperties.txt (Unicode 15.0)
# lists it, copied here so that the key is checked against the standard, not against the
# library that computes it.
DEFAULT_IGNORABLE = (
    (0x00AD, 0x00AD),
    (0x034F, 0x034F),
    (0x061C, 0x061C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
)
IGNORABLES = [chr(cp) for first, last in DEFAULT_IGNORABLE for cp in range(first, last + 1)]
# Names an ordinary person writes, which must stay configurable.
PLAIN_NAMES = [
    "alice",
    "Alice",
    "demo-editor",
    "emma",
    "william",
    "b0b",
    "a.smith@example.com",
    "o'brien",
    "Anna-Lena",
    "françois",
    "Søren",
    "Łukasz",
    "Jürgen",
    "Straße",
    "Иван",
    "αλέξης",
    "山田たろう",
    "e\u0301mile",
    "\u0130rem",  # the dot of a capital I with dot above hides nothing
]
# Issue 33, item 7: real names that look like another name, configurable all the same.
LOOKALIKE_NAMES = [
    ("Ayd\u0131n", "aydin"),
    ("Y\u0131ld\u0131z", "yildiz"),
    ("\u00c6SA", "aesa"),
    ("C\u0153ur", "coeur"),
    ("O\u2019Brien", "o'brien"),
    ("Anne\u2011Marie", "anne-rnarie"),
    ("\u0421\u0430\u0440\u0430", "capa"),  # Cyrillic
    ("\u0391\u039d\u039d\u0391", "avva"),  # Greek
    # Reversed by item 7, refused before: names in one script whose letters look Latin.
    ("\u0430\u0440\u0435", "ape"),
    ("\u0131van", "ivan"),
]
# Characters drawn as nothing, or not drawn: they never tell two people apart.
UNSEEN = [
    "\x01",
    "\x7f",
    "\x9b",
    "\u00a0",
    "\u2800",
    "\u3000",
    "\u3164",
    "\ufff9",
    "\ufffb",
    "\U0001d159",
    "\U0001d173",
    "\U00016fe4",
]
ascii_names = st.text(alphabet=string.ascii_letters + string.digits + "-_.@' ", min_size=1)


def test_the_issues_spellings_are_alice() -> None:
    assert identity_key("alice\u200b") == identity_key("\u0430lice") == identity_key("alice")
    assert Actor(id="alice").same_person_for_refusal("alice\u200b")
    assert Actor(id="alice").same_person_for_refusal("\u0430lice")
    assert Actor(id="\u0430lice").same_person_for_refusal("ALICE")
    assert not Actor(id="alice").same_person_for_refusal("bob")


@pytest.mark.parametrize(
    "spelling",
    [
        "\u00adalice",  # soft hyphen
        "al\u2060ice",  # word joiner
        "\ufeffalice",  # byte order mark
        "ali\u200dce",  # zero width joiner
        "alic\u200ce",  # zero width non-joiner
        "\u202ealice",  # right-to-left override
        "alice\U000e0041",  # tag letter
        "aIice",  # a capital I, as written, is the skeleton's l
        "\uff41\uff4c\uff49\uff43\uff45",  # fullwidth
        "\U0001d41a\U0001d425\U0001d422\U0001d41c\U0001d41e",  # mathematical bold
        "\u0251lice",  # Latin alpha
        "\u03b1lice",  # Greek alpha
        "a\u04c0ice",  # Cyrillic palochka
        "al\u0456ce",  # Cyrillic i
        "alic\u0435",  # Cyrillic ie
    ],
)
def test_lookalike_and_invisible_spellings_are_one_person(spelling: str) -> None:
    assert Actor(id="alice").same_person_for_refusal(spelling)
    assert Actor(id=spelling).same_person_for_refusal("alice")


@pytest.mark.parametrize("char", UNSEEN)
def test_blank_format_and_control_characters_tell_nobody_apart(char: str) -> None:
    assert identity_key(f"ali{char}ce") == identity_key(f"alice{char}") == "alice"
    assert same_person_for_refusal("alice", f"alice{char}")
    assert same_id_for_grant("alice", f"al{char}ice")
    assert names_nobody(char)
    with pytest.raises(ValueError, match="an actor id names nobody"):
        Actor(id=char * 2)


@pytest.mark.parametrize("lead", ["i", "j", "l", "\u0131", "\u0456", "1", "I", "i\u0323"])
def test_a_dot_above_hidden_on_a_dotted_letter_is_no_letter(lead: str) -> None:
    # UTS #39's hidden overlay: the dot adds nothing one can see.
    assert identity_key(f"a{lead}\u0307b") == identity_key(f"a{lead}b")
    assert same_person_for_refusal(f"a{lead}b", f"a{lead}\u0307b")
    refusal = identity_refusal(f"a{lead}\u0307b")
    assert refusal is not None
    assert "U+0307 COMBINING DOT ABOVE is hidden" in refusal


def test_a_dot_above_on_a_letter_without_one_is_kept() -> None:
    assert not same_person_for_refusal("ab", "a\u0307b")
    assert identity_refusal("a\u0307b") is None


def test_every_default_ignorable_code_point_is_removed() -> None:
    assert len(IGNORABLES) == 4174
    survivors = [
        f"U+{ord(c):04X}" for c in IGNORABLES if identity_key(f"ali{c}ce") != identity_key("alice")
    ]
    assert survivors == []


def test_digits_fold_with_the_letters_they_look_like_in_any_case() -> None:
    # The skeleton leaves 0 as O; folded again, B0B, b0b and bob are one name.
    assert identity_key("B0B") == identity_key("bob") == identity_key("b0b")


def test_different_people_stay_different() -> None:
    names = ["alice", "aiice", "ALLCE", "bob", "carol", "emma", "françois", "francois", "Иван"]
    same = {
        (a, b) for a in names for b in names if a != b and Actor(id=a).same_person_for_refusal(b)
    }
    assert same == set()


@given(st.text(), st.sampled_from(IGNORABLES), st.integers(min_value=0))
def test_an_ignorable_code_point_anywhere_changes_nothing(text: str, ignorable: str, at: int):
    at %= len(text) + 1
    assert identity_key(text[:at] + ignorable + text[at:]) == identity_key(text)


@given(ascii_names)
def test_case_and_surrounding_space_change_nothing(name: str) -> None:
    key = identity_key(name)
    assert identity_key(name.upper()) == identity_key(name.lower()) == key
    assert identity_key(f" {name}\t") == key


@given(st.text(alphabet=string.ascii_letters + string.digits + "-_.@", min_size=1))
def test_fullwidth_forms_are_the_ascii_name(name: str) -> None:
    fullwidth = "".join(chr(ord(c) + 0xFEE0) for c in name)
    assert identity_key(fullwidth) == identity_key(name)


@given(st.text())
def test_the_key_is_its_own_key(text: str) -> None:
    key = identity_key(text)
    assert identity_key(key) == key


# Ids that name nobody: empty once compared as people.
NOBODY = [
    "",
    " ",
    "\t\n",
    "\u200b",
    "\u00ad\u2060\ufeff",
    " \u200d\u3000",
    "\U000e0041",
    "\u2800",
    "\x01",
    "\x7f\x9b",
    "\ufff9\ufffa\ufffb",
    "\U0001d159\u1160",
]
someone = st.text().filter(identity_key)


@pytest.mark.parametrize("name", NOBODY)
def test_an_id_that_names_nobody_is_no_actor(name: str) -> None:
    assert names_nobody(name)
    # Nobody differs from everyone: as an approver it would pass any four-eyes check.
    with pytest.raises(ValueError, match="an actor id names nobody"):
        Actor(id=name)


@pytest.mark.parametrize("name", NOBODY)
def test_a_configured_id_that_names_nobody_is_refused(name: str) -> None:
    assert identity_refusal(name) is not None
    with pytest.raises(ConfigError, match=r"actor\.id: refused: it names nobody"):
        load_config(data={"actor": {"id": name}})


# -- refusing and granting ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("first", "second"),
    [("kim", "kirn"), ("Turner", "Tumer"), ("Amy", "Arny"), ("alice", "\u0430lice")],
)
def test_lookalikes_are_one_person_for_refusing_never_for_granting(first: str, second: str):
    assert same_person_for_refusal(first, second)
    assert Actor(id=first).same_person_for_refusal(second)
    assert not same_id_for_grant(first, second)
    assert not Actor(id=first).same_id_for_grant(second)


@pytest.mark.parametrize(
    "spelling",
    ["kim", "Kim", "KIM", " kim\t", "k\u200bim", "\u00adKIM", "ki\u2800m"],
)
def test_a_grant_sets_aside_case_and_unseen_characters_only(spelling: str) -> None:
    assert same_id_for_grant("kim", spelling)
    assert Actor(id=spelling).same_id_for_grant("kim")


def test_a_grant_compares_canonical_equivalents_and_case_folds() -> None:
    assert same_id_for_grant("\u00e9mile", "E\u0301MILE")
    assert same_id_for_grant("Stra\u00dfe", "STRASSE")
    # Compatibility forms and look-alike digits are other ids.
    assert not same_id_for_grant("alice", "\uff41lice")
    assert not same_id_for_grant("bob", "b0b")


@given(st.text(), st.sampled_from(["upper", "lower", "swapcase", "title"]))
def test_what_a_grant_takes_for_one_id_a_refusal_takes_for_one_person(text: str, how: str):
    other = getattr(text, how)()
    if same_id_for_grant(text, other):
        assert same_person_for_refusal(text, other)


@given(someone, someone)
def test_same_person_for_refusal_is_symmetric(first: str, second: str) -> None:
    forth = Actor(id=first).same_person_for_refusal(second)
    assert forth == Actor(id=second).same_person_for_refusal(first)
    assert Actor(id=first).same_person_for_refusal(first)


# -- configured names ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("alice\u200b", "U+200B ZERO WIDTH SPACE is invisible"),
        ("\u00adalice", "U+00AD SOFT HYPHEN is invisible"),
        ("al\ufeffice", "U+FEFF ZERO WIDTH NO-BREAK SPACE is invisible"),
        ("alice\x1b[2K", "U+001B is a control character"),
        ("\uff41lice", "U+FF41 FULLWIDTH LATIN SMALL LETTER A is a compatibility form of 'a'"),
        ("\ufb01ona", "U+FB01 LATIN SMALL LIGATURE FI is a compatibility form of 'fi'"),
        (
            "\u0430lice",
            "reads as 'alice' but is spelled with U+0430 CYRILLIC SMALL LETTER A",
        ),
        ("user\u0661\u2800", "U+2800 BRAILLE PATTERN BLANK is a format, space or blank"),
        ("alice\ufff9", "U+FFF9 INTERLINEAR ANNOTATION ANCHOR is a format, space or blank"),
        ("alice\x9b", "U+009B is a control character"),
        ("al\u3000ice", "U+3000 IDEOGRAPHIC SPACE is a format, space or blank character"),
        ("ali\u0307ce", "U+0307 COMBINING DOT ABOVE is hidden by the letter it follows"),
        ("\u0430lic\u00e9", "it mixes scripts or digit systems (Cyrillic, Latin)"),
        ("r\u0967d", "it mixes scripts or digit systems (Devanagari, Latin)"),
        ("user\u0661", "reads as 'userl' but is spelled with U+0661 ARABIC-INDIC DIGIT ONE"),
    ],
)
def test_a_configured_name_that_reads_as_another_is_refused(name: str, reason: str) -> None:
    refusal = identity_refusal(name)
    assert refusal is not None
    assert reason in refusal
    with pytest.raises(ConfigError) as refused:
        load_config(data={"actor": {"id": name}})
    assert "actor.id: refused: " in str(refused.value)
    assert reason in str(refused.value)
    # The refusal names code points; it never echoes the hostile text itself.
    assert name not in str(refused.value)


@pytest.mark.parametrize("name", PLAIN_NAMES)
def test_an_ordinary_name_is_configurable(name: str) -> None:
    assert identity_refusal(name) is None
    assert load_config(data={"actor": {"id": name}}).actor().id == name


@pytest.mark.parametrize(("name", "reads_as"), LOOKALIKE_NAMES)
def test_a_real_name_that_looks_like_another_is_configurable(name: str, reads_as: str) -> None:
    assert identity_refusal(name) is None
    assert load_config(data={"actor": {"id": name}}).actor().id == name
    lookalike = identity_lookalike(name)
    assert lookalike is not None
    assert f"it reads as {reads_as!a} but is spelled with U+" in lookalike


@pytest.mark.parametrize(
    "name",
    ["user_\u0664\u0662", "\u0418\u0432\u0430\u043d Smith", "anna.\u03b1\u03bd\u03bd\u03b1"],
)
def test_each_word_of_a_name_may_keep_to_its_own_script(name: str) -> None:
    assert identity_refusal(name) is None


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("user\u0664\u0662", "it mixes scripts or digit systems (Arabic, Latin)"),
        ("\u0418\u0432\u0430\u043dSmith", "it mixes scripts or digit systems (Cyrillic, Latin)"),
        ("\u0430nna.anna", "it reads as 'anna.anna' but is spelled with U+0430"),
    ],
)
def test_a_word_that_mixes_scripts_is_refused(name: str, reason: str) -> None:
    refusal = identity_refusal(name)
    assert refusal is not None
    assert reason in refusal


# Spaces alone name nobody (refused above); with anything else they are allowed.
@given(ascii_names.filter(str.strip))
def test_no_printable_ascii_name_is_refused(name: str) -> None:
    assert identity_refusal(name) is None


@given(st.sampled_from(PLAIN_NAMES), st.sampled_from(IGNORABLES), st.integers(min_value=0))
def test_an_invisible_code_point_in_a_configured_name_is_refused(
    name: str, ignorable: str, at: int
) -> None:
    at %= len(name) + 1
    refusal = identity_refusal(name[:at] + ignorable + name[at:])
    assert refusal is not None
    assert f"U+{ord(ignorable):04X}" in refusal


def test_the_governance_page_shows_the_refusal_as_it_is() -> None:
    with pytest.raises(ConfigError) as refused:
        load_config(data={"actor": {"id": "\u0430lice"}})
    page = GOVERNANCE.read_text(encoding="utf-8")
    assert f"Error: invalid configuration: nrllm.toml: {refused.value}\n" in page

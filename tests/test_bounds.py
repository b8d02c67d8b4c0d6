"""Bounding both channels: valid UTF-8, byte budgets, depth, fail closed, never a partial list."""

from __future__ import annotations

import datetime
import decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core import (
    ARTIFACTS_MAX_BYTES,
    ARTIFACTS_MAX_DEPTH,
    CONTENT_MAX_BYTES,
    ArtifactType,
    ToolArtifact,
    bound_artifacts,
    bound_content,
)
from nrllm_core._json import dumps

MARKER = "\n…[tool result truncated at 50000 bytes]"
MARKER_BYTES = len(MARKER.encode())
NOT_ENCODABLE = (ToolArtifact.text("could not be encoded", label="Artifacts omitted"),)
TOO_LARGE = (ToolArtifact.text("exceeded 50000 bytes", label="Artifacts omitted"),)


def utf8_size(text: str) -> int:
    return len(text.encode("utf-8"))


def encoded_size(artifacts: tuple[ToolArtifact, ...]) -> int:
    return len(dumps([a.to_dict() for a in artifacts]))


def nested_lists(levels: int, leaf: object = None) -> object:
    """``levels`` lists inside each other; the innermost holds ``leaf`` unless it is None."""
    value: list[object] = [] if leaf is None else [leaf]
    for _ in range(levels - 1):
        value = [value]
    return value


def test_constants():
    assert CONTENT_MAX_BYTES == 50_000
    assert ARTIFACTS_MAX_BYTES == 50_000
    assert ARTIFACTS_MAX_DEPTH == 64


# -- content ------------------------------------------------------------------------------------


def test_short_content_passes_unchanged():
    assert bound_content("hello, wörld 😀") == "hello, wörld 😀"
    assert bound_content("") == ""


def test_lone_surrogates_become_replacement_characters():
    raw = b"ok \xff\xfe end".decode("utf-8", "surrogateescape")
    assert "\udcff" in raw
    bounded = bound_content(raw)
    assert bounded == "ok \ufffd\ufffd end"
    bounded.encode("utf-8")


def test_unpaired_high_and_low_surrogates():
    assert bound_content("\ud800x\udfff") == "\ufffdx\ufffd"


@pytest.mark.parametrize(
    "char", ["a", "é", "€", "😀"], ids=["1-byte", "2-byte", "3-byte", "4-byte"]
)
def test_exactly_the_budget_passes_unchanged(char):
    width = utf8_size(char)
    text = char * (CONTENT_MAX_BYTES // width) + "a" * (CONTENT_MAX_BYTES % width)
    assert utf8_size(text) == CONTENT_MAX_BYTES
    assert bound_content(text) == text


def test_one_byte_over_is_truncated_with_the_marker():
    text = "a" * (CONTENT_MAX_BYTES + 1)
    bounded = bound_content(text)
    assert bounded == "a" * (CONTENT_MAX_BYTES - MARKER_BYTES) + MARKER
    assert utf8_size(bounded) == CONTENT_MAX_BYTES


@pytest.mark.parametrize("char", ["é", "€", "😀"], ids=["2-byte", "3-byte", "4-byte"])
@pytest.mark.parametrize("offset", [0, 1, 2, 3])
def test_truncation_cuts_on_a_code_point(char, offset):
    # The ASCII prefix moves the multibyte characters across every alignment of the cut.
    width = utf8_size(char)
    text = "a" * offset + char * (CONTENT_MAX_BYTES // width + 1)
    assert utf8_size(text) > CONTENT_MAX_BYTES
    bounded = bound_content(text)
    assert bounded.endswith(MARKER)
    head = bounded[: -len(MARKER)]
    count = len(head) - offset
    assert head == "a" * offset + char * count
    assert utf8_size(bounded) <= CONTENT_MAX_BYTES
    # The longest head that fits: one more character would not.
    assert utf8_size(head) + width + MARKER_BYTES > CONTENT_MAX_BYTES


def test_fewer_characters_than_the_budget_but_more_bytes_is_truncated():
    text = "€" * (CONTENT_MAX_BYTES // 3 + 1)
    assert len(text) < CONTENT_MAX_BYTES
    bounded = bound_content(text)
    assert bounded.endswith(MARKER)
    assert utf8_size(bounded) <= CONTENT_MAX_BYTES


def test_surrogate_replacement_counts_against_the_budget():
    # A lone surrogate is replaced by U+FFFD, three bytes, which pushes this text over budget.
    text = "a" * (CONTENT_MAX_BYTES - 1) + "\udcff"
    bounded = bound_content(text)
    assert bounded.endswith(MARKER)
    assert utf8_size(bounded) <= CONTENT_MAX_BYTES


def test_surrogates_in_the_kept_head_of_a_long_text_are_replaced():
    text = "\udc80" + "b" * (CONTENT_MAX_BYTES * 2)
    bounded = bound_content(text)
    assert bounded.startswith("\ufffdb")
    assert bounded.endswith(MARKER)
    assert utf8_size(bounded) <= CONTENT_MAX_BYTES


def test_hundred_megabytes_are_bounded():
    text = "x" * 100_000_000
    bounded = bound_content(text)
    assert bounded == "x" * (CONTENT_MAX_BYTES - MARKER_BYTES) + MARKER


@given(st.text(alphabet=st.characters(codec=None, exclude_categories=())))
def test_property_content_is_valid_utf8_and_within_budget(text):
    bounded = bound_content(text)
    assert utf8_size(bounded) <= CONTENT_MAX_BYTES
    if "\ufffd" not in text and not any("\ud800" <= c <= "\udfff" for c in text):
        assert bounded == text


@given(
    st.lists(st.sampled_from(["a", "é", "€", "😀", "\udcff", "\ud800"]), min_size=1),
    st.integers(min_value=CONTENT_MAX_BYTES // 4 - 10, max_value=CONTENT_MAX_BYTES + 10),
)
def test_property_near_the_budget(pattern, length):
    text = ("".join(pattern) * (length // len(pattern) + 1))[:length]
    bounded = bound_content(text)
    encoded = bounded.encode("utf-8")
    assert len(encoded) <= CONTENT_MAX_BYTES
    coerced = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    if utf8_size(coerced) <= CONTENT_MAX_BYTES:
        assert bounded == coerced
    else:
        assert bounded.endswith(MARKER)
        assert coerced.startswith(bounded[: -len(MARKER)])


# -- artifacts ----------------------------------------------------------------------------------


def test_no_artifacts():
    assert bound_artifacts(()) == ()
    assert bound_artifacts([]) == ()
    assert bound_artifacts(iter(())) == ()


def test_valid_artifacts_pass_unchanged_in_order():
    artifacts = (
        ToolArtifact.table(["a", "b"], [["1", "2"]], label="T"),
        ToolArtifact.text("body", label="X"),
        ToolArtifact(type=ArtifactType.TEXT, label="free", data={"n": [1, 2.5, True, None]}),
    )
    assert bound_artifacts(artifacts) == artifacts
    assert bound_artifacts(iter(artifacts)) == artifacts


class StrSubclass(str):
    pass


def cycle() -> list[object]:
    looped: list[object] = []
    looped.append(looped)
    return looped


def self_containing_dict() -> dict[str, object]:
    looped: dict[str, object] = {}
    looped["me"] = looped
    return looped


@pytest.mark.parametrize(
    "data",
    [
        {"x": float("nan")},
        {"x": float("inf")},
        {"x": [1, float("-inf")]},
        {"x": object()},
        {"x": {1, 2}},
        {"x": frozenset()},
        {"x": b"bytes"},
        {"x": datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC)},
        {"x": datetime.date(2025, 1, 1)},
        {"x": decimal.Decimal("1.5")},
        {"x": StrSubclass("s")},
        {1: "non-string key"},
        {("a",): "tuple key"},
        {"x": 2**70},
        cycle(),
        self_containing_dict(),
    ],
    ids=[
        "nan",
        "inf",
        "-inf",
        "object",
        "set",
        "frozenset",
        "bytes",
        "datetime",
        "date",
        "decimal",
        "str-subclass",
        "int-key",
        "tuple-key",
        "huge-int",
        "list-cycle",
        "dict-cycle",
    ],
)
def test_unencodable_data_omits_the_whole_list(data):
    good = ToolArtifact.text("fine", label="good")
    bad = ToolArtifact(type=ArtifactType.TEXT, label="bad", data=data)
    assert bound_artifacts([good, bad]) == NOT_ENCODABLE
    assert bound_artifacts([bad, good]) == NOT_ENCODABLE


def test_the_marker_is_a_text_artifact():
    (marker,) = NOT_ENCODABLE
    assert marker.to_dict() == {
        "type": "text",
        "label": "Artifacts omitted",
        "data": {"text": "could not be encoded"},
    }


@pytest.mark.parametrize(
    "artifact",
    [
        ToolArtifact(type="table", label="", data={"columns": [], "rows": []}),  # type: ignore[arg-type]
        ToolArtifact(type="chart", label="", data={}),  # type: ignore[arg-type]
        ToolArtifact(type=ArtifactType.TEXT, label=None, data={"text": "x"}),  # type: ignore[arg-type]
        ToolArtifact(type=ArtifactType.TEXT, label=StrSubclass("l"), data={"text": "x"}),
        {"type": "text", "label": "", "data": {"text": "x"}},
    ],
    ids=["plain-str-type", "unknown-type", "label-none", "label-str-subclass", "not-an-artifact"],
)
def test_malformed_artifacts_are_omitted(artifact):
    assert bound_artifacts([ToolArtifact.text("fine"), artifact]) == NOT_ENCODABLE


def artifact_at_depth(total_depth: int) -> ToolArtifact:
    # The outer list is level 1 and the artifact object level 2, so data adds the rest.
    return ToolArtifact(
        type=ArtifactType.TEXT, label="", data=nested_lists(total_depth - 2, "leaf")
    )


def test_depth_64_passes_and_65_fails():
    deepest = artifact_at_depth(ARTIFACTS_MAX_DEPTH)
    assert bound_artifacts([deepest]) == (deepest,)
    assert bound_artifacts([artifact_at_depth(ARTIFACTS_MAX_DEPTH + 1)]) == NOT_ENCODABLE


def test_depth_counts_dicts_as_levels_too():
    data: object = "leaf"
    for _ in range(ARTIFACTS_MAX_DEPTH - 2):
        data = {"k": data}
    fits = ToolArtifact(type=ArtifactType.TEXT, label="", data=data)
    assert bound_artifacts([fits]) == (fits,)
    too_deep = ToolArtifact(type=ArtifactType.TEXT, label="", data={"k": data})
    assert bound_artifacts([too_deep]) == NOT_ENCODABLE


def test_depth_counts_containers_only():
    # A table is five levels: list, artifact, data, rows, row; its cells add none.
    table = ToolArtifact.table(["a"], [["cell"]])
    assert bound_artifacts([table]) == (table,)
    empty = ToolArtifact(
        type=ArtifactType.TEXT, label="", data=nested_lists(ARTIFACTS_MAX_DEPTH - 2)
    )
    assert bound_artifacts([empty]) == (empty,)


def test_too_deep_with_a_lone_surrogate_still_fails_closed():
    deep = ToolArtifact(
        type=ArtifactType.TEXT, label="", data=nested_lists(ARTIFACTS_MAX_DEPTH - 1, "\udcff")
    )
    assert bound_artifacts([deep]) == NOT_ENCODABLE


def test_surrogates_at_the_deepest_level_are_coerced():
    deep = ToolArtifact(
        type=ArtifactType.TEXT, label="", data=nested_lists(ARTIFACTS_MAX_DEPTH - 2, "\udcff")
    )
    (bounded,) = bound_artifacts([deep])
    assert bounded.data == nested_lists(ARTIFACTS_MAX_DEPTH - 2, "\ufffd")


def test_lone_surrogates_in_labels_and_leaves_are_coerced():
    artifacts = [
        ToolArtifact.table(["c\udcff"], [["v\ud800"], ["ok"]], label="t\udcfe"),
        ToolArtifact.text("body \udc80", label="plain"),
        ToolArtifact(type=ArtifactType.TEXT, label="", data={"n": 1, "nested": ("\udfff",)}),
    ]
    bounded = bound_artifacts(artifacts)
    assert [a.to_dict() for a in bounded] == [
        {
            "type": "table",
            "label": "t\ufffd",
            "data": {"columns": ["c\ufffd"], "rows": [["v\ufffd"], ["ok"]]},
        },
        {"type": "text", "label": "plain", "data": {"text": "body \ufffd"}},
        {"type": "text", "label": "", "data": {"n": 1, "nested": ["\ufffd"]}},
    ]
    assert all(type(a.type) is ArtifactType for a in bounded)
    assert encoded_size(bounded) <= ARTIFACTS_MAX_BYTES


def test_over_budget_is_omitted_whole():
    big = ToolArtifact.text("x" * ARTIFACTS_MAX_BYTES, label="big")
    assert bound_artifacts([ToolArtifact.text("small"), big]) == TOO_LARGE


def test_many_small_artifacts_over_budget_are_omitted_whole():
    artifacts = [ToolArtifact.text("y" * 100) for _ in range(1000)]
    assert bound_artifacts(artifacts) == TOO_LARGE


def text_artifact_of_encoded_size(size: int) -> ToolArtifact:
    overhead = encoded_size((ToolArtifact.text(""),))
    return ToolArtifact.text("x" * (size - overhead))


def test_exactly_at_the_budget_passes():
    at_budget = text_artifact_of_encoded_size(ARTIFACTS_MAX_BYTES)
    assert encoded_size((at_budget,)) == ARTIFACTS_MAX_BYTES
    assert bound_artifacts([at_budget]) == (at_budget,)
    one_more = text_artifact_of_encoded_size(ARTIFACTS_MAX_BYTES + 1)
    assert bound_artifacts([one_more]) == TOO_LARGE


@pytest.mark.parametrize("leaf", [0, "", None], ids=["numbers", "empty-strings", "nulls"])
def test_a_long_list_of_small_leaves_at_the_budget_passes(leaf):
    # A cheap size estimate must never count a list of tiny leaves as larger than it encodes.
    empty = ToolArtifact(type=ArtifactType.TEXT, label="", data=[])
    per_item = len(dumps([leaf])) - 1
    count = (ARTIFACTS_MAX_BYTES - encoded_size((empty,)) + 1) // per_item
    artifact = ToolArtifact(type=ArtifactType.TEXT, label="", data=[leaf] * count)
    size = encoded_size((artifact,))
    assert ARTIFACTS_MAX_BYTES - per_item < size <= ARTIFACTS_MAX_BYTES
    assert bound_artifacts([artifact]) == (artifact,)


def test_multibyte_text_is_measured_in_bytes():
    chars = (ARTIFACTS_MAX_BYTES - encoded_size((ToolArtifact.text(""),))) // 3 + 1
    artifact = ToolArtifact.text("€" * chars)
    assert bound_artifacts([artifact]) == TOO_LARGE


def test_million_row_table_is_bounded_to_the_marker():
    rows = [["cell"]] * 1_000_000
    table = ToolArtifact(
        type=ArtifactType.TABLE, label="huge", data={"columns": ["c"], "rows": rows}
    )
    assert bound_artifacts([table]) == TOO_LARGE


def test_hundred_megabyte_label_is_bounded_to_the_marker():
    artifact = ToolArtifact.text("", label="l" * 100_000_000)
    assert bound_artifacts([artifact]) == TOO_LARGE


def test_bounding_does_not_mutate_the_input():
    data = {"text": "a\udcff"}
    artifact = ToolArtifact(type=ArtifactType.TEXT, label="", data=data)
    bound_artifacts([artifact])
    assert data == {"text": "a\udcff"}

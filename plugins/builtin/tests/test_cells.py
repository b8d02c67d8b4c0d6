"""The one cell formatter and the one pass: what the text hides, the artifact hides too."""

from __future__ import annotations

import datetime

from hypothesis import given
from hypothesis import strategies as st

from nrllm_builtin._cells import RecordTable, format_cell, shows_whole
from nrllm_core import CONTENT_MAX_BYTES
from nrllm_core.redact import mask_secrets

SECRETS = st.sampled_from(
    [
        "sk-abcdefghijklmnopqrstuvwx",
        "ghp_" + "A" * 36,
        "AKIAABCDEFGHIJKLMNOP",
        "someone@example.com",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    ]
)
VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=400),
    st.tuples(st.text(max_size=200), SECRETS, st.text(max_size=200)).map(
        lambda parts: f"{parts[0]} {parts[1]} {parts[2]}"
    ),
)


def render(rows, max_bytes=CONTENT_MAX_BYTES):
    table = RecordTable("t", ["id", "a", "b"], "id", max_bytes=max_bytes)
    for row in rows:
        table.add(row)
    return "\n".join(table.lines), table.artifact("t records").data


@given(st.lists(st.tuples(st.integers(), VALUES, VALUES), max_size=8))
def test_the_artifact_never_holds_a_cell_the_text_does_not(rows):
    text, data = render(rows)

    lines = text.splitlines()
    for index, cells in enumerate(data["rows"]):
        assert lines[3 * index] == f"- t:{cells[0]}"
        assert lines[3 * index + 1] == f"  a: {cells[1]}"
        assert lines[3 * index + 2] == f"  b: {cells[2]}"
    assert len(lines) == 3 * len(data["rows"])


@given(st.text(max_size=100), SECRETS, st.text(max_size=100))
def test_a_value_masked_in_the_text_is_masked_in_the_artifact(before, secret, after):
    value = f"{before} {secret} {after}"
    text, data = render([(1, value, None)])

    assert secret not in text
    assert secret not in data["rows"][0][1]
    assert data["rows"][0][1] in text


@given(VALUES)
def test_a_cell_is_one_masked_line_of_at_most_300_characters_plus_ellipsis(value):
    cell = format_cell(value)

    assert not any(ch in cell for ch in "\n\r\t\f\v\x85\u2028\u2029")
    assert len(cell) <= 301
    if len(cell) == 301:
        assert cell.endswith("…")
    else:
        assert mask_secrets(cell) == cell


def test_format_cell_spells_scalars_and_caps_after_masking():
    assert format_cell(None) == "null"
    assert format_cell(True) == "true"
    assert format_cell(False) == "false"
    assert format_cell(12) == "12"
    assert format_cell(b"\x00\x01") == "(binary, 2 bytes)"
    assert format_cell(datetime.date(2026, 1, 2)) == "2026-01-02"
    assert format_cell("  a \n\t b  ") == "a b"
    assert format_cell("x" * 301) == "x" * 300 + "…"
    assert format_cell("x" * 300) == "x" * 300
    # 290 characters, then a key that runs past the cap: masked whole, never cut into a stub.
    masked = format_cell("y" * 290 + " sk-" + "k" * 40)
    assert masked == "y" * 290 + " sk-***"


@given(st.lists(st.tuples(st.integers(), VALUES, VALUES), max_size=8), st.integers(0, 3000))
def test_rows_past_the_byte_budget_reach_neither_channel(rows, max_bytes):
    text, data = render(rows, max_bytes)

    lines = text.splitlines()
    # Each line is counted with one newline: the one joining it to the header above.
    assert sum(len(line.encode()) + 1 for line in lines) <= max_bytes
    assert len(lines) == 3 * len(data["rows"])
    assert [row[0] for row in data["rows"]] == [format_cell(row[0]) for row in rows][
        : len(data["rows"])
    ]


def test_once_a_row_does_not_fit_no_later_row_is_added():
    table = RecordTable("t", ["id", "a"], "id", max_bytes=40)

    assert table.add((1, "short"))
    assert not table.add((2, "x" * 100))
    assert not table.add((3, "s"))
    assert table.lines == ["- t:1", "  a: short"]
    assert table.artifact("t").data["rows"] == [["1", "short"]]


def test_names_pass_through_the_cell_formatter():
    table = RecordTable("t\nx", ["id", "evil\ncolumn"], "id", max_bytes=1000)
    table.add((1, "v"))

    assert table.lines == ["- t x:1", "  evil column: v"]
    assert table.artifact("t").data["columns"] == ["id", "evil column"]


def test_shows_whole_is_false_only_when_the_cell_hides_part_of_the_value():
    assert shows_whole("plain text")
    assert shows_whole("two\nlines")
    assert shows_whole(12)
    assert shows_whole(None)
    assert shows_whole(datetime.date(2026, 1, 2))
    assert not shows_whole("write to press@example.org")
    assert not shows_whole("sk-abcdefghijklmnopqrstuvwx")
    assert not shows_whole("x" * 301)
    assert not shows_whole(b"abc")

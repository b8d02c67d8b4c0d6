"""The server-sent-events parser: the format's rules, and chunk boundaries that change nothing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core.providers._sse import ServerSentEvent, SseParser


def parse(*chunks: bytes) -> list[ServerSentEvent]:
    parser = SseParser()
    return [event for chunk in chunks for event in parser.feed(chunk)] + parser.close()


def event(data: str, kind: str = "message") -> ServerSentEvent:
    return ServerSentEvent(event=kind, data=data)


@pytest.mark.parametrize("end", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_every_line_ending_ends_a_line(end):
    stream = end.join([b"event: add", b"data: 1", b"", b"data: 2", b"", b""])

    assert parse(stream) == [event("1", "add"), event("2")]


def test_data_lines_are_joined_with_newlines_and_one_leading_space_is_dropped():
    assert parse(b"data:  a\ndata:b\ndata\ndata: \n\n") == [event(" a\nb\n\n")]


def test_comments_unknown_fields_and_empty_events_dispatch_nothing():
    stream = b": keep-alive\nid: 7\nretry: 100\nwhatever: x\n\nevent: only\n\ndata: x\n\n"

    assert parse(stream) == [event("x")]


def test_an_event_name_lasts_for_one_event():
    assert parse(b"event: a\ndata: 1\n\ndata: 2\n\n") == [event("1", "a"), event("2")]


def test_a_leading_byte_order_mark_is_dropped_once():
    assert parse("\ufeffdata: 1\n\n\ufeffdata: 2\n\n".encode()) == [event("1")]


def test_an_unfinished_event_is_never_dispatched():
    parser = SseParser()

    assert parser.feed(b"data: 1\n\ndata: 2\n") == [event("1")]
    assert parser.feed(b"data: 3") == []
    assert parser.close() == []


def test_a_cr_at_the_end_of_the_stream_ends_its_last_line():
    parser = SseParser()

    assert parser.feed(b"data: 1\r\r") == []
    assert parser.close() == [event("1")]


def test_a_crlf_split_between_chunks_is_one_line_end():
    assert parse(b"data: 1\r", b"\n\r", b"\ndata: 2\r\n\r\n") == [event("1"), event("2")]


def test_a_line_in_many_chunks_is_one_line():
    data = "x" * 5000
    chunks = [c.encode() for c in f"data: {data}\n\n"]

    assert parse(*chunks) == [event(data)]


def test_invalid_utf8_is_replaced_not_fatal():
    assert parse(b"data: \xff\xfe ok\n\n") == [event("\ufffd\ufffd ok")]


_TEXT = st.text(st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)))
_EVENTS = st.lists(
    st.tuples(st.sampled_from(["", "delta", "stop"]), st.lists(_TEXT, min_size=1, max_size=3)),
    max_size=6,
)


@given(events=_EVENTS, end=st.sampled_from(["\n", "\r\n", "\r"]), data=st.data())
def test_any_split_of_a_stream_gives_the_same_events(events, end, data):
    lines: list[str] = []
    for kind, values in events:
        if kind:
            lines.append(f"event: {kind}")
        lines.extend(f"data: {value}" for value in values)
        lines.append("")
    stream = "".join(line + end for line in lines).encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    chunks = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]

    assert parse(*chunks) == [
        event("\n".join(values), kind or "message") for kind, values in events
    ]

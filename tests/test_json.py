"""The one canonical JSON encoder: compact UTF-8, NaN and Infinity refused, no foreign types."""

from __future__ import annotations

import dataclasses
import datetime
import json
import threading

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core._json import EncodeError, dumps, dumps_bounded_depth, loads

no_surrogates = st.text(alphabet=st.characters(exclude_categories=("Cs",)))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | no_surrogates,
    lambda children: st.lists(children) | st.dictionaries(no_surrogates, children),
    max_leaves=30,
)


def nested(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def test_compact_utf8_output():
    assert dumps({"a": [1, 2.5, None, True], "b": "é😀"}) == (
        '{"a":[1,2.5,null,true],"b":"é😀"}'.encode()
    )


def test_encode_error_is_a_value_error():
    assert issubclass(EncodeError, ValueError)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), float("-inf"), [1.0, float("nan")], {"a": {"b": float("inf")}}],
    ids=["nan", "inf", "-inf", "nested-list", "nested-dict"],
)
def test_non_finite_numbers_are_refused(value):
    with pytest.raises(EncodeError, match="NaN and Infinity"):
        dumps(value)


def test_null_alone_is_not_mistaken_for_nan():
    assert dumps([None, "null", 1.5]) == b'[null,"null",1.5]'


@dataclasses.dataclass
class Point:
    x: int


class MyStr(str):
    pass


class MyInt(int):
    pass


class MyDict(dict[str, int]):
    pass


class MyList(list[int]):
    pass


@pytest.mark.parametrize(
    "value",
    [
        datetime.datetime(2025, 1, 1, tzinfo=datetime.UTC),
        datetime.date(2025, 1, 1),
        datetime.time(12, 0),
        Point(1),
        MyStr("s"),
        MyInt(1),
        MyDict(a=1),
        MyList([1]),
        b"bytes",
        {1, 2},
        object(),
        {1: "int key"},
        2**64,
    ],
    ids=[
        "datetime",
        "date",
        "time",
        "dataclass",
        "str-subclass",
        "int-subclass",
        "dict-subclass",
        "list-subclass",
        "bytes",
        "set",
        "object",
        "int-key",
        "huge-int",
    ],
)
def test_foreign_types_are_refused(value):
    with pytest.raises(EncodeError):
        dumps(value)
    with pytest.raises(EncodeError):
        dumps({"nested": [value]})


def test_lone_surrogates_are_refused():
    with pytest.raises(EncodeError):
        dumps("\udcff")


def test_cycles_are_refused():
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(EncodeError):
        dumps(looped)


@pytest.mark.parametrize("limit", [1, 2, 5, 64, 200])
def test_bounded_depth_limit_is_exact(limit):
    assert dumps_bounded_depth(nested(limit), limit) == dumps(nested(limit))
    with pytest.raises(EncodeError):
        dumps_bounded_depth(nested(limit + 1), limit)


def test_bounded_depth_counts_dicts():
    value: object = 1
    for _ in range(3):
        value = {"k": value}
    assert dumps_bounded_depth(value, 3) == b'{"k":{"k":{"k":1}}}'
    with pytest.raises(EncodeError):
        dumps_bounded_depth(value, 2)


def test_bounded_depth_refuses_what_dumps_refuses():
    with pytest.raises(EncodeError):
        dumps_bounded_depth({"x": float("nan")}, 64)
    with pytest.raises(EncodeError):
        dumps_bounded_depth({"x": object()}, 64)


def test_bounded_depth_keeps_no_reference_after_a_failure():
    with pytest.raises(EncodeError):
        dumps_bounded_depth([object()], 64)
    assert dumps_bounded_depth("after", 64) == b'"after"'


def test_bounded_depth_is_safe_across_threads():
    results: dict[int, bytes] = {}

    def encode(n: int) -> None:
        for _ in range(200):
            results[n] = dumps_bounded_depth({"n": n}, 64)

    threads = [threading.Thread(target=encode, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {n: f'{{"n":{n}}}'.encode() for n in range(8)}


def test_loads_refuses_nan_and_infinity():
    with pytest.raises(orjson.JSONDecodeError):
        loads("NaN")
    with pytest.raises(orjson.JSONDecodeError):
        loads("[Infinity]")


@given(json_values)
def test_property_round_trip_and_agreement_with_stdlib(value):
    encoded = dumps(value)
    assert loads(encoded) == value
    assert json.loads(encoded) == value
    assert dumps_bounded_depth(value, 64) == encoded


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": [1, 2.5, True, None, "x"]}, True),
        ((1, 2), False),
        ({1: "a"}, False),
        (float("nan"), False),
        ([float("inf")], False),
        (b"a", False),
        ({"a"}, False),
        (type("S", (str,), {})("subclass"), False),
    ],
)
def test_is_json_takes_exact_json_types_only(value: object, expected: bool) -> None:
    from nrllm_core._json import is_json

    assert is_json(value) is expected


def test_is_json_is_bounded_in_depth_and_ends_on_a_cycle() -> None:
    from nrllm_core._json import is_json

    nested: list[object] = []
    deep: list[object] = nested
    for _ in range(10):
        deep.append([])
        deep = deep[0]  # type: ignore[assignment]
    assert is_json(nested, 11)
    assert not is_json(nested, 10)
    cycle: list[object] = []
    cycle.append(cycle)
    assert not is_json(cycle)

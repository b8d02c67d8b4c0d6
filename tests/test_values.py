"""The value objects: results only through factories, artifacts, ranked data classes, zones."""

from __future__ import annotations

import itertools

import attrs
import pytest

from nrllm_core import ArtifactType, DataClass, Effect, ToolArtifact, ToolResult, TrustZone

SENTINEL = "SENTINEL-artifact-data-7f3a"

# Written out here rather than read from the code, so that the tests pin the specification.
DATA_CLASS_ORDER = [
    DataClass.PUBLIC_CONTENT,
    DataClass.EDITOR_CONTENT,
    DataClass.SOURCE_CODE,
    DataClass.INTERNAL_CONFIGURATION,
    DataClass.SYSTEM_DIAGNOSTICS,
    DataClass.SECRET_ADJACENT,
]
CEILINGS = {
    TrustZone.LOCAL: DataClass.SECRET_ADJACENT,
    TrustZone.PRIVATE_HOSTED: DataClass.SYSTEM_DIAGNOSTICS,
    TrustZone.EXTERNAL_EU: DataClass.INTERNAL_CONFIGURATION,
    TrustZone.EXTERNAL_GLOBAL: DataClass.EDITOR_CONTENT,
}


# -- ToolResult ---------------------------------------------------------------------------------


def test_direct_construction_is_refused_naming_the_factories():
    with pytest.raises(TypeError, match=r"ToolResult\.text.*ToolResult\.error"):
        ToolResult(content="x", is_error=False, artifacts=())


def test_direct_construction_with_a_forged_token_is_refused():
    with pytest.raises(TypeError, match=r"ToolResult\.text"):
        ToolResult(content="x", is_error=False, artifacts=(), _token=object())


def test_text_factory_keeps_content_and_artifacts_in_order():
    first = ToolArtifact.text("a", label="one")
    second = ToolArtifact.table(["c"], [["v"]], label="two")
    result = ToolResult.text("hello", first, second)
    assert result.content == "hello"
    assert result.is_error is False
    assert result.artifacts == (first, second)


def test_error_factory_has_no_artifacts_and_takes_none():
    result = ToolResult.error("broken")
    assert result.content == "broken"
    assert result.is_error is True
    assert result.artifacts == ()
    with pytest.raises(TypeError):
        ToolResult.error("broken", ToolArtifact.text("x"))  # type: ignore[call-arg]


@pytest.mark.parametrize("content", [None, b"bytes", 3])
def test_factories_refuse_non_string_content(content):
    with pytest.raises(TypeError, match="str"):
        ToolResult.text(content)
    with pytest.raises(TypeError, match="str"):
        ToolResult.error(content)


def test_text_factory_refuses_non_artifacts():
    with pytest.raises(TypeError, match="ToolArtifact"):
        ToolResult.text("x", {"type": "text", "label": "", "data": {"text": "y"}})


@pytest.mark.parametrize(
    "convert",
    [str, format, lambda r: f"{r}", lambda r: f"{r:>10}", lambda r: "{}".format(r)],  # noqa: UP032
    ids=["str", "format", "f-string", "f-string-spec", "str.format"],
)
def test_no_implicit_string_form(convert):
    result = ToolResult.text("content", ToolArtifact.text(SENTINEL))
    with pytest.raises(TypeError, match=r"\.content"):
        convert(result)


def test_repr_shows_sizes_and_types_but_never_artifact_data():
    result = ToolResult.text(
        "twelve chars",
        ToolArtifact.table(["k"], [[SENTINEL]], label=f"label {SENTINEL}"),
        ToolArtifact.text(SENTINEL),
    )
    text = repr(result)
    assert SENTINEL not in text
    assert "<12 chars>" in text
    assert "artifacts=2" in text
    assert "table" in text
    assert "text" in text
    assert "is_error=False" in text


def test_repr_never_shows_content_either():
    assert SENTINEL not in repr(ToolResult.error(SENTINEL))


def test_result_is_frozen_and_slotted():
    result = ToolResult.text("x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        result.content = "y"  # type: ignore[misc]
    assert not hasattr(result, "__dict__")


def test_results_compare_by_value():
    assert ToolResult.text("x", ToolArtifact.text("a")) == ToolResult.text(
        "x", ToolArtifact.text("a")
    )
    assert ToolResult.text("x") != ToolResult.error("x")


# -- ToolArtifact -------------------------------------------------------------------------------


def test_table_to_dict_shape():
    artifact = ToolArtifact.table(("a", "b"), [("1", "2"), ["3", "4"]], label="T")
    assert artifact.to_dict() == {
        "type": "table",
        "label": "T",
        "data": {"columns": ["a", "b"], "rows": [["1", "2"], ["3", "4"]]},
    }
    assert artifact.type is ArtifactType.TABLE


def test_table_accepts_any_iterable_of_rows():
    artifact = ToolArtifact.table(["n"], ([str(i)] for i in range(3)))
    assert artifact.data["rows"] == [["0"], ["1"], ["2"]]
    assert artifact.label == ""


def test_text_to_dict_shape():
    artifact = ToolArtifact.text("body", label="L")
    assert artifact.to_dict() == {"type": "text", "label": "L", "data": {"text": "body"}}
    assert artifact.type is ArtifactType.TEXT


@pytest.mark.parametrize(
    ("rows", "row_index"),
    [
        ([["1", "2"], ["3"]], 1),
        ([["1", "2", "3"]], 0),
        ([["1", "2"], ["3", "4"], ["5", 6]], 2),
        ([[None, "x"]], 0),
    ],
)
def test_table_rejects_a_bad_row_naming_it(rows, row_index):
    with pytest.raises(ValueError, match=rf"\brow {row_index}\b"):
        ToolArtifact.table(["a", "b"], rows)


def test_table_rejects_non_string_columns():
    with pytest.raises(ValueError, match="columns"):
        ToolArtifact.table(["a", 1], [])


def test_text_rejects_non_string():
    with pytest.raises(ValueError, match="string"):
        ToolArtifact.text(b"bytes")  # type: ignore[arg-type]


def test_constructor_is_public_keyword_only_and_does_not_validate_data():
    odd = object()
    artifact = ToolArtifact(type=ArtifactType.TEXT, label="x", data=odd)
    assert artifact.data is odd
    with pytest.raises(TypeError):
        ToolArtifact(ArtifactType.TEXT, "x", {})  # type: ignore[misc]


def test_artifact_is_frozen():
    artifact = ToolArtifact.text("x")
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        artifact.label = "y"  # type: ignore[misc]


def test_artifact_types_are_a_closed_set():
    assert {t.value for t in ArtifactType} == {"table", "text"}


# -- DataClass ------------------------------------------------------------------------------------


def test_data_class_values():
    assert [d.value for d in DATA_CLASS_ORDER] == [
        "publicContent",
        "editorContent",
        "sourceCode",
        "internalConfiguration",
        "systemDiagnostics",
        "secretAdjacent",
    ]
    assert list(DataClass) == DATA_CLASS_ORDER


@pytest.mark.parametrize(
    ("low", "high"), list(itertools.combinations(DATA_CLASS_ORDER, 2)), ids=str
)
def test_data_class_ordering_follows_rank(low, high):
    assert low < high
    assert low <= high
    assert high > low
    assert high >= low
    assert not high < low
    assert not high <= low
    assert not low > high
    assert not low >= high
    assert max(low, high) is high
    assert max(high, low) is high
    assert min(low, high) is low
    assert min(high, low) is low


def test_ordering_is_not_alphabetical():
    # Alphabetically "editorContent" < "publicContent" and "secretAdjacent" < "systemDiagnostics".
    assert DataClass.EDITOR_CONTENT > DataClass.PUBLIC_CONTENT
    assert DataClass.SECRET_ADJACENT > DataClass.SYSTEM_DIAGNOSTICS
    assert max(DataClass) is DataClass.SECRET_ADJACENT
    assert min(DataClass) is DataClass.PUBLIC_CONTENT
    assert sorted(reversed(DATA_CLASS_ORDER)) == DATA_CLASS_ORDER


def test_data_class_is_equal_to_itself():
    for d in DataClass:
        assert d <= d
        assert d >= d
        assert not d < d


@pytest.mark.parametrize(
    "compare",
    [
        lambda: DataClass.SECRET_ADJACENT <= "systemDiagnostics",
        lambda: "systemDiagnostics" >= DataClass.SECRET_ADJACENT,  # noqa: SIM300 - reflected
        lambda: DataClass.PUBLIC_CONTENT < "zzz",
        lambda: DataClass.PUBLIC_CONTENT > TrustZone.LOCAL,
        lambda: max([DataClass.PUBLIC_CONTENT, "secretAdjacent"]),
    ],
    ids=["le-str", "str-ge", "lt-str", "gt-zone", "max-mixed"],
)
def test_ordering_against_anything_else_is_refused(compare):
    # A plain string would otherwise be compared by spelling, which is not the rank.
    with pytest.raises(TypeError):
        compare()


def test_data_class_is_a_string_enum_for_json():
    assert DataClass.SOURCE_CODE == "sourceCode"
    assert DataClass("sourceCode") is DataClass.SOURCE_CODE


# -- TrustZone ------------------------------------------------------------------------------------


def test_trust_zone_values_and_ceilings():
    assert [z.value for z in TrustZone] == [
        "local",
        "privateHosted",
        "externalEu",
        "externalGlobal",
    ]
    for zone, ceiling in CEILINGS.items():
        assert zone.ceiling is ceiling


@pytest.mark.parametrize(
    ("zone", "data_class"), list(itertools.product(TrustZone, DataClass)), ids=str
)
def test_trust_zone_permits(zone, data_class):
    expected = DATA_CLASS_ORDER.index(data_class) <= DATA_CLASS_ORDER.index(CEILINGS[zone])
    assert zone.permits(data_class) is expected


def test_external_global_refuses_source_code_and_local_permits_everything():
    assert not TrustZone.EXTERNAL_GLOBAL.permits(DataClass.SOURCE_CODE)
    assert all(TrustZone.LOCAL.permits(d) for d in DataClass)


# -- Effect ---------------------------------------------------------------------------------------


def test_effect_values():
    assert {e.value for e in Effect} == {"read_only", "idempotent_write", "non_idempotent_write"}
    assert Effect("read_only") is Effect.READ_ONLY


@pytest.mark.parametrize(
    ("effect", "is_write"),
    [
        (Effect.READ_ONLY, False),
        (Effect.IDEMPOTENT_WRITE, True),
        (Effect.NON_IDEMPOTENT_WRITE, True),
    ],
)
def test_effect_is_write(effect, is_write):
    assert effect.is_write is is_write

"""The one privacy filter between a run step and the audit store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core import RunRecorder, RunStep, StepKind, ToolArtifact, _privacy, make_plugin_manager
from nrllm_core._json import dumps
from nrllm_core._privacy import (
    CONTENT_KEYS,
    FINISH_REASONS,
    PrivacyLevel,
    audit_view_for,
    privacy_view,
)

SECRET = "sk-abcdefghijklmnopqrstuvwx"
EMAIL = "alice@example.org"


def tool_step() -> RunStep:
    return RunStep(
        kind=StepKind.TOOL,
        round=2,
        duration_ms=12.5,
        fields={
            "tool_call_id": "call-7",
            "tool_name": "read_records",
            "tool_arguments": {"table": "users", "url": "https://api.example.com/?token=t0ps3cr3t"},
            "tool_result": f"2 rows; owner {EMAIL}",
            "tool_is_error": False,
        },
        tool_artifacts=(
            ToolArtifact.table(["name", "key"], [["a", SECRET], ["b", "plain"]], label="Users"),
            ToolArtifact.text("contact bob@example.com", label=f"mail {EMAIL}"),
        ),
    )


def llm_step() -> RunStep:
    return RunStep(
        kind=StepKind.LLM,
        round=1,
        duration_ms=800.0,
        fields={
            "content": "Let me look ☃",
            "thinking": "the user wants rows",
            "finish_reason": "tool_calls",
            "prompt_tokens": 120,
            "completion_tokens": 14,
            "requested_tool_calls": [
                {"id": "c1", "name": "read_records", "arguments": {"api_key": SECRET}},
                {"id": "c2", "name": "get_page", "arguments": {}},
            ],
        },
    )


def request_step() -> RunStep:
    return RunStep(
        kind=StepKind.REQUEST,
        round=1,
        duration_ms=0.0,
        fields={
            "messages_sent": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": f"mail {EMAIL}"},
            ],
            "tool_specs": ["read_records", "get_page"],
        },
    )


@pytest.mark.parametrize("level", [PrivacyLevel.NONE, PrivacyLevel.METADATA])
def test_metadata_levels_keep_shape_and_size_of_a_tool_step(level: PrivacyLevel) -> None:
    view = privacy_view(tool_step(), level)

    assert view == {
        "kind": "tool",
        "round": 2,
        "duration_ms": 12.5,
        "tool_call_id": "call-7",
        "tool_name": "read_records",
        "tool_is_error": False,
        "content_redacted": True,
        "tool_result_length": len(f"2 rows; owner {EMAIL}"),
        "tool_artifacts_count": 2,
        "tool_artifact_types": ["table", "text"],
    }
    text = dumps(view).decode()
    for leaked in (SECRET, EMAIL, "t0ps3cr3t", "users", "Users", "plain"):
        assert leaked not in text


def test_metadata_level_summarises_an_llm_step_in_characters() -> None:
    view = privacy_view(llm_step(), PrivacyLevel.METADATA)

    assert view == {
        "kind": "llm",
        "round": 1,
        "duration_ms": 800.0,
        "finish_reason": "tool_calls",
        "prompt_tokens": 120,
        "completion_tokens": 14,
        "content_redacted": True,
        "content_length": 13,
        "thinking_length": 19,
        "requested_tool_names": ["read_records", "get_page"],
    }


def test_metadata_level_counts_messages_and_keeps_offered_tool_names() -> None:
    view = privacy_view(request_step(), PrivacyLevel.METADATA)

    assert view == {
        "kind": "request",
        "round": 1,
        "duration_ms": 0.0,
        "tool_specs": ["read_records", "get_page"],
        "content_redacted": True,
        "messages_sent_count": 2,
    }


def test_metadata_level_marks_a_step_without_content_and_adds_no_summary() -> None:
    step = RunStep(kind=StepKind.GATE, round=1, duration_ms=0.0, fields={"tool_name": "x"})

    assert privacy_view(step, PrivacyLevel.METADATA) == {
        "kind": "gate",
        "round": 1,
        "duration_ms": 0.0,
        "tool_name": "x",
        "content_redacted": True,
    }


def test_metadata_level_skips_artifact_types_and_tool_names_that_are_not_strings() -> None:
    step = RunStep(
        kind=StepKind.LLM,
        round=1,
        duration_ms=0.0,
        fields={
            "requested_tool_calls": [{"name": 3}, "bare", {"name": "ok"}],
            "tool_artifacts": [{"type": None}, {"type": "table"}, 7],
        },
    )

    view = privacy_view(step, PrivacyLevel.METADATA)

    assert view["requested_tool_names"] == ["ok"]
    assert view["tool_artifacts_count"] == 3
    assert view["tool_artifact_types"] == ["table"]


def _named(name: str) -> RunStep:
    return RunStep(kind=StepKind.TOOL, round=1, duration_ms=0.0, fields={"tool_name": name})


def test_a_tool_name_is_masked_at_metadata_on_every_call_not_only_the_first() -> None:
    for _ in range(3):
        assert privacy_view(_named("echo"), PrivacyLevel.METADATA)["tool_name"] == "echo"
        assert privacy_view(_named(SECRET), PrivacyLevel.METADATA)["tool_name"] == "sk-***"


def test_a_string_subclass_cannot_pass_for_a_clean_tool_name() -> None:
    class Posing(str):
        # Equal to, and hashed like, every string: it would match any remembered name.
        def __eq__(self, other: object) -> bool:
            return True

        def __hash__(self) -> int:
            return hash("echo")

    privacy_view(_named("echo"), PrivacyLevel.METADATA)

    assert privacy_view(_named(Posing(SECRET)), PrivacyLevel.METADATA)["tool_name"] == "sk-***"


def test_the_clean_tool_names_remembered_stay_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_privacy, "_CLEAN_NAMES", set())
    for index in range(_privacy._CLEAN_NAMES_MAX * 2 + 1):
        privacy_view(_named(f"tool_{index}"), PrivacyLevel.METADATA)
    privacy_view(_named("x" * (_privacy._CLEAN_NAME_MAX_CHARS + 1)), PrivacyLevel.METADATA)

    assert 0 < len(_privacy._CLEAN_NAMES) <= _privacy._CLEAN_NAMES_MAX
    assert all(len(name) <= _privacy._CLEAN_NAME_MAX_CHARS for name in _privacy._CLEAN_NAMES)


def test_redacted_level_keeps_the_shape_and_masks_every_content_leaf() -> None:
    step = tool_step()

    view = privacy_view(step, PrivacyLevel.REDACTED)

    full = step.to_dict()
    assert "content_redacted" not in view
    assert view.keys() == full.keys()
    assert view["tool_arguments"] == {"table": "users", "url": "https://api.example.com/?token=***"}
    assert view["tool_result"] == "2 rows; owner ***"
    table, text = view["tool_artifacts"]
    assert table == {
        "type": "table",
        "label": "Users",
        "data": {"columns": ["name", "key"], "rows": [["a", "sk-***"], ["b", "plain"]]},
    }
    assert text == {"type": "text", "label": "mail ***", "data": {"text": "contact ***"}}
    assert SECRET not in dumps(view).decode()


def test_redacted_level_masks_artifact_type_too() -> None:
    artifact = ToolArtifact(type=EMAIL, label="", data={})  # type: ignore[arg-type]
    step = RunStep(kind=StepKind.TOOL, round=1, duration_ms=1.0, tool_artifacts=(artifact,))

    view = privacy_view(step, PrivacyLevel.REDACTED)

    assert view["tool_artifacts"] == [{"type": "***", "label": "", "data": {}}]


def test_redacted_level_leaves_non_content_keys_alone_and_caps_each_leaf() -> None:
    long = "x" * 2500
    step = RunStep(
        kind=StepKind.LLM,
        round=1,
        duration_ms=1.0,
        fields={"content": long, "finish_reason": EMAIL, "raw": {"a": [long, 5, None]}},
    )

    view = privacy_view(step, PrivacyLevel.REDACTED)

    capped = "x" * 2000 + "… [truncated]"
    assert view["content"] == capped
    assert view["raw"] == {"a": [capped, 5, None]}
    assert view["finish_reason"] == EMAIL


def test_full_level_is_the_step_verbatim() -> None:
    for step in (tool_step(), llm_step(), request_step()):
        assert privacy_view(step, PrivacyLevel.FULL) == step.to_dict()


def test_a_level_that_is_not_a_privacy_level_is_refused() -> None:
    with pytest.raises(ValueError, match="partial"):
        privacy_view(tool_step(), "partial")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="partial"):
        audit_view_for("partial")  # type: ignore[arg-type]


def test_a_level_given_as_its_string_is_that_level() -> None:
    view = privacy_view(tool_step(), "redacted")  # type: ignore[arg-type]

    assert view["tool_result"] == "2 rows; owner ***"


def test_the_recorder_persists_through_the_view_while_the_trace_stays_unfiltered(
    sinks_class: type,
) -> None:
    sinks = sinks_class()
    pm = make_plugin_manager(plugins=[sinks], load_entry_points=False)
    recorder = RunRecorder(pm, "run-9", audit_view=audit_view_for(PrivacyLevel.METADATA))

    assert recorder.record(tool_step())

    (record,) = sinks.audit
    (event,) = sinks.trace
    assert record.payload == privacy_view(tool_step(), PrivacyLevel.METADATA)
    assert event.step.to_dict()["tool_artifacts"][0]["data"]["rows"][0][1] == SECRET


_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=30))
_json_tree = st.recursive(
    _json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
_steps = st.builds(
    lambda fields, kind: RunStep(kind=kind, round=1, duration_ms=1.0, fields=fields),
    st.dictionaries(
        st.sampled_from([*CONTENT_KEYS[:-1], "tool_name", "finish_reason", "prompt_tokens"]),
        _json_tree,
    ),
    st.sampled_from(StepKind),
)


@given(_steps)
def test_metadata_never_keeps_a_content_key_and_measures_strings(step: RunStep) -> None:
    view = privacy_view(step, PrivacyLevel.METADATA)
    fields = {k: v for k, v in step.fields.items() if v is not None}

    assert view["content_redacted"] is True
    assert not set(CONTENT_KEYS) & view.keys()
    for key in ("content", "thinking", "tool_result"):
        value = fields.get(key)
        if isinstance(value, str):
            assert view[f"{key}_length"] == len(value)
        else:
            assert f"{key}_length" not in view
    for key, value in fields.items():
        if key == "finish_reason":
            # A provider's free text is not metadata: only a known reason is kept as it is.
            known = isinstance(value, str) and value in FINISH_REASONS
            assert view[key] == (value if known else "other")
        elif key not in CONTENT_KEYS:
            assert view[key] == value


# Lower-case words and spaces cannot form a credential, an address or an over-long leaf.
_benign = st.text(alphabet="abcdefghij klmnop", max_size=60)


@given(
    st.dictionaries(
        st.sampled_from(CONTENT_KEYS[:-1]),
        st.recursive(
            _benign, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_benign, inner)
        ),
    )
)
def test_redacted_changes_nothing_that_holds_no_secret(fields: dict[str, object]) -> None:
    step = RunStep(kind=StepKind.TOOL, round=1, duration_ms=1.0, fields=fields)

    assert privacy_view(step, PrivacyLevel.REDACTED) == step.to_dict()

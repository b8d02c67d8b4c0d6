"""The one privacy filter between a run step and the audit store."""

from __future__ import annotations

import json
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core import (
    Effect,
    Host,
    RunRecorder,
    RunStep,
    StepKind,
    ToolArtifact,
    _privacy,
    make_plugin_manager,
)
from nrllm_core._json import dumps
from nrllm_core._privacy import (
    CONTENT_KEYS,
    FINISH_REASONS,
    PrivacyLevel,
    audit_view_for,
    privacy_view,
)
from nrllm_core.redact import names_a_credential, redact_tree

from .conftest import Counting, ToolsPlugin

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


@pytest.mark.parametrize(
    ("origin", "block"),
    [
        ("anthropic:claude:m", {"type": "thinking", "thinking": "t", "signature": "SIGNED-STATE"}),
        (
            "openai-responses:gpt:m",
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "SIGNED-STATE"},
        ),
    ],
)
def test_a_replay_is_kept_at_full_only(origin: str, block: dict[str, Any]) -> None:
    replayed = {"role": "assistant", "content": "", "replay": {"origin": origin, "blocks": [block]}}
    step = RunStep(
        kind=StepKind.REQUEST,
        round=2,
        duration_ms=0.0,
        fields={"messages_sent": [{"role": "user", "content": "hi"}, replayed]},
    )

    kept = {level: dumps(privacy_view(step, level)).decode() for level in PrivacyLevel}

    assert ["SIGNED-STATE" in kept[level] for level in PrivacyLevel] == [
        level is PrivacyLevel.FULL for level in PrivacyLevel
    ]
    # Below full, what was replayed to whom, and how much: never the state itself.
    assert privacy_view(step, PrivacyLevel.REDACTED)["messages_sent"][1] == {
        "role": "assistant",
        "content": "",
        "replay": {"origin": origin, "blocks": 1},
    }


def test_redacted_level_masks_artifact_type_too() -> None:
    artifact = ToolArtifact(type=EMAIL, label="", data={})  # type: ignore[arg-type]
    step = RunStep(kind=StepKind.TOOL, round=1, duration_ms=1.0, tool_artifacts=(artifact,))

    view = privacy_view(step, PrivacyLevel.REDACTED)

    assert view["tool_artifacts"] == [{"type": "***", "label": "", "data": {}}]


def test_redacted_level_masks_the_finish_reason_and_caps_each_content_leaf() -> None:
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
    assert view["finish_reason"] == "***"


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


# Lower-case words and spaces cannot form a credential, an address or an over-long leaf; as a
# key, they must not name a credential either (``iban``, ``pin``).
_benign = st.text(alphabet="abcdefghij klmnop", max_size=60)
_benign_key = _benign.filter(lambda key: not names_a_credential(key))


@given(
    st.dictionaries(
        st.sampled_from(CONTENT_KEYS[:-1]),
        st.recursive(
            _benign,
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_benign_key, inner),
        ),
    )
)
def test_redacted_changes_nothing_that_holds_no_secret(fields: dict[str, object]) -> None:
    step = RunStep(kind=StepKind.TOOL, round=1, duration_ms=1.0, fields=fields)

    assert privacy_view(step, PrivacyLevel.REDACTED) == step.to_dict()


# -- call ids and keys: text the model chose --------------------------------------------------

CALL_ID = "id_AKIAIOSFODNN7EXAMPLE"
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
GITHUB_TOKEN = "ghp_" + "R8mK2pQ7vX9aB4cD6eF1gH3jK5lM7nP9qR2s"


def _approval_host(tmp_path: Path, level: str, call_id: str) -> Host:
    """A host whose model asks once for ``write_note`` (which waits for approval) by
    ``call_id``, then answers."""
    script = tmp_path / "script.json"
    turns = [
        {"content": "", "tool_calls": [{"id": call_id, "name": "write_note", "arguments": {}}]},
        {"content": "done"},
    ]
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    write = Counting("write_note", effect=Effect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    return Host.from_config(
        data={
            "providers": {"m": {"kind": "scripted", "script": str(script), "trust_zone": "local"}},
            "defaults": {"provider": "m"},
            "actor": {"id": "alice"},
            "privacy": {"level": level},
        },
        plugins=[ToolsPlugin(write)],
        load_entry_points=False,
        data_dir=tmp_path / "home",
        environ={},
    )


def _stored_run(tmp_path: Path, level: str, call_id: str = CALL_ID) -> list[dict[str, Any]]:
    """Every stored payload of a run that suspends on ``call_id``, is approved and resumes."""
    host = _approval_host(tmp_path, level, call_id)
    try:
        suspended = host.run("Write")
        assert suspended.status == "awaiting_approval"
        done = host.approve(suspended.run_id, approver="bob", turn_digest=suspended.turn_digest)
        assert done.status == "completed", done.error
        return [dict(s.payload) for s in host.store.get_run(done.run_id).steps]
    finally:
        host.store.close()


def _ids_of_the_call(payloads: list[dict[str, Any]]) -> list[object]:
    """Every id under which the audit keeps the run's one call, wherever it keeps one."""
    ids: list[object] = []
    for payload in payloads:
        ids.extend(c["id"] for c in payload.get("pending_calls", ()))
        ids.extend(c["id"] for c in payload.get("requested_tool_calls", ()))
        if "tool_call_id" in payload:
            ids.append(payload["tool_call_id"])
        for message in payload.get("messages_sent", ()):
            ids.extend(c["id"] for c in message.get("tool_calls", ()))
            if "tool_call_id" in message:
                ids.append(message["tool_call_id"])
    return ids


@pytest.mark.parametrize("level", ["none", "metadata", "redacted"])
def test_below_full_a_call_id_is_masked_at_every_step_of_its_call_and_the_same_at_each(
    tmp_path: Path, level: str
) -> None:
    payloads = _stored_run(tmp_path, level)

    assert AWS_KEY_ID not in dumps(payloads).decode()
    ids = _ids_of_the_call(payloads)
    # The suspension and the tool step; at redacted, the answer that asked for the call and
    # the next request's assistant message and tool result too.
    assert len(ids) == (5 if level == "redacted" else 2)
    assert set(ids) == {"id_***"}


def test_at_full_a_call_id_is_stored_verbatim(tmp_path: Path) -> None:
    payloads = _stored_run(tmp_path, "full")

    assert set(_ids_of_the_call(payloads)) == {CALL_ID}


@pytest.mark.parametrize("level", ["none", "metadata", "redacted"])
def test_a_call_id_with_nothing_to_mask_is_kept_as_the_provider_gave_it(
    tmp_path: Path, level: str
) -> None:
    payloads = _stored_run(tmp_path, level, "toolu_01A09q90qw90lq917835lq9")

    assert set(_ids_of_the_call(payloads)) == {"toolu_01A09q90qw90lq917835lq9"}


@pytest.mark.parametrize("level", [PrivacyLevel.NONE, PrivacyLevel.METADATA, PrivacyLevel.REDACTED])
def test_a_long_call_id_is_masked_before_it_is_cut(level: PrivacyLevel) -> None:
    # Cut first, the key would lose its tail and no longer read as a key.
    call_id = "x" * 120 + AWS_KEY_ID
    step = RunStep(
        kind=StepKind.SUSPENSION,
        round=1,
        duration_ms=0.0,
        fields={"pending_calls": [{"id": call_id, "name": "w", "requires_approval": True}]},
    )

    view = privacy_view(step, level)

    assert view["pending_calls"][0]["id"] == "x" * 120 + "***"


def test_redacted_level_masks_the_keys_of_arguments_like_their_values() -> None:
    arguments = {GITHUB_TOKEN: "x", "nested": [{f"to {EMAIL}": 1}], "table": "users"}
    step = RunStep(
        kind=StepKind.TOOL,
        round=1,
        duration_ms=1.0,
        fields={
            "tool_call_id": "c1",
            "tool_name": "read_records",
            "tool_arguments": arguments,
            "requested_tool_calls": [{"id": "c1", "name": "read", "arguments": arguments}],
        },
    )

    view = privacy_view(step, PrivacyLevel.REDACTED)

    masked = {"***": "x", "nested": [{"to ***": 1}], "table": "users"}
    assert view["tool_arguments"] == masked
    assert view["requested_tool_calls"] == [{"id": "c1", "name": "read", "arguments": masked}]
    assert GITHUB_TOKEN not in dumps(view).decode()


def test_redacted_level_keeps_every_key_when_two_mask_alike() -> None:
    other = "ghp_" + "Z" * 36
    step = RunStep(
        kind=StepKind.TOOL,
        round=1,
        duration_ms=1.0,
        fields={"tool_arguments": {GITHUB_TOKEN: 1, other: 2, "***": 3}},
    )

    arguments = privacy_view(step, PrivacyLevel.REDACTED)["tool_arguments"]

    assert sorted(arguments.values()) == [1, 2, 3]
    assert GITHUB_TOKEN not in dumps(arguments).decode()
    assert other not in dumps(arguments).decode()


def test_redacted_level_masks_the_providers_own_strings_beside_the_finish_reason() -> None:
    step = RunStep(
        kind=StepKind.LLM,
        round=1,
        duration_ms=1.0,
        fields={
            "finish_reason": f"stopped for {GITHUB_TOKEN}",
            "response_id": f"resp_{AWS_KEY_ID}",
            "truncated": False,
        },
    )

    view = privacy_view(step, PrivacyLevel.REDACTED)

    assert view["finish_reason"] == "stopped for ***"
    assert view["response_id"] == "resp_***"
    assert view["truncated"] is False


@pytest.mark.parametrize("level", [PrivacyLevel.NONE, PrivacyLevel.METADATA, PrivacyLevel.REDACTED])
def test_below_full_the_response_id_is_masked_then_cut(level: PrivacyLevel) -> None:
    step = RunStep(
        kind=StepKind.LLM,
        round=1,
        duration_ms=1.0,
        fields={"response_id": "r" * 125 + AWS_KEY_ID, "finish_reason": "stop"},
    )

    assert privacy_view(step, level)["response_id"] == "r" * 125 + "***"


# -- values read with their keys as context ---------------------------------------------------


class _AnyArguments(Counting):
    parameters = MappingProxyType({"type": "object"})


_CREDENTIAL_ARGUMENTS = [
    {"user": "ada", "password": "hunter2 horse"},
    {"user": "ada", "db_password": "hunter2 horse"},
    {"user": "ada", "client_secret": "hunter2 horse"},
    {"user": "ada", "api_key": "hunter2 horse"},
    {"user": "ada", "token": "hunter2 horse"},
    {"user": "ada", "headers": {"Authorization": "Basic aHVudGVyMiBob3JzZQ"}},
    {"user": "ada", "login": {"password": ["hunter2 horse", 1234]}},
    {"user": "ada", "body": json.dumps({"password": "hunter2 horse"})},
]


@pytest.mark.parametrize("arguments", _CREDENTIAL_ARGUMENTS, ids=lambda a: list(a)[-1])
def test_redacted_masks_a_value_under_a_credential_key_in_every_step(
    tmp_path: Path, arguments: dict[str, Any]
) -> None:
    script = tmp_path / "script.json"
    turns = [
        {"content": "", "tool_calls": [{"id": "c1", "name": "login", "arguments": arguments}]},
        {"content": "done"},
    ]
    script.write_text(json.dumps({"turns": turns}), encoding="utf-8")
    login = _AnyArguments("login")
    host = Host.from_config(
        data={
            "providers": {"m": {"kind": "scripted", "script": str(script), "trust_zone": "local"}},
            "defaults": {"provider": "m"},
            "actor": {"id": "alice"},
            "privacy": {"level": "redacted"},
        },
        plugins=[ToolsPlugin(login)],
        load_entry_points=False,
        data_dir=tmp_path / "home",
        environ={},
    )
    try:
        outcome = host.run("Log in")
        assert outcome.status == "completed", outcome.error
        assert login.calls == [arguments]
        detail = host.store.get_run(outcome.run_id)
        assert detail is not None
        stored = dumps([dict(s.payload) for s in detail.steps]).decode()
    finally:
        host.store.close()

    for secret in ("hunter2", "aHVudGVyMiBob3JzZQ", "1234"):
        assert secret not in stored
    # The model's step, the tool's step and the next request each keep the call, readable.
    assert stored.count('"ada"') + stored.count('\\"ada\\"') >= 3


def test_redact_tree_reads_a_value_with_its_key_and_leaves_ordinary_values() -> None:
    value = {
        "user": "ada",
        "password_hint": "the usual",
        "config": {"sort_key": "name", "cache_key": "abc", "max_tokens": 5},
        "secret": {"nested": ["a", {"deeper": "b"}], "n": 7, "flag": True, "none": None},
        "body": '{"client_secret": "s3", "note": "fine"}',
        "list": '[{"token": "t"}]',
        "not json": "{this is prose}",
    }

    assert redact_tree(value) == {
        "user": "ada",
        "password_hint": "***",
        "config": {"sort_key": "name", "cache_key": "abc", "max_tokens": 5},
        "secret": {"nested": ["***", {"deeper": "***"}], "n": "***", "flag": True, "none": None},
        "body": '{"client_secret": "***", "note": "fine"}',
        "list": '[{"token": "***"}]',
        "not json": "{this is prose}",
    }


def test_redact_tree_reads_keys_with_the_column_rules_vocabulary() -> None:
    # One vocabulary for keys and columns: what read_records withholds as a column is masked
    # as a key, in any language, and what it shows stays readable.
    value = {
        "contraseña": "hunter2",
        "пароль": "hunter2",
        "密码": "hunter2",
        "cvv": 123,
        "connection_string": "Server=db;Pwd=x",
        "prompt_tokens": 12,
        "session_id": "s-1",
        "commit_hash": "abc123",
        "pass_rate": 0.9,
    }
    masked = redact_tree(value)

    assert isinstance(masked, dict)
    assert {key for key in value if masked[key] == "***"} == {
        key for key in value if names_a_credential(key)
    }
    assert {key for key, item in masked.items() if item == "***"} == {
        "contraseña",
        "пароль",
        "密码",
        "cvv",
        "connection_string",
    }


def test_redact_tree_with_keys_masks_keys_and_values_in_one_walk() -> None:
    value = {"ada@example.org": {"password": "x"}, "bob@example.org": 1}

    assert redact_tree(value, keys=True) == {"***": {"password": "***"}, "*** (2)": 1}


def test_a_calls_step_keeps_the_description_its_registered_tool_audits(tmp_path: Path) -> None:
    described = Counting("described")
    described.description = f"Reads with {GITHUB_TOKEN}."
    host = Host.from_config(
        data={"actor": {"id": "alice"}, "privacy": {"level": "full"}},
        plugins=[ToolsPlugin(described)],
        load_entry_points=False,
        data_dir=tmp_path,
        environ={},
    )
    events: list[Any] = []
    try:
        host.invoke("described", {}, on_event=events.append)
        registered = host.pm.catalog().get("described")
    finally:
        host.store.close()

    assert registered is not None
    assert registered.audited_description == "Reads with ***."
    (step,) = [e.step for e in events if e.step.kind is StepKind.TOOL]
    assert step.fields["tool_description"] is registered.audited_description

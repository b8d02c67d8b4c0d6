"""The chat tool ``start_repurpose_job``: its declared facts, its checks and its answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import nrllm_repurpose
from nrllm_core import (
    Actor,
    DataClass,
    DenialReason,
    Effect,
    ToolContext,
    TrustZone,
    decide,
    load_config,
    make_plugin_manager,
)
from nrllm_core._label import RunLabel
from nrllm_core._policy import ApproveWrites, PolicyConfig, decide_call
from nrllm_repurpose._start import (
    BAD_LIST,
    BAD_TYPE,
    BAD_URL,
    MISCONFIGURED,
    NOT_PERMITTED,
    UNKNOWN_ARTIFACT,
    StartRepurposeJob,
    display_url,
)
from nrllm_repurpose._store import JobStore

EDITOR = Actor(id="editor", permissions=frozenset({"repurpose"}))
NAMES = "podcast, schaubild, story, exec_summary, faq, social_post, newsletter, slide_deck, handout"


def call(arguments: dict[str, Any], actor: Actor = EDITOR, settings: Any = None) -> Any:
    context = ToolContext(
        run_id="run-1",
        call_id="call-1",
        actor=actor,
        settings={} if settings is None else settings,
    )
    return StartRepurposeJob().execute(arguments, context)


def job_rows(home: Path) -> list[Any]:
    with JobStore.open(None, data_dir=home) as store:
        return store.jobs()


# -- declared facts --------------------------------------------------------------------------------


def test_the_tool_declares_its_class_effect_and_switch_in_code():
    pm = make_plugin_manager(plugins=[nrllm_repurpose], load_entry_points=False)
    registered = pm.catalog().get("start_repurpose_job")
    assert registered is not None
    assert registered.group == "nr_repurpose"
    assert registered.declared_data_class is DataClass.EDITOR_CONTENT
    assert registered.data_class is DataClass.EDITOR_CONTENT
    assert registered.data_class_source == "declared"
    assert registered.effect is Effect.NON_IDEMPOTENT_WRITE
    assert registered.requires_approval is True
    # Declared, not only a write's: no [policy] approve_writes lets a call past a person.
    assert registered.declared_approval is True
    for approve_writes in ApproveWrites:
        policy = PolicyConfig(approve_writes=approve_writes)
        assert decide_call(registered, RunLabel(), TrustZone.LOCAL, policy).needs_approval
    assert registered.enabled_by_default is False
    assert registered.checks_own_arguments is True
    assert registered.requires_admin is False


def test_the_description_warns_of_the_provider_the_cost_and_the_approval():
    description = StartRepurposeJob.description
    assert "sent to an AI provider" in description
    assert "costs money" in description
    assert "every call is shown to a person" in description


def config_with(zone: TrustZone, **tools: Any) -> Any:
    return load_config(
        data={
            "providers": {"model": {"kind": "openai", "model": "m", "trust_zone": zone.value}},
            "tools": tools,
            "skills": {"other": {"allowed_tools": ["list_repurpose_formats"]}},
        }
    )


@pytest.mark.parametrize("zone", list(TrustZone))
def test_switched_on_the_tool_is_offered_in_every_zone(zone):
    pm = make_plugin_manager(plugins=[nrllm_repurpose], load_entry_points=False)
    config = config_with(zone, enabled=["start_repurpose_job"])
    report = decide(
        pm.catalog(),
        config,
        provider="model",
        skill=None,
        actor=EDITOR,
        requested=["start_repurpose_job"],
    )
    (decision,) = report.decisions
    assert decision.offered is True
    assert decision.reason is None
    assert decision.data_class is DataClass.EDITOR_CONTENT
    assert decision.zone is zone


@pytest.mark.parametrize("zone", list(TrustZone))
def test_not_switched_on_the_tool_is_refused_as_disabled(zone):
    pm = make_plugin_manager(plugins=[nrllm_repurpose], load_entry_points=False)
    report = decide(
        pm.catalog(),
        config_with(zone),
        provider="model",
        skill=None,
        actor=EDITOR,
        requested=["start_repurpose_job"],
    )
    assert report.decisions[0].reason is DenialReason.TOOL_DISABLED


def test_a_skill_that_leaves_the_tool_out_is_not_offered_it():
    pm = make_plugin_manager(plugins=[nrllm_repurpose], load_entry_points=False)
    report = decide(
        pm.catalog(),
        config_with(TrustZone.LOCAL, enabled=["start_repurpose_job"]),
        provider="model",
        skill="other",
        actor=EDITOR,
        requested=["start_repurpose_job"],
    )
    assert report.decisions[0].reason is DenialReason.CONFIGURATION_GROUP


# -- refusals --------------------------------------------------------------------------------------

GOOD = {"source_url": "https://example.com/a", "artifacts": ["faq"]}

REFUSED = [
    pytest.param({"artifacts": ["faq"]}, BAD_URL, id="no-source"),
    pytest.param({**GOOD, "source_url": None}, BAD_URL, id="source-null"),
    pytest.param({**GOOD, "source_url": 5}, BAD_URL, id="source-number"),
    pytest.param({**GOOD, "source_url": "   "}, BAD_URL, id="source-blank"),
    pytest.param({**GOOD, "source_url": "not a url"}, BAD_URL, id="not-a-url"),
    pytest.param({**GOOD, "source_url": "file:///etc/passwd"}, BAD_URL, id="file"),
    pytest.param({**GOOD, "source_url": "ftp://example.com/x"}, BAD_URL, id="ftp"),
    pytest.param({**GOOD, "source_url": "https:///path"}, BAD_URL, id="no-host"),
    pytest.param(
        {**GOOD, "source_url": "https://user:secret@example.com/"}, BAD_URL, id="credentials"
    ),
    pytest.param({**GOOD, "source_url": "https://user@example.com/"}, BAD_URL, id="user"),
    pytest.param(
        {**GOOD, "source_url": "https://example.com/" + "a" * 1981}, BAD_URL, id="2001-bytes"
    ),
    pytest.param({**GOOD, "source_url": "https://example.com:99999/"}, BAD_URL, id="bad-port"),
    pytest.param({**GOOD, "source_url": "https://example.com/\ud800"}, BAD_URL, id="surrogate"),
    pytest.param(
        {**GOOD, "source_url": "https://ex\udfffample.com/"}, BAD_URL, id="surrogate-host"
    ),
    pytest.param({**GOOD, "source_type": "pdf_fal"}, BAD_TYPE, id="type-pdf-fal"),
    pytest.param({**GOOD, "source_type": None}, BAD_TYPE, id="type-null"),
    pytest.param({**GOOD, "source_type": 5}, BAD_TYPE, id="type-number"),
    pytest.param({**GOOD, "source_type": "URL"}, BAD_TYPE, id="type-case"),
    pytest.param({**GOOD, "artifacts": []}, BAD_LIST, id="artifacts-empty"),
    pytest.param({"source_url": "https://example.com/"}, BAD_LIST, id="artifacts-missing"),
    pytest.param({**GOOD, "artifacts": "faq"}, BAD_LIST, id="artifacts-string"),
    pytest.param({**GOOD, "artifacts": {"faq": True}}, BAD_LIST, id="artifacts-object"),
    pytest.param({**GOOD, "artifacts": ["faq", "hologram"]}, UNKNOWN_ARTIFACT, id="unknown"),
    pytest.param({**GOOD, "artifacts": ["FAQ"]}, UNKNOWN_ARTIFACT, id="case-sensitive"),
    pytest.param({**GOOD, "artifacts": ["faq", 3]}, UNKNOWN_ARTIFACT, id="non-string-item"),
    pytest.param({**GOOD, "artifacts": ["video"]}, UNKNOWN_ARTIFACT, id="video"),
    # The first failing check wins.
    pytest.param({"source_url": "nope", "artifacts": ["hologram"]}, BAD_URL, id="checks-2-and-5"),
    pytest.param({**GOOD, "source_type": "x", "artifacts": []}, BAD_TYPE, id="checks-3-and-4"),
]


@pytest.mark.parametrize(("arguments", "message"), REFUSED)
def test_each_refusal_has_its_fixed_message_and_stores_nothing(home, arguments, message):
    result = call(arguments)
    assert result.is_error is True
    assert result.content == message
    assert job_rows(home) == []


def test_the_messages_are_the_spec_texts():
    assert f"artifacts must be a non-empty list of formats: {NAMES}." == BAD_LIST
    assert f"Unknown artifact. Choose from: {NAMES}." == UNKNOWN_ARTIFACT


@pytest.mark.parametrize(
    "actor",
    [
        pytest.param(Actor(id="visitor"), id="no-permission"),
        pytest.param(Actor(id="other", permissions=frozenset({"read"})), id="other-permission"),
    ],
)
def test_a_user_without_the_permission_starts_nothing(home, actor):
    # Bad arguments too: the permission is checked first.
    result = call({"source_url": "nope"}, actor=actor)
    assert result.is_error is True
    assert result.content == NOT_PERMITTED
    assert job_rows(home) == []


@pytest.mark.parametrize("nobody", ["", "  ", "\u200b"])
def test_no_user_and_a_blank_admin_cannot_even_ask(nobody):
    # An actor that names nobody cannot be built, so no call can carry one to the tool.
    for admin in (False, True):
        with pytest.raises(ValueError, match="names nobody"):
            Actor(id=nobody, admin=admin)


def test_invalid_settings_refuse_with_a_fixed_message_and_store_nothing(home):
    result = call(GOOD, settings={"lease_seconds": "soon"})
    assert (result.is_error, result.content) == (True, MISCONFIGURED)
    assert job_rows(home) == []


# -- success ---------------------------------------------------------------------------------------


def test_an_editor_starts_a_job_owned_by_themselves(home):
    url = "https://example.com/article;jsessionid=s3cret?token=s3cret#part"
    result = call({"source_url": f"  {url}\n", "artifacts": ["faq", "exec_summary", "faq"]})
    (job,) = job_rows(home)
    assert result.is_error is False
    assert result.artifacts == ()
    assert result.content == (
        f"Started repurpose job #{job.uid} for https://example.com/article (faq, exec_summary). "
        f"It runs in the background; see its progress with: nrllm repurpose jobs show {job.uid}"
    )
    assert "s3cret" not in result.content
    assert job.source_url == url
    assert job.owner == "editor"
    assert job.source_type == "url"
    assert job.formats == ("faq", "exec_summary")
    assert job.status.value == "queued"
    assert job.attempt == 0


def test_an_admin_may_start_a_pdf_job_and_each_call_is_a_new_job(home):
    admin = Actor(id="root", admin=True)
    arguments = {"source_url": "HTTPS://Example.com/doc.pdf", "source_type": "pdf_url"}
    first = call({**arguments, "artifacts": ["handout"]}, actor=admin)
    second = call({**arguments, "artifacts": ["handout"]}, actor=admin)
    jobs = job_rows(home)
    assert [j.source_type for j in jobs] == ["pdf_url", "pdf_url"]
    assert {j.uid for j in jobs} == {1, 2}
    assert "#1 for HTTPS://Example.com/doc.pdf (handout)" in first.content
    assert "#2 " in second.content


def test_a_url_of_exactly_2000_bytes_is_accepted(home):
    url = "https://example.com/" + "a" * 1980
    assert len(url.encode()) == 2000
    assert call({"source_url": url, "artifacts": ["faq"]}).is_error is False


def test_the_preview_shows_the_redacted_source_and_the_formats():
    tool = StartRepurposeJob()
    context = ToolContext(run_id="r", call_id="c", actor=EDITOR)
    lines = tool.preview(
        {
            "source_url": "https://u:p@example.com/x?key=1",
            "artifacts": ["faq"],
        },
        context,
    )
    assert lines == [f"This call will be refused: {BAD_URL}"]
    lines = tool.preview(
        {"source_url": "https://example.com/x?key=1", "artifacts": ["faq", "podcast", "faq"]},
        context,
    )
    assert lines is not None
    assert lines[:2] == ["Source: https://example.com/x (url)", "Formats: faq, podcast"]
    assert not any("key=1" in line for line in lines)


# -- the URL shown ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://example.com/article?token=s3cret#part", "https://example.com/article"),
        ("https://user:secret@example.com/doc.pdf?x=1", "https://example.com/doc.pdf"),
        ("http://Example.COM:8080/a/b", "http://Example.COM:8080/a/b"),
        ("https://[2001:db8::1]:8443/p", "https://[2001:db8::1]:8443/p"),
        ("https://example.com", "https://example.com"),
        ("HTTPS://example.com/#frag", "HTTPS://example.com/"),
        ("example.com/no-scheme", "(URL not shown)"),
        ("https://", "(URL not shown)"),
        ("https://example.com:bad/", "(URL not shown)"),
        ("https://example.com/a;jsessionid=SECRET?x=1", "https://example.com/a"),
    ],
)
def test_display_url_keeps_scheme_host_port_and_path_only(url, shown):
    assert display_url(url) == shown


@given(
    query=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789=&", min_size=1, max_size=30),
    fragment=st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=20),
)
def test_display_url_never_shows_a_query_or_a_fragment(query, fragment):
    shown = display_url(f"https://example.com/page?{query}#{fragment}")
    assert shown == "https://example.com/page"


@given(st.lists(st.sampled_from(NAMES.split(", ")), min_size=1, max_size=20))
def test_duplicates_collapse_in_the_callers_order(names):
    from nrllm_repurpose._start import check_request

    request = check_request({"source_url": "https://example.com/", "artifacts": names})
    assert not isinstance(request, str)
    assert request.formats == tuple(dict.fromkeys(names))

"""The inspector in Debian's Chromium, driven by Playwright: nothing downloads a browser.

The docs' images are made by `make screenshots` (scripts/screenshots.py), from the demo's data.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nrllm_core.inspector import create_app

from .conftest import RUNS, seed_runs

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TOKEN = "browser-token"


@pytest.fixture(scope="module")
def chromium() -> Path:
    if not CHROMIUM.exists():
        message = f"no browser at {CHROMIUM}: install the Debian package chromium"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return CHROMIUM


@pytest.fixture
def server(host_factory: Any, tmp_path: Path) -> Iterator[str]:
    import uvicorn

    host = host_factory(tmp_path)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        create_app(host, token=TOKEN), log_level="warning", access_log=False, lifespan="off"
    )
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        uv.should_exit = True
        thread.join(timeout=10)
        listener.close()
        host.store.close()


# One browser per module and worker: starting Chromium costs more than most tests here, and
# every test still gets a context of its own (cookies, storage, cache), closed after it.
@pytest.fixture(scope="module")
def browser(chromium: Path) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(chromium), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


class Watched:
    """A page with every dialog, console error and page error it raised."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.problems: list[str] = []
        page.on("dialog", self._dialog)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"pageerror: {error}"))

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _console(self, message: Any) -> None:
        if message.type in ("error", "warning"):
            self.problems.append(f"{message.type}: {message.text}")


@pytest.fixture
def page(browser: Any, server: str) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    watched = Watched(context.new_page())
    response = watched.page.goto(f"{server}/?token={TOKEN}")
    assert response is not None
    assert response.status == 200
    assert watched.page.url == f"{server}/"
    watched.page.wait_for_selector("#provider option[value=demo]", state="attached")
    try:
        yield watched
    finally:
        context.close()
    assert watched.dialogs == []
    assert watched.problems == []


def run_prompt(page: Any, prompt: str, provider: str) -> None:
    page.select_option("#provider", provider)
    page.fill("#prompt", prompt)
    page.click("#run-button")


def tool_step(page: Any, name: str) -> Any:
    return page.locator(".step[data-kind=tool]").filter(has_text=name).first


def tab_names(step: Any) -> list[str]:
    return [t.strip() for t in step.get_by_role("tab").all_inner_texts()]


def screenshot(page: Any, name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    page.screenshot(path=str(path), full_page=True)
    assert path.read_bytes().startswith(b"\x89PNG")


def test_a_request_without_the_token_gets_401(browser, server):
    context = browser.new_context()
    try:
        page = context.new_page()
        for path in ["/", "/static/app.js", "/api/runs"]:
            response = page.goto(f"{server}{path}")
            assert response is not None
            assert response.status == 401
        assert page.locator("body").inner_text().startswith("A token is required")
    finally:
        context.close()


def test_steps_arrive_while_the_run_streams(page, release):
    p = page.page
    run_prompt(p, "Wait for me", "slow")
    # The tool blocks: the first steps are on the page while the run is still going.
    p.wait_for_selector(".step[data-kind=llm]")
    assert p.locator("#running").is_visible()
    assert p.locator(".steps > li").count() == 4  # start, gate, request, llm
    assert p.locator(".context dd").first.inner_text() == "slow"
    assert p.locator("[data-outcome]").count() == 0
    assert p.locator(".note.live").inner_text().startswith("Live view:")
    release.set()
    p.wait_for_selector("[data-outcome=done]")
    assert p.locator("#running").is_hidden()
    assert p.locator(".steps > li").count() == 8  # with the start and finish records
    assert p.locator("[data-outcome=done] pre").inner_text() == "Waited."


def test_a_calls_progress_shows_then_becomes_its_step(page, release):
    p = page.page
    title = p.title()
    run_prompt(p, "Go", "progress")
    running = ".step[data-kind=progress]"
    p.wait_for_function(
        f"() => document.querySelector('{running} .progress-count')?.textContent === '2'"
    )
    # The last progress had no total: the bar counts up without one; the message stays.
    assert p.locator(f"{running} .summary").inner_text() == "progress_tool (running)"
    assert p.locator(f"{running} progress").get_attribute("value") is None
    assert p.locator(f"{running} .progress-message").inner_text() == ""
    assert p.locator("img").count() == 0
    assert p.title() == title
    release.set()
    p.wait_for_selector("[data-outcome=done]")
    assert p.locator(running).count() == 0
    assert tool_step(p, "progress_tool").is_visible()


def test_a_progress_message_is_text(page):
    p = page.page
    title = p.title()
    message = "<img src=x onerror=\"document.title='pwned'\"> half"
    body = ndjson(
        {"event": "context", "provider": "demo", "zone": "local", "offered": []},
        # Values no page should trust: each shown as text or left out, the stream goes on.
        {"event": "progress", "call_id": "c1", "tool": CRAFTED, "progress": "x", "message": 3},
        {"event": "progress", "call_id": "c1", "progress": 1, "total": 4, "message": message},
    )
    p.route(
        "**/api/run",
        lambda route: route.fulfill(status=200, content_type="application/x-ndjson", body=body),
    )
    run_prompt(p, "Go", "demo")
    p.wait_for_selector("[data-outcome=error]")
    shown = p.locator(".step[data-kind=progress]")
    assert shown.count() == 1
    assert shown.locator(".progress-message").inner_text() == message
    assert shown.locator(".progress-count").inner_text() == "1 / 4"
    assert shown.locator(".summary").inner_text() == (
        f"{CRAFTED_TEXT} (the run ended before its step was recorded)"
    )
    assert p.locator("img").count() == 0
    assert p.title() == title


def test_the_models_text_shows_as_it_arrives_then_becomes_its_step(page, gates, hostile_delta):
    p = page.page
    title = p.title()
    run_prompt(p, "Speak", "gated")
    shown = ".answer .answer-text"
    # The provider is held after its first words: they are on the page, the run is not over.
    p.wait_for_function(f"() => document.querySelector('{shown}')?.textContent === 'First words'")
    assert p.locator("#running").is_visible()
    assert p.locator(".answer .summary").inner_text() == "answering…"
    assert p.locator(".step[data-kind=llm]").count() == 0
    assert p.locator("[data-outcome]").count() == 0
    gates[0].set()
    p.wait_for_function(
        f"() => document.querySelector('{shown}')?.textContent.endsWith('<b>bold?</b>')"
    )
    # Markup in the model's text is text: nothing was injected, nothing ran.
    assert p.locator(shown).inner_text() == f"First words{hostile_delta}"
    assert p.locator("img").count() == 0
    assert p.locator(".answer b").count() == 0
    assert p.locator("script").count() == 1
    assert p.title() == title
    assert p.locator("[data-outcome]").count() == 0
    gates[1].set()
    p.wait_for_selector("[data-outcome=done]")
    whole = f"First words{hostile_delta} Last words."
    assert p.locator(".answer").count() == 0
    assert p.locator(".step[data-kind=llm] .tabpanel").first.inner_text() == whole
    assert p.locator("[data-outcome=done] pre").inner_text() == whole
    kinds = p.locator(".steps > li").evaluate_all("nodes => nodes.map(n => n.dataset.kind)")
    assert kinds == ["start", "gate", "request", "llm", "finish"]
    assert p.locator("img").count() == 0
    assert p.title() == title


def test_a_restart_voids_the_text_so_far_and_an_early_end_says_so(page):
    p = page.page
    body = ndjson(
        {"event": "context", "provider": "demo", "zone": "local", "offered": []},
        {"event": "thinking", "text": "Hmm."},
        {"event": "text", "text": "A broken answ"},
        {"event": "restart"},
        {"event": "text", "text": "The whole "},
        {"event": "text", "text": CRAFTED},
        {"event": "error", "run_id": "r1", "error": "the model provider failed"},
    )
    p.route(
        "**/api/run",
        lambda route: route.fulfill(status=200, content_type="application/x-ndjson", body=body),
    )
    run_prompt(p, "Again", "demo")
    p.wait_for_selector("[data-outcome=error]")
    answer = p.locator(".answer")
    assert answer.locator(".answer-text").inner_text() == f"The whole {CRAFTED_TEXT}"
    assert answer.locator(".thinking").is_hidden()
    assert answer.get_by_text("The stream broke").is_visible()
    assert answer.locator(".summary").inner_text() == (
        "the run ended before the model's step was recorded"
    )


def test_the_billed_tokens_show_as_text_in_the_outcome_and_the_step(page):
    p = page.page
    run_prompt(p, "Count", "counted")
    p.wait_for_selector("[data-outcome=done]")
    usage = "Tokens: prompt 120 (cached 64), completion 30 (reasoning 12)"
    assert p.locator("[data-outcome=done] .usage").inner_text() == usage
    assert p.locator(".step[data-kind=llm] .summary").inner_text() == f"stop · {usage}"
    assert p.locator("[data-outcome=done] .truncated").count() == 0


def test_the_artifacts_tab_renders_the_table(page, tmp_path):
    p = page.page
    run_prompt(p, "Which city?", "demo")
    p.wait_for_selector("[data-outcome=done]")
    step = tool_step(p, "table_tool")
    assert tab_names(step) == ["Result", "Arguments", "Artifacts", "Step"]
    step.get_by_role("tab", name="Artifacts").click()
    panel = step.get_by_role("tabpanel").filter(has=p.locator("table"))
    assert panel.locator(".artifact-label").inner_text() == "Cities"
    assert panel.locator("th").all_inner_texts() == ["city", "people"]
    assert panel.locator("tbody tr").nth(0).locator("td").all_inner_texts() == ["Oslo", "1000"]
    assert panel.locator("tbody tr").nth(1).locator("td").all_inner_texts() == ["Other", "7"]
    screenshot(p, "playground.png", tmp_path)


def test_a_step_without_artifacts_has_no_artifacts_tab(page):
    p = page.page
    run_prompt(p, "Which city?", "demo")
    p.wait_for_selector("[data-outcome=done]")
    plain = tool_step(p, "plain_tool")
    assert tab_names(plain) == ["Result", "Arguments", "Step"]
    assert plain.get_by_role("tabpanel").first.inner_text().strip() == "plain answer"
    for index in range(p.locator(".step[data-kind=llm]").count()):
        assert "Artifacts" not in tab_names(p.locator(".step[data-kind=llm]").nth(index))


def test_tabs_follow_the_arrow_keys_with_aria_state(page):
    p = page.page
    run_prompt(p, "Which city?", "demo")
    p.wait_for_selector("[data-outcome=done]")
    step = tool_step(p, "table_tool")
    tabs = step.get_by_role("tab")
    assert step.get_by_role("tablist").count() == 1
    tabs.nth(0).focus()
    p.keyboard.press("ArrowRight")
    assert tabs.nth(1).get_attribute("aria-selected") == "true"
    assert tabs.nth(0).get_attribute("aria-selected") == "false"
    assert tabs.nth(1).evaluate("node => node === document.activeElement")
    panel_id = tabs.nth(1).get_attribute("aria-controls")
    assert p.locator(f"#{panel_id}").is_visible()
    assert '"city": "Oslo"' in p.locator(f"#{panel_id}").inner_text()
    p.keyboard.press("End")
    assert tabs.nth(3).get_attribute("aria-selected") == "true"
    p.keyboard.press("ArrowRight")
    assert tabs.nth(0).get_attribute("aria-selected") == "true"
    p.keyboard.press("ArrowLeft")
    assert tabs.nth(3).get_attribute("aria-selected") == "true"
    assert [t.get_attribute("tabindex") for t in tabs.all()] == ["-1", "-1", "-1", "0"]


def test_hostile_artifacts_show_as_literal_text_and_run_nothing(page, hostile):
    p = page.page
    title = p.title()
    run_prompt(p, "Show me", "hostile")
    p.wait_for_selector("[data-outcome=done]")
    step = tool_step(p, "hostile_tool")
    step.get_by_role("tab", name="Artifacts").click()
    panel = step.locator(".artifacts")
    assert panel.locator(".artifact-label").all_inner_texts() == [hostile["label"], "Artifact"]
    assert panel.locator("th").all_inner_texts() == ["name", hostile["cell"]]
    assert panel.locator("td").all_inner_texts() == [hostile["cell"], "x"]
    assert panel.locator("pre").inner_text() == hostile["text"]
    # Nothing was injected: the page has no image, no bold, only its own module script.
    assert p.locator("img").count() == 0
    assert p.locator(".artifacts b").count() == 0
    assert p.locator("script").count() == 1
    assert p.title() == title
    p.wait_for_timeout(200)


def test_approve_a_suspended_run_from_the_inbox(page, tmp_path):
    p = page.page
    run_prompt(p, "Mail ops", "mail")
    p.wait_for_selector("[data-outcome=awaiting_approval]")
    assert "To: ops@example.org" in p.locator(".outcome .preview").inner_text()
    p.click("text=Open the approvals inbox")
    entry = p.locator(".inbox .entry")
    entry.wait_for()
    assert entry.count() == 1
    assert entry.locator(".preview").inner_text() == "To: ops@example.org\nSubject: hello"
    assert entry.locator(".digest").inner_text().startswith("Turn digest: ")
    screenshot(p, "inbox.png", tmp_path)
    entry.get_by_role("button", name="Approve").click()
    p.wait_for_selector("#approval-output [data-outcome=done]")
    assert p.locator("#approval-output [data-outcome=done] pre").inner_text() == "Mail sent."
    kinds = p.locator("#approval-output .step").evaluate_all(
        "nodes => nodes.map(n => n.dataset.kind)"
    )
    assert kinds == ["start", "approval", "tool", "request", "llm", "finish"]
    p.wait_for_selector("text=No run is waiting for approval.")


def test_the_runs_view_shows_the_filtered_timeline(page):
    p = page.page
    run_prompt(p, "Which city?", "demo")
    p.wait_for_selector("[data-outcome=done]")
    p.click("nav a[data-view=runs]")
    p.locator("#runs-list button.link").first.click()
    p.wait_for_selector("#run-detail .step")
    assert p.locator("#run-detail .note.audit").inner_text().startswith("Audit view:")
    stored = tool_step(p.locator("#run-detail"), "table_tool")
    assert "Artifacts" not in tab_names(stored)
    assert '"tool_artifact_types"' in (stored.locator(".tabpanel").last.text_content() or "")


# -- values that are not strings -----------------------------------------------------------------

CRAFTED = {"toString": 1}
CRAFTED_TEXT = '{"toString":1}'


def ndjson(*events: Any) -> str:
    return "".join(json.dumps(e) + "\n" for e in events)


def fulfil_json(route: Any, body: Any) -> None:
    route.fulfill(status=200, content_type="application/json", body=json.dumps(body))


def test_a_table_of_json_values_shows_them_as_json_and_the_run_goes_on(page):
    p = page.page
    run_prompt(p, "Craft", "crafted")
    p.wait_for_selector("[data-outcome=done]")
    assert p.locator("[data-outcome=done] pre").inner_text() == "Still rendering."
    assert tool_step(p, "plain_tool").count() == 1
    step = tool_step(p, "crafted_tool")
    step.get_by_role("tab", name="Artifacts").click()
    panel = step.locator(".artifacts")
    assert panel.locator("th").all_inner_texts() == ["name", '["a",1]']
    assert panel.locator("td").all_inner_texts() == [CRAFTED_TEXT, "x"]


def test_non_string_values_in_a_stream_are_shown_as_json(page):
    p = page.page
    artifact = {"type": "table", "label": CRAFTED, "data": {"columns": [CRAFTED], "rows": [[[1]]]}}
    body = ndjson(
        {"event": "context", "provider": CRAFTED, "zone": "local", "offered": [CRAFTED]},
        {
            "event": "step",
            "step": {
                "kind": "tool",
                "sequence": CRAFTED,
                "tool_name": CRAFTED,
                "tool_artifacts": [artifact],
            },
        },
        {
            "event": "step",
            "step": {
                "kind": "llm",
                "sequence": 2,
                "round": CRAFTED,
                "requested_tool_calls": [{"name": CRAFTED}],
            },
        },
        {"event": "step", "step": {"kind": "approval", "sequence": 3, "decision": CRAFTED}},
        {"event": "step", "step": None},
        {"event": "step", "step": {"kind": "tool", "sequence": 5, "tool_name": "later_tool"}},
        {
            "event": "awaiting_approval",
            "run_id": CRAFTED,
            "turn_digest": CRAFTED,
            "pending": [{"name": CRAFTED, "arguments": {}, "preview": [CRAFTED, "line"]}],
        },
    )
    p.route(
        "**/api/run",
        lambda route: route.fulfill(status=200, content_type="application/x-ndjson", body=body),
    )
    run_prompt(p, "Craft", "demo")
    p.wait_for_selector("[data-outcome=awaiting_approval]")
    assert p.locator(".steps > li").count() == 5
    assert tool_step(p, "later_tool").count() == 1
    assert p.locator(".context dd").all_inner_texts()[0] == CRAFTED_TEXT
    assert p.locator(".context dd").all_inner_texts()[-1] == CRAFTED_TEXT
    first = p.locator(".steps > li").first
    assert first.locator(".seq").inner_text() == f"#{CRAFTED_TEXT}"
    assert first.locator(".summary").inner_text() == f"{CRAFTED_TEXT} (ok)"
    first.get_by_role("tab", name="Artifacts").click()
    assert first.locator(".artifact-label").inner_text() == CRAFTED_TEXT
    assert first.locator("th").inner_text() == CRAFTED_TEXT
    assert first.locator("td").inner_text() == "[1]"
    llm = p.locator(".steps > li").nth(1)
    assert llm.locator(".round").inner_text() == f"round {CRAFTED_TEXT}"
    assert llm.locator(".summary").inner_text() == f"asks for {CRAFTED_TEXT}"
    waiting = p.locator("[data-outcome=awaiting_approval]")
    assert waiting.locator("p").first.inner_text().startswith(f"Run {CRAFTED_TEXT} waits")
    assert waiting.locator(".pending strong").inner_text() == CRAFTED_TEXT
    assert waiting.locator(".preview").inner_text() == f"{CRAFTED_TEXT}\nline"
    assert waiting.locator(".digest").inner_text() == f"Turn digest: {CRAFTED_TEXT}"


def test_non_string_values_in_the_runs_view_are_shown_as_json(page):
    p = page.page
    run = {"run_id": "r1", "kind": CRAFTED, "status": ["done"], "started_at": CRAFTED, "steps": 1}
    artifact = {"type": "table", "label": [1], "data": {"columns": [CRAFTED], "rows": [[CRAFTED]]}}
    steps = [
        {"sequence": 1, "kind": "tool", "tool_name": CRAFTED, "tool_artifacts": [artifact]},
        {"sequence": 2, "kind": "llm", "finish_reason": CRAFTED},
    ]
    detail = {"run": run, "privacy_level": CRAFTED, "steps": steps, "decisions": []}
    p.route("**/api/runs", lambda route: fulfil_json(route, {"runs": [run]}))
    p.route("**/api/runs/r1", lambda route: fulfil_json(route, detail))
    p.click("nav a[data-view=runs]")
    p.locator("#runs-list button.link").click()
    p.wait_for_selector("#run-detail .step")
    cells = p.locator("#runs-list td").all_inner_texts()
    assert cells[0] == CRAFTED_TEXT
    assert cells[2:4] == [CRAFTED_TEXT, '["done"]']
    assert f'privacy level "{CRAFTED_TEXT}"' in p.locator("#run-detail .note.audit").inner_text()
    stored = p.locator("#run-detail .step")
    assert stored.count() == 2
    assert stored.nth(1).locator(".summary").inner_text() == CRAFTED_TEXT
    stored.first.get_by_role("tab", name="Artifacts").click()
    assert stored.first.locator(".artifact-label").inner_text() == "[1]"
    assert stored.first.locator("td").inner_text() == CRAFTED_TEXT


def test_the_direct_call_option_says_who_calls_and_what_is_bypassed(page):
    p = page.page
    option = p.get_by_role("radio", name="Direct tool call")
    note = p.locator(f"#{option.get_attribute('aria-describedby')}")
    assert note.is_visible()
    text = note.inner_text()
    assert "made by you, the holder of this page's token, as nrllm invoke is" in text
    assert "needs no approval" in text
    assert "the tool switches do not apply" in text


def test_a_tools_question_shows_as_text_and_the_answer_is_posted(page):
    p = page.page
    title = p.title()
    message = "<img src=x onerror=\"document.title='pwned'\"> Which?"
    fields = [
        {"name": "<b>who</b>", "type": "string", "required": True},
        {"name": "count", "type": "integer"},
        {"name": "sure", "type": "boolean"},
        {"name": "colour", "type": "string", "enum": ["red", "<i>blue</i>"]},
    ]
    body = ndjson(
        {"event": "context", "provider": "demo", "zone": "local", "offered": []},
        {
            "event": "question",
            "question_id": "q1",
            "tool": "t",
            "message": message,
            "fields": fields,
        },
    )
    posted: list[Any] = []

    def answer(route: Any) -> None:
        posted.append((route.request.url, json.loads(route.request.post_data or "{}")))
        fulfil_json(route, {"action": "accept"})

    p.route("**/api/questions/**", answer)
    p.route(
        "**/api/run",
        lambda route: route.fulfill(status=200, content_type="application/x-ndjson", body=body),
    )
    run_prompt(p, "Ask", "demo")
    panel = p.locator(".step[data-kind=question]")
    panel.wait_for()
    assert panel.locator(".question-message").inner_text() == message
    assert panel.locator(".question-field span").first.inner_text() == "<b>who</b>"
    assert p.locator("img, b, i").count() == 0
    assert p.title() == title
    # The stream ended with no outcome: the panel says the question is over.
    p.wait_for_selector("[data-outcome=error]")
    assert panel.locator(".question-form").is_hidden()
    assert panel.locator(".question-status").inner_text() == "The question is over."
    assert posted == []


def test_each_request_says_what_the_model_had_read(page):
    p = page.page
    run_prompt(p, "Which city?", "demo")
    p.wait_for_selector("[data-outcome=done]")
    requests = p.locator(".step[data-kind=request] .summary")
    assert requests.all_inner_texts() == [
        "model has read publicContent · trusted",
        "model has read publicContent · untrusted from table_tool, plain_tool",
    ]


# -- the Runs view: filters in the address, pages, times, totals ----------------------------------


def expect(target: Any) -> Any:
    # Imported here, as the browser is: the module loads where Playwright is not installed.
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(target)


@pytest.fixture
def seeded(tmp_path: Path) -> None:
    # The server's host stores in tmp_path/data: these runs sit beside its own.
    seed_runs(tmp_path / "data", RUNS)


def listed(p: Any) -> list[str]:
    p.wait_for_selector("#runs-list table, #runs-list p.muted, #runs-list .error")
    return p.locator("#runs-list tbody button.link").all_inner_texts()


def test_the_runs_filters_live_in_the_address_and_survive_a_reload(page, server, seeded):
    p = page.page
    p.click("nav a[data-view=runs]")
    assert listed(p) == ["r5", "r4", "r3", "r2", "r1"]
    p.fill("#filter-actor", "ana")
    p.fill("#filter-tool", "search")
    p.click("#runs-apply")
    expect(p).to_have_url(re.compile(re.escape("actor=ana")))
    expect(p.locator("#runs-list tbody tr")).to_have_count(1)
    assert listed(p) == ["r1"]
    assert p.evaluate("location.hash") == "#runs?actor=ana&tool=search"
    p.reload()
    assert listed(p) == ["r1"]
    assert p.input_value("#filter-actor") == "ana"
    assert p.input_value("#filter-tool") == "search"
    # A link shared with another person: the same filters, in a page of its own.
    other = p.context.new_page()
    other.goto(f"{server}/#runs?status=failed")
    assert listed(other) == ["r2"]
    assert other.input_value("#filter-status") == "failed"
    other.close()
    p.click("#runs-clear")
    expect(p).to_have_url(re.compile("#runs$"))
    expect(p.locator("#runs-list tbody tr")).to_have_count(5)


def test_a_time_range_is_chosen_in_local_time_and_kept_in_utc(page, seeded):
    p = page.page
    p.click("nav a[data-view=runs]")
    listed(p)
    local = p.evaluate("new Date('2026-03-01T10:00:00Z').toISOString()")
    assert local == "2026-03-01T10:00:00.000Z"
    # The same moment as the browser's local wall-clock time, as the form takes it.
    wall = p.evaluate(
        """(() => {
            const d = new Date('2026-03-01T10:00:00Z');
            const z = (n) => String(n).padStart(2, '0');
            const day = `${d.getFullYear()}-${z(d.getMonth() + 1)}-${z(d.getDate())}`;
            return `${day}T${z(d.getHours())}:${z(d.getMinutes())}`;
        })()"""
    )
    p.fill("#filter-before", wall)
    p.click("#runs-apply")
    expect(p).to_have_url(re.compile(re.escape("before=")))
    assert "before=2026-03-01T10%3A00%3A00.000Z" in p.evaluate("location.hash")
    expect(p.locator("#runs-list tbody tr")).to_have_count(1)
    assert listed(p) == ["r1"]


def test_runs_are_paged_forward_and_back_to_the_first(page, server, seeded):
    p = page.page
    p.goto(f"{server}/#runs?limit=2")
    assert listed(p) == ["r5", "r4"]
    assert p.locator("#runs-first").count() == 0
    p.click("#runs-next")
    expect(p).to_have_url(re.compile(re.escape("cursor=")))
    expect(p.locator("#runs-list tbody button").first).to_have_text("r3")
    assert listed(p) == ["r3", "r2"]
    # The page is in the address: a reload shows it again.
    p.reload()
    assert listed(p) == ["r3", "r2"]
    p.click("#runs-next")
    expect(p.locator("#runs-list tbody button").first).to_have_text("r1")
    assert listed(p) == ["r1"]
    assert p.locator("#runs-next").count() == 0
    p.click("#runs-first")
    expect(p.locator("#runs-list tbody button").first).to_have_text("r5")
    assert p.evaluate("location.hash") == "#runs?limit=2"


def test_a_refused_filter_or_cursor_is_said_as_text(page, server, seeded):
    p = page.page
    p.goto(f"{server}/#runs?status=%3Cb%3Esleeping%3C/b%3E")
    alert = p.locator("#runs-list .error")
    alert.wait_for()
    assert alert.inner_text() == (
        'The runs could not be read: Unknown status "<b>sleeping</b>": one of running, '
        "completed, awaiting_approval, failed, cancelled, interrupted."
    )
    assert p.locator("#runs-list b").count() == 0
    p.goto(f"{server}/#runs?limit=2&cursor=edited.0000")
    expect(p.locator("#runs-list .error")).to_contain_text("start from the first page")
    p.click("#runs-first")
    expect(p.locator("#runs-list tbody tr")).to_have_count(2)
    # The two refused requests' 400s, which the console reports.
    refused = "the server responded with a status of 400 (Bad Request)"
    assert page.problems == [f"error: Failed to load resource: {refused}"] * 2
    page.problems.clear()


def test_start_times_are_relative_with_the_exact_local_time_on_hover(page, seeded):
    p = page.page
    p.click("nav a[data-view=runs]")
    listed(p)
    first = p.locator("#runs-list tbody tr").last.locator("time")
    assert first.get_attribute("datetime") == "2026-03-01T09:00:00.000Z"
    expected_title = p.evaluate(
        "new Date('2026-03-01T09:00:00Z').toLocaleString(undefined,"
        " {dateStyle: 'medium', timeStyle: 'long'})"
    )
    assert first.get_attribute("title") == expected_title
    assert first.inner_text().endswith("ago")
    assert "2026-03-01T09:00:00" not in p.locator("#runs-list").inner_text()


def test_a_run_shows_its_totals(page, seeded):
    p = page.page
    p.click("nav a[data-view=runs]")
    listed(p)
    p.get_by_role("button", name="r4", exact=True).click()
    p.wait_for_selector("#run-detail table.totals")
    shown = dict(
        zip(
            p.locator("#run-detail table.totals th").all_inner_texts(),
            p.locator("#run-detail table.totals td").all_inner_texts(),
            strict=True,
        )
    )
    assert shown == {
        "Wall time": "1 min 0 s",
        "Model time": "40 ms",
        "Tool time": "15 ms",
        "Tokens in": "10",
        "Tokens out": "5",
        "Cached": "0",
        "Reasoning": "3",
        "Tool calls": "3",
        "Errors": "1",
    }


# -- a run's waterfall and its audit chain's verdict ----------------------------------------------


def open_run(p: Any, run_id: str) -> Any:
    p.click("nav a[data-view=runs]")
    listed(p)
    p.get_by_role("button", name=run_id, exact=True).click()
    p.wait_for_selector("#run-detail svg.timeline")
    return p.locator("#run-detail svg.timeline .tl-row")


def bar_classes(rows: Any) -> list[str]:
    return [rows.nth(i).locator(".tl-bar").get_attribute("class") for i in range(rows.count())]


def test_the_waterfall_has_a_bar_per_step_classed_by_kind_and_outcome(page):
    p = page.page
    run = {"run_id": "w1", "kind": "run", "status": "failed", "started_at": None, "steps": 12}
    steps = [
        {"sequence": 1, "kind": "start", "duration_ms": 0},
        {"sequence": 2, "kind": "gate", "duration_ms": 1},
        {"sequence": 3, "kind": "request", "duration_ms": 0},
        {"sequence": 4, "kind": "llm", "duration_ms": 400},
        {
            "sequence": 5,
            "kind": "tool",
            "tool_name": "search",
            "tool_outcome": "ok",
            "duration_ms": 100,
        },
        {
            "sequence": 6,
            "kind": "tool",
            "tool_name": "fetch",
            "tool_is_error": True,
            "tool_outcome": "timeout",
            "duration_ms": 300,
        },
        {
            "sequence": 7,
            "kind": "tool",
            "tool_name": "send_mail",
            "tool_outcome": "refused",
            "duration_ms": 0,
        },
        {"sequence": 8, "kind": "suspension", "duration_ms": 0},
        {"sequence": 9, "kind": "approval", "decision": "denied", "duration_ms": 0},
        {
            "sequence": 10,
            "kind": "sampling",
            "tool_name": "ask",
            "refused": "no provider",
            "duration_ms": 2,
        },
        {
            "sequence": 11,
            "kind": "elicitation",
            "tool_name": "ask",
            "action": "decline",
            "duration_ms": 5,
        },
        {"sequence": 12, "kind": "finish", "status": "failed", "duration_ms": 0},
    ]
    detail = {"run": run, "privacy_level": "metadata", "steps": steps, "decisions": []}
    verdict = {"verified": True, "broken": None, "text": "Verified: fine.", "note": None}
    p.route("**/api/runs", lambda route: fulfil_json(route, {"runs": [run], "next": None}))
    p.route("**/api/runs/w1", lambda route: fulfil_json(route, detail))
    p.route("**/api/runs/w1/verify", lambda route: fulfil_json(route, verdict))
    rows = open_run(p, "w1")
    assert rows.count() == len(steps)
    assert bar_classes(rows) == [
        "tl-bar tl-kind-start tl-ok",
        "tl-bar tl-kind-gate tl-ok",
        "tl-bar tl-kind-request tl-ok",
        "tl-bar tl-kind-llm tl-ok",
        "tl-bar tl-kind-tool tl-ok",
        "tl-bar tl-kind-tool tl-error",
        "tl-bar tl-kind-tool tl-refused",
        "tl-bar tl-kind-suspension tl-ok",
        "tl-bar tl-kind-approval tl-refused",
        "tl-bar tl-kind-sampling tl-refused",
        "tl-bar tl-kind-elicitation tl-refused",
        "tl-bar tl-kind-finish tl-error",
    ]
    titles = [rows.nth(i).locator("title").text_content() for i in range(rows.count())]
    assert titles[3] == "#4 llm: 400 ms"
    assert titles[5] == "#6 tool fetch (error): 300 ms"
    assert titles[6] == "#7 tool send_mail (refused): 0.0 ms"
    # Bars follow one another and are as long as their steps: the model's is 4 times the search.
    box = [rows.nth(i).locator(".tl-bar").bounding_box() for i in (3, 4, 5)]
    assert box[1]["x"] == pytest.approx(box[0]["x"] + box[0]["width"], abs=0.5)
    assert box[0]["width"] == pytest.approx(4 * box[1]["width"], rel=0.01)
    assert box[2]["width"] == pytest.approx(3 * box[1]["width"], rel=0.01)
    # A step of no time still shows.
    assert rows.nth(0).locator(".tl-bar").bounding_box()["width"] >= 2


def test_a_waterfall_draws_steps_at_their_times_so_parallel_calls_overlap(page):
    p = page.page
    run = {"run_id": "w2", "kind": "run", "status": "completed", "started_at": None, "steps": 5}

    def at(ms: int) -> str:
        return f"2026-03-01T09:00:{ms // 1000:02d}.{ms % 1000:03d}000+00:00"

    steps = [
        {"sequence": 1, "kind": "start", "duration_ms": 0, "recorded_at": at(0)},
        {"sequence": 2, "kind": "llm", "duration_ms": 200, "recorded_at": at(200)},
        # Two calls of one turn ran at once: 200-500 ms and 250-450 ms.
        {
            "sequence": 3,
            "kind": "tool",
            "tool_name": "search",
            "tool_outcome": "ok",
            "duration_ms": 300,
            "recorded_at": at(500),
        },
        {
            "sequence": 4,
            "kind": "tool",
            "tool_name": "fetch",
            "tool_outcome": "ok",
            "duration_ms": 200,
            "recorded_at": at(450),
        },
        {
            "sequence": 5,
            "kind": "finish",
            "status": "completed",
            "duration_ms": 0,
            "recorded_at": at(1000),
        },
    ]
    detail = {"run": run, "privacy_level": "metadata", "steps": steps, "decisions": []}
    verdict = {"verified": True, "broken": None, "text": "Verified: fine.", "note": None}
    p.route("**/api/runs", lambda route: fulfil_json(route, {"runs": [run], "next": None}))
    p.route("**/api/runs/w2", lambda route: fulfil_json(route, detail))
    p.route("**/api/runs/w2/verify", lambda route: fulfil_json(route, verdict))
    rows = open_run(p, "w2")
    assert p.locator("#run-detail svg.timeline").get_attribute("data-layout") == "time"
    assert rows.count() == len(steps)
    # Names and classes are as in the sequential layout.
    assert rows.nth(2).locator("title").text_content() == "#3 tool search: 300 ms"
    assert bar_classes(rows)[2:4] == ["tl-bar tl-kind-tool tl-ok", "tl-bar tl-kind-tool tl-ok"]
    box = [rows.nth(i).locator(".tl-bar").bounding_box() for i in range(5)]
    scale = box[4]["x"] - box[0]["x"]  # the finish, at 1000 ms
    assert scale > 0

    def ms(x: float) -> float:
        return (x - box[0]["x"]) / scale * 1000

    # Each bar ends at its recorded_at and starts its duration before.
    assert ms(box[1]["x"]) == pytest.approx(0, abs=3)
    assert ms(box[1]["x"] + box[1]["width"]) == pytest.approx(200, abs=3)
    assert ms(box[2]["x"]) == pytest.approx(200, abs=3)
    assert ms(box[3]["x"]) == pytest.approx(250, abs=3)
    assert ms(box[3]["x"] + box[3]["width"]) == pytest.approx(450, abs=3)
    # The two calls overlap: fetch starts before search ends.
    assert box[3]["x"] < box[2]["x"] + box[2]["width"]
    caption = p.locator("#run-detail figure.waterfall figcaption").inner_text()
    assert "overlap" in caption


def test_a_waterfall_with_a_step_without_a_time_is_laid_out_by_sequence(page):
    p = page.page
    run = {"run_id": "w3", "kind": "run", "status": "completed", "started_at": None, "steps": 3}
    steps = [
        {"sequence": 1, "kind": "llm", "duration_ms": 100, "recorded_at": "2026-03-01T09:00:00Z"},
        {"sequence": 2, "kind": "tool", "tool_name": "a", "duration_ms": 100},
        {
            "sequence": 3,
            "kind": "tool",
            "tool_name": "b",
            "duration_ms": 100,
            "recorded_at": "2026-03-01T09:00:00Z",
        },
    ]
    detail = {"run": run, "privacy_level": "metadata", "steps": steps, "decisions": []}
    verdict = {"verified": True, "broken": None, "text": "Verified: fine.", "note": None}
    p.route("**/api/runs", lambda route: fulfil_json(route, {"runs": [run], "next": None}))
    p.route("**/api/runs/w3", lambda route: fulfil_json(route, detail))
    p.route("**/api/runs/w3/verify", lambda route: fulfil_json(route, verdict))
    rows = open_run(p, "w3")
    assert p.locator("#run-detail svg.timeline").get_attribute("data-layout") == "sequence"
    box = [rows.nth(i).locator(".tl-bar").bounding_box() for i in range(3)]
    assert box[1]["x"] == pytest.approx(box[0]["x"] + box[0]["width"], abs=0.5)
    assert box[2]["x"] == pytest.approx(box[1]["x"] + box[1]["width"], abs=0.5)


def test_a_bar_opens_its_step_by_mouse_and_keyboard(page, seeded):
    p = page.page
    rows = open_run(p, "r4")
    # r4: one model step, then search, fetch (failed), search.
    assert [rows.nth(i).get_attribute("data-kind") for i in range(4)] == [
        "llm",
        "tool",
        "tool",
        "tool",
    ]
    assert rows.nth(2).get_attribute("data-outcome") == "error"
    cards = p.locator("#run-detail .step")

    def opened() -> str:
        return p.evaluate(
            "document.activeElement.closest('.step')?.querySelector('.seq')?.textContent"
        )

    rows.nth(2).click()
    expect(cards.nth(2)).to_have_class(re.compile(r"\bchosen\b"))
    assert opened() == "#3"
    assert cards.nth(2).get_by_role("tab", name="Result").is_visible()
    # The keyboard: each row is a button in the tab order, Enter or Space opens it.
    rows.nth(1).focus()
    p.keyboard.press("Enter")
    expect(cards.nth(1)).to_have_class(re.compile(r"\bchosen\b"))
    assert opened() == "#2"
    assert p.locator("#run-detail .step.chosen").count() == 1
    rows.nth(3).focus()
    p.keyboard.press("ArrowUp")
    p.keyboard.press(" ")
    assert opened() == "#3"
    assert rows.nth(0).get_attribute("tabindex") == "0"
    assert rows.nth(0).get_attribute("role") == "button"


def test_a_hostile_tool_name_in_the_waterfall_is_text(page, tmp_path, hostile):
    p = page.page
    title = p.title()
    seed_runs(
        tmp_path / "data",
        [{"run_id": "h1", "started_at": RUNS[0]["started_at"], "tools": [hostile["label"]]}],
    )
    rows = open_run(p, "h1")
    assert rows.count() == 1
    assert rows.first.locator("title").text_content() == f"#1 tool {hostile['label']}: 5.0 ms"
    # The row's own text is cut to fit its column, still as text.
    assert rows.first.locator(".tl-name").text_content().startswith("#1 tool <img src=x")
    assert p.locator("#run-detail svg image, #run-detail svg img, img").count() == 0
    assert p.title() == title
    p.wait_for_timeout(200)


def test_the_chain_verdict_shows_verified_then_broken_where(page, seeded, tmp_path):
    from sqlalchemy import text

    from nrllm_core.store import Store

    p = page.page
    open_run(p, "r4")
    verdict = p.locator("#run-detail .verdict")
    expect(verdict).to_have_attribute("data-verified", "true")
    assert verdict.inner_text().startswith("Audit chain: Verified: no stored step was edited")
    assert p.locator("#run-detail .tl-broken").count() == 0
    store = Store.open(None, data_dir=tmp_path / "data", environ={})
    try:
        with store._engine.begin() as connection:
            # Step 3, the failed fetch: steps 2 and 4 are the same search, so an edit of
            # either could be step 4 moved, and the check rightly says "reordered".
            connection.execute(
                text("UPDATE run_steps SET payload = '{}' WHERE run_id = 'r4' AND sequence = 3")
            )
    finally:
        store.close()
    p.get_by_role("button", name="r4", exact=True).click()
    expect(verdict).to_have_attribute("data-verified", "false")
    assert "Broken at step 3: it was changed after it was recorded." in verdict.inner_text()
    broken = p.locator("#run-detail .tl-row.tl-broken")
    assert broken.count() == 1
    assert broken.get_attribute("data-sequence") == "3"


# -- the approvals inbox: diff, who may approve, expiry --------------------------------------------

HOSTILE_LINE = "<img src=x onerror=\"document.title='pwned-diff'\"><b>bold?</b>"


def inbox_entry(**fields: Any) -> dict[str, Any]:
    """An inbox entry as the API sends it, for the page to render (the API is tested apart)."""
    return {
        "run": {
            "run_id": "r-1",
            "provider": "mail",
            "skill": None,
            "actor": "operator",
            "status": "awaiting_approval",
            "started_at": "2026-03-01T09:00:00+00:00",
        },
        "run_id": "r-1",
        "pending": [
            {
                "call_id": "c0",
                "name": "update_record",
                "arguments": {"table": "notes"},
                "requires_approval": True,
                "preview": ["Update notes:7", "Before:", "title: old", "After:", "title: new"],
                "preview_failed": False,
                "preview_diff": {
                    "heading": ["Update notes:7"],
                    "lines": [
                        {"change": "same", "text": "id: 7"},
                        {"change": "removed", "text": f"title: {HOSTILE_LINE}"},
                        {"change": "added", "text": HOSTILE_LINE},
                        {"change": CRAFTED, "text": CRAFTED},
                    ],
                },
            }
        ],
        "untrusted": [],
        "turn_digest": "d" * 64,
        "expires_at": "2099-01-01T12:00:00+00:00",
        "may_approve": True,
        "approve_refused": None,
        "may_deny": True,
        "deny_refused": None,
        **fields,
    }


def open_inbox(p: Any, *entries: dict[str, Any], more: bool = False) -> Any:
    answer = {"approvals": list(entries), "more": more}
    p.route("**/api/approvals", lambda route: fulfil_json(route, answer))
    p.click("nav a[data-view=approvals]")
    entry = p.locator(".inbox .entry")
    entry.first.wait_for()
    return entry


def test_an_inbox_with_more_waiting_than_shown_says_so(page):
    p = page.page
    entry = open_inbox(p, inbox_entry(), more=True)
    note = p.locator("#approvals-list > p.muted")
    assert entry.count() == 1
    assert note.inner_text() == (
        "More runs wait than the 1 newest shown here: decide these, or list them all with "
        "nrllm runs --status awaiting_approval."
    )


def test_an_updates_preview_shows_as_a_diff_of_text(page):
    p = page.page
    title = p.title()
    entry = open_inbox(p, inbox_entry())
    diff = entry.locator(".preview.diff")
    assert diff.locator(".diff-heading").inner_text() == "Update notes:7"
    changes = diff.locator(".diff-line").evaluate_all("nodes => nodes.map(n => n.dataset.change)")
    # A change the page does not know shows as unchanged text, never dropped.
    assert changes == ["same", "removed", "added", "same"]
    removed = diff.locator("del.diff-removed")
    added = diff.locator("ins.diff-added")
    assert removed.inner_text() == f"- title: {HOSTILE_LINE}"
    assert added.inner_text() == f"+ {HOSTILE_LINE}"
    assert removed.get_attribute("title") == "removed"
    assert diff.locator(".diff-line").last.inner_text() == f"  {CRAFTED_TEXT}"
    # The hostile lines stayed text: nothing was parsed or run.
    assert p.locator("img").count() == 0
    assert diff.locator("b").count() == 0
    assert p.title() == title


def test_a_plain_preview_stays_its_lines(page):
    p = page.page
    plain = inbox_entry()
    plain["pending"][0] |= {"preview": ["To: ops", HOSTILE_LINE], "preview_diff": None}
    entry = open_inbox(p, plain)
    assert entry.locator(".preview").inner_text() == f"To: ops\n{HOSTILE_LINE}"
    assert entry.locator(".diff").count() == 0


def test_approve_is_disabled_with_the_servers_reason_when_the_rule_refuses_it(page):
    p = page.page
    reason = "four-eyes: the approver must differ from the run's initiator"
    entry = open_inbox(p, inbox_entry(may_approve=False, approve_refused=reason))
    approve = entry.get_by_role("button", name="Approve")
    deny = entry.get_by_role("button", name="Deny")
    assert approve.is_disabled()
    assert deny.is_enabled()
    described = approve.get_attribute("aria-describedby")
    assert described
    assert p.locator(f"#{described}").inner_text() == f"Approve: {reason}"
    assert entry.locator(".refused").count() == 1


def test_an_entry_without_the_servers_verdict_offers_no_decision(page):
    p = page.page
    entry = open_inbox(p, inbox_entry(may_approve=None, may_deny="yes"))
    assert entry.get_by_role("button", name="Approve").is_disabled()
    assert entry.get_by_role("button", name="Deny").is_disabled()
    assert entry.locator(".refused").all_inner_texts() == [
        "Approve is not allowed.",
        "Deny is not allowed.",
    ]


def test_the_expiry_and_the_start_are_relative_with_the_exact_time_on_hover(page):
    p = page.page
    soon = p.evaluate("new Date(Date.now() + 12.5 * 60 * 1000).toISOString()")
    entry = open_inbox(p, inbox_entry(expires_at=soon))
    expiry = entry.locator(".expires time")
    assert expiry.get_attribute("datetime") == soon
    assert expiry.inner_text() == "in 12 minutes"
    exact = p.evaluate(
        "s => new Date(s).toLocaleString(undefined, {dateStyle: 'medium', timeStyle: 'long'})",
        soon,
    )
    assert expiry.get_attribute("title") == exact
    started = entry.locator(".started time")
    assert started.get_attribute("datetime") == "2026-03-01T09:00:00.000Z"
    assert started.inner_text().endswith("ago")
    # The raw ISO times are gone from the entry's text.
    assert "2026-03-01T09:00:00" not in entry.inner_text()


def test_a_suspended_runs_entry_may_be_approved_and_expires_after_the_ttl(page):
    p = page.page
    run_prompt(p, "Mail ops", "mail")
    p.wait_for_selector("[data-outcome=awaiting_approval]")
    p.click("text=Open the approvals inbox")
    entry = p.locator(".inbox .entry")
    entry.wait_for()
    # No four-eyes here: the operator may decide their own run, for the default TTL (7 days).
    assert entry.get_by_role("button", name="Approve").is_enabled()
    assert entry.locator(".refused").count() == 0
    assert entry.locator(".expires time").inner_text() == "next week"

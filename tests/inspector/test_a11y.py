"""The inspector's accessibility: axe-core on every view, and every action by the keyboard.

axe-core comes from npm, pinned in tests/inspector/axe/package-lock.json and installed by
`make install-dev` (npm ci). The page's Content-Security-Policy allows only its own scripts,
so the test serves axe.min.js at a same-origin address (a Playwright route) and adds it there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from .test_browser import (
    browser,
    chromium,
    expect,
    fulfil_json,
    inbox_entry,
    listed,
    ndjson,
    open_inbox,
    page,
    run_prompt,
    seeded,
    server,
)

# test_browser's fixtures, which pytest finds here by these names.
FIXTURES = (browser, chromium, page, seeded, server)
AXE = Path(__file__).resolve().parent / "axe" / "node_modules" / "axe-core" / "axe.min.js"
AXE_ADDRESS = "/static/axe.min.js"
# Violations of these impacts fail; axe's moderate and minor findings are not gated.
GATED = ("serious", "critical")


@pytest.fixture(scope="module")
def axe_source() -> str:
    if not AXE.exists():
        message = (
            f"no axe-core at {AXE}: run make install-dev (npm ci --prefix tests/inspector/axe)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return AXE.read_text(encoding="utf-8")


def check(p: Any, source: str, view: str) -> None:
    """Run axe on the page as it is; no serious or critical violation may remain."""
    if not p.evaluate("typeof window.axe === 'object'"):
        p.route(
            f"**{AXE_ADDRESS}",
            lambda route: route.fulfill(status=200, content_type="text/javascript", body=source),
        )
        p.add_script_tag(url=AXE_ADDRESS)
    violations = p.evaluate(
        """async () => {
            const result = await axe.run(document, {resultTypes: ['violations']});
            return result.violations.map(v => ({
                id: v.id, impact: v.impact, help: v.help,
                targets: v.nodes.map(n => n.target.join(' ')),
            }));
        }"""
    )
    gated = [v for v in violations if v["impact"] in GATED]
    assert gated == [], f"{view}: " + json.dumps(gated, indent=1)


def test_the_playground_idle_and_after_a_run(page, axe_source):
    p = page.page
    check(p, axe_source, "playground, idle")
    p.get_by_role("radio", name="Direct tool call").check()
    check(p, axe_source, "playground, direct tool call")
    p.get_by_role("radio", name="Prompt").check()
    run_prompt(p, "Which city?", "demo")
    p.wait_for_selector("[data-outcome=done]")
    check(p, axe_source, "playground, a run streamed")


def test_a_run_waiting_for_approval_and_the_inbox(page, axe_source):
    p = page.page
    run_prompt(p, "Mail ops", "mail")
    p.wait_for_selector("[data-outcome=awaiting_approval]")
    check(p, axe_source, "playground, awaiting approval")
    p.click("text=Open the approvals inbox")
    entry = p.locator(".inbox .entry")
    entry.wait_for()
    check(p, axe_source, "approvals, an entry")
    entry.get_by_role("button", name="Approve").click()
    p.wait_for_selector("#approval-output [data-outcome=done]")
    check(p, axe_source, "approvals, a decision's run")


def test_the_runs_list_a_run_and_its_timeline(page, server, seeded, axe_source):
    p = page.page
    p.goto(f"{server}/#runs?limit=2")
    listed(p)
    check(p, axe_source, "runs, a page of the list")
    p.click("#runs-next")
    expect(p.locator("#runs-list tbody button").first).to_have_text("r3")
    p.goto(f"{server}/#runs")
    listed(p)
    p.get_by_role("button", name="r4", exact=True).click()
    p.wait_for_selector("#run-detail svg.timeline")
    p.locator("#run-detail svg.timeline .tl-row").nth(2).click()
    check(p, axe_source, "runs, a run open with its timeline")


# A stream that stays open after its events, so the question stays asked while axe looks.
OPEN_STREAM = """(body) => {
    const own = window.fetch;
    window.fetch = (url, init) => {
        if (!String(url).endsWith('api/run')) return own(url, init);
        const bytes = new TextEncoder().encode(body);
        const stream = new ReadableStream({ start(c) { c.enqueue(bytes); } });
        return Promise.resolve(new Response(stream, {
            status: 200, headers: { 'Content-Type': 'application/x-ndjson' },
        }));
    };
}"""


def ask(p: Any) -> Any:
    fields = [
        {"name": "who", "type": "string", "required": True},
        {"name": "count", "type": "integer"},
        {"name": "sure", "type": "boolean"},
        {"name": "colour", "type": "string", "enum": ["red", "blue"]},
    ]
    body = ndjson(
        {"event": "context", "provider": "demo", "zone": "local", "offered": []},
        {
            "event": "question",
            "question_id": "q1",
            "tool": "t",
            "message": "Which?",
            "fields": fields,
        },
    )
    p.evaluate(OPEN_STREAM, body)
    run_prompt(p, "Ask", "demo")
    panel = p.locator(".step[data-kind=question]")
    panel.locator(".question-form").wait_for()
    return panel


def test_a_tools_question_checked_and_answered_by_keyboard(page, axe_source):
    p = page.page
    posted: list[Any] = []

    def answer(route: Any) -> None:
        posted.append(json.loads(route.request.post_data or "{}"))
        fulfil_json(route, {"action": "accept"})

    p.route("**/api/questions/**", answer)
    ask(p)
    check(p, axe_source, "playground, a tool's question")
    tab_to(p, at(".question-form input[type=text]"))
    p.keyboard.type("ana")
    tab_to(p, "node.matches('.question-form button') && node.textContent === 'Answer'")
    p.keyboard.press("Enter")
    expect(p.locator(".question-form button").first).to_be_enabled()
    assert posted == [
        {"action": "accept", "content": {"who": "ana", "sure": False, "colour": "red"}}
    ]


def test_an_inbox_entry_with_a_diff_and_a_refused_approve(page, axe_source):
    p = page.page
    reason = "four-eyes: the approver must differ from the run's initiator"
    open_inbox(p, inbox_entry(may_approve=False, approve_refused=reason))
    check(p, axe_source, "approvals, a diff and a refused Approve")


# -- every action by the keyboard ----------------------------------------------------------------


def tab_to(p: Any, reached: str, limit: int = 400) -> None:
    """Press Tab until the focused element satisfies `reached` (a JS test of `node`)."""
    test = f"() => {{ const node = document.activeElement; return !!node && ({reached}); }}"
    for _ in range(limit):
        p.keyboard.press("Tab")
        if p.evaluate(test):
            return
    raise AssertionError(f"Tab never reached an element where {reached}")


def at(selector: str) -> str:
    return f"node.matches({json.dumps(selector)})"


def choose(p: Any, selector: str, value: str) -> None:
    """Tab to a <select> and step through its options with the arrow keys."""
    tab_to(p, at(selector))
    p.keyboard.press("Home")
    for _ in range(20):
        if p.input_value(selector) == value:
            return
        p.keyboard.press("ArrowDown")
    raise AssertionError(f"{selector} has no option {value}")


def run_by_keyboard(p: Any, provider: str, prompt: str) -> None:
    tab_to(p, at("nav a[data-view=playground]"))
    p.keyboard.press("Enter")
    choose(p, "#provider", provider)
    tab_to(p, at("#prompt"))
    p.keyboard.press("Control+A")
    p.keyboard.type(prompt)
    tab_to(p, at("#run-button"))
    p.keyboard.press("Enter")


def test_every_action_is_reachable_and_works_by_keyboard(page, server, seeded):
    p = page.page
    # The Playground: a run, then a step's tabs.
    run_by_keyboard(p, "demo", "Which city?")
    p.wait_for_selector("#playground-output [data-outcome=done]")
    # Tab reaches a step's chosen tab (one tab stop per tab set), the arrows the others.
    tab_to(p, "node.matches('[role=tab]') && node.textContent === 'Result'")
    p.keyboard.press("ArrowRight")
    assert p.evaluate("document.activeElement.textContent") == "Arguments"
    assert p.evaluate("document.activeElement.getAttribute('aria-selected')") == "true"
    # The Runs view: a filter, Apply, Clear, the next page, a run, its timeline's row.
    tab_to(p, at("nav a[data-view=runs]"))
    p.keyboard.press("Enter")
    expect(p.locator("#view-runs")).to_be_visible()
    listed(p)
    choose(p, "#filter-status", "failed")
    tab_to(p, at("#runs-apply"))
    p.keyboard.press("Enter")
    expect(p.locator("#runs-list tbody tr")).to_have_count(1)
    assert listed(p) == ["r2"]
    tab_to(p, at("#runs-clear"))
    p.keyboard.press("Enter")
    expect(p.locator("#runs-list tbody tr")).to_have_count(6)
    p.goto(f"{server}/#runs?limit=2")
    listed(p)
    tab_to(p, at("#runs-next"))
    p.keyboard.press("Enter")
    expect(p.locator("#runs-list tbody button").first).to_have_text("r4")
    tab_to(p, at("#runs-first"))
    p.keyboard.press("Enter")
    expect(p.locator("#runs-first")).to_have_count(0)
    tab_to(p, at("#runs-next"))
    p.keyboard.press("Enter")
    expect(p.locator("#runs-list tbody button").first).to_have_text("r4")
    tab_to(p, "node.matches('#runs-list button') && node.textContent === 'r4'")
    p.keyboard.press("Enter")
    p.wait_for_selector("#run-detail svg.timeline")
    tab_to(p, at("#run-detail .tl-row[data-sequence='3']"))
    p.keyboard.press("Enter")
    expect(p.locator("#run-detail .step.chosen .seq")).to_have_text("#3")
    # Approvals: a run waits, the inbox opens from its link, Approve; another, Deny.
    for decision in ("Approve", "Deny"):
        run_by_keyboard(p, "mail", "Mail ops")
        p.wait_for_selector("#playground-output [data-outcome=awaiting_approval]")
        tab_to(p, "node.textContent === 'Open the approvals inbox'")
        p.keyboard.press("Enter")
        p.locator(".inbox .entry").wait_for()
        tab_to(p, f"node.matches('.inbox .entry button') && node.textContent === '{decision}'")
        p.keyboard.press("Enter")
        p.wait_for_selector("text=No run is waiting for approval.")
    tab_to(p, at("#approvals-refresh"))
    p.keyboard.press("Enter")
    expect(p.locator("text=No run is waiting for approval.")).to_be_visible()

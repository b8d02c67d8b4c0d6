"""The inspector's ASGI app through Starlette's TestClient: the gate, the API and the stream."""

from __future__ import annotations

import base64
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from nrllm_core import ApprovalRefused, Finished, RunOutcome, Usage, _json
from nrllm_core._payloads import RunStep, StepKind, TraceEvent
from nrllm_core.inspector import create_app
from nrllm_core.inspector._approvals import preview_diff
from nrllm_core.inspector._guard import cookie_name

from .conftest import HOSTILE_PROGRESS

TOKEN = "test-token-123"
ORIGIN = "http://127.0.0.1:8765"
STATIC = Path(__file__).resolve().parents[2] / "nrllm_core" / "inspector" / "static"
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


@pytest.fixture
def anonymous(host):
    with TestClient(create_app(host, token=TOKEN), base_url=ORIGIN) as client:
        yield client


@pytest.fixture
def client(anonymous):
    assert anonymous.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
    return anonymous


def post(client, path, body, **headers):
    return client.post(path, json=body, headers={"Origin": ORIGIN, **headers})


def events(response):
    """Each NDJSON line, checked to be the canonical encoding of its object."""
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    lines = response.content.split(b"\n")
    assert lines[-1] == b""
    parsed = [json.loads(line) for line in lines[:-1]]
    assert [_json.dumps(p) for p in parsed] == lines[:-1]
    return parsed


def assert_secured(response):
    assert response.headers["content-security-policy"] == CSP
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["referrer-policy"] == "no-referrer"


# -- the gate ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/static/app.js", "/api/config", "/api/runs"])
def test_every_page_needs_the_token(anonymous, path):
    response = anonymous.get(path)
    assert response.status_code == 401
    assert "token" in response.text
    assert_secured(response)


def test_a_post_without_the_cookie_is_refused_before_the_origin_check(anonymous):
    assert post(anonymous, "/api/run", {"prompt": "hi"}).status_code == 401


def test_the_token_is_swapped_for_a_strict_httponly_cookie_and_a_redirect(anonymous):
    response = anonymous.get(f"/api/runs?limit=3&token={TOKEN}", follow_redirects=False)
    assert response.status_code == 303
    assert response.headers["location"] == "/api/runs?limit=3"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith(f"{cookie_name(TOKEN)}={TOKEN};")
    attributes = {part.strip().lower() for part in cookie.split(";")[1:]}
    assert attributes == {"httponly", "path=/", "samesite=strict"}
    assert_secured(response)
    assert anonymous.get("/api/runs").status_code == 200


@pytest.mark.parametrize("offered", ["wrong", TOKEN + "x", "", TOKEN[:-1]])
def test_a_wrong_token_gets_401_and_no_cookie(anonymous, offered):
    response = anonymous.get(f"/?token={offered}", follow_redirects=False)
    assert response.status_code == 401
    assert "set-cookie" not in response.headers
    assert anonymous.get("/").status_code == 401


def test_a_forged_cookie_gets_401(anonymous):
    anonymous.cookies.set(cookie_name(TOKEN), "guess")
    assert anonymous.get("/").status_code == 401


def test_each_token_names_its_own_cookie():
    names = {cookie_name(t) for t in [TOKEN, TOKEN + "x", "another-token"]}
    assert len(names) == 3
    assert all(re.fullmatch(r"nrllm_inspector_[0-9a-f]{16}", n) for n in names)
    assert TOKEN not in cookie_name(TOKEN)


def test_two_inspectors_on_one_host_name_keep_their_own_cookies(host, host_factory, tmp_path):
    # Browsers (and httpx) send a cookie to every port of a host: one client stands for both.
    folder = tmp_path / "other"
    folder.mkdir()
    other = host_factory(folder)
    apps = {
        b"127.0.0.1:8765": create_app(host, token=TOKEN),
        b"127.0.0.1:8766": create_app(other, token="other-token"),
    }

    async def by_port(scope, receive, send):
        await apps[dict(scope["headers"])[b"host"]](scope, receive, send)

    second = "http://127.0.0.1:8766"
    # Not entered as a context manager: this dispatcher serves HTTP only, no lifespan.
    client = TestClient(by_port, base_url=ORIGIN)
    try:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        swap = client.get(f"{second}/?token=other-token", follow_redirects=False)
        assert swap.status_code == 303
        assert client.get("/api/runs").status_code == 200
        assert client.get(f"{second}/api/runs").status_code == 200
    finally:
        client.close()
        other.store.close()


def test_the_token_is_not_accepted_on_a_post(client):
    response = client.post(f"/api/run?token={TOKEN}", json={"prompt": "hi"})
    assert response.status_code == 401


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Origin": "http://evil.example"},
        {"Origin": "http://127.0.0.1:9999"},
        {"Origin": "null"},
        {"Referer": "http://evil.example/page"},
    ],
)
def test_a_post_from_another_origin_gets_403(client, headers):
    response = client.post("/api/run", json={"prompt": "hi"}, headers=headers)
    assert response.status_code == 403
    assert_secured(response)
    assert client.get("/api/runs").json() == {"runs": [], "next": None, "limit": 50}


def test_a_matching_referer_stands_in_for_a_missing_origin(client):
    response = client.post(
        "/api/run", json={"prompt": "hi"}, headers={"Referer": f"{ORIGIN}/#playground"}
    )
    assert events(response)[-1]["event"] == "done"


def test_state_changing_routes_refuse_get(client):
    assert client.get("/api/run").status_code == 405
    assert client.get("/api/approvals/some-run").status_code == 405


def test_the_page_and_assets_carry_the_security_headers(client):
    page = client.get("/")
    assert page.status_code == 200
    assert_secured(page)
    assert '<script type="module" src="static/app.js"></script>' in page.text
    script = client.get("/static/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert_secured(script)


def test_create_app_refuses_an_empty_token(host):
    with pytest.raises(ValueError, match="non-empty token"):
        TestClient(create_app(host, token="")).get("/")


def test_the_app_mounts_inside_a_hosts_own_app(host):
    outer = Starlette(routes=[Mount("/inspector", app=create_app(host, token=TOKEN))])
    with TestClient(outer, base_url=ORIGIN) as client:
        assert client.get("/inspector/").status_code == 401
        swap = client.get(f"/inspector/?token={TOKEN}", follow_redirects=False)
        assert swap.headers["location"] == "/inspector/"
        attributes = {p.strip().lower() for p in swap.headers["set-cookie"].split(";")[1:]}
        assert attributes == {"httponly", "path=/inspector", "samesite=strict"}
        assert client.get("/inspector/api/config").json()["default_provider"] == "demo"
        stream = post(client, "/inspector/api/run", {"prompt": "hi"})
        assert events(stream)[-1]["final_content"] == "Oslo it is."


# -- the shipped sources -------------------------------------------------------------------------

FORBIDDEN = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\b|new\s+Function|srcdoc"
)


def test_the_shipped_javascript_never_parses_markup_or_code():
    sources = sorted(STATIC.glob("*.js"))
    assert {p.name for p in sources} >= {"app.js", "dom.js", "steps.js", "stream.js", "tabs.js"}
    offenders = {
        p.name: FORBIDDEN.findall(p.read_text(encoding="utf-8"))
        for p in sources
        if FORBIDDEN.search(p.read_text(encoding="utf-8"))
    }
    assert offenders == {}


def test_the_scan_would_catch_each_forbidden_call():
    for call in ["x.innerHTML = s", "x.outerHTML=s", "insertAdjacentHTML(", "document.write(s)"]:
        assert FORBIDDEN.search(call)
    assert FORBIDDEN.search("eval(code)")
    assert FORBIDDEN.search("new Function('return 1')")


def test_no_asset_comes_from_another_site_and_no_script_is_inline():
    page = (STATIC / "index.html").read_text(encoding="utf-8")
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == []
    assert re.findall(r"\son[a-z]+\s*=", page) == []
    for path in STATIC.iterdir():
        # An XML namespace is a name, not an address anything is fetched from: an xmlns
        # attribute, or the SVG namespace createElementNS is given (exactly that string).
        text = re.sub(r'xmlns="[^"]*"', "", path.read_text(encoding="utf-8"))
        text = text.replace('"http://www.w3.org/2000/svg"', "")
        assert re.findall(r"(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/", text) == [], path.name
        assert "@import" not in text


# -- the API -------------------------------------------------------------------------------------


def test_config_lists_providers_skills_and_tools(client):
    config = client.get("/api/config").json()
    assert config["providers"] == [
        "asking",
        "counted",
        "crafted",
        "demo",
        "empty",
        "gated",
        "hostile",
        "mail",
        "progress",
        "restarted",
        "slow",
        "streamed",
    ]
    assert config["default_provider"] == "demo"
    assert config["skills"] == ["tables"]
    assert "table_tool" in config["tools"]
    assert "send_mail" in config["tools"]
    assert config["actor"] == "operator"
    assert config["privacy_level"] == "metadata"


def test_a_run_streams_context_then_each_step_then_one_terminal(client):
    stream = events(post(client, "/api/run", {"prompt": "Where?", "provider": "demo"}))
    context, *between, terminal = stream
    # The scripted provider streams its text a word at a time, each before its step.
    assert [e for e in between if e["event"] != "step"] == [
        {"event": "text", "text": "Calling."},
        {"event": "text", "text": "Oslo "},
        {"event": "text", "text": "it "},
        {"event": "text", "text": "is."},
    ]
    steps = [e for e in between if e["event"] == "step"]
    assert context == {
        "event": "context",
        "provider": "demo",
        "zone": "local",
        "ceiling": "secretAdjacent",
        "skill": None,
        "offered": [
            "crafted_tool",
            "hostile_tool",
            "plain_tool",
            "progress_tool",
            "send_mail",
            "table_tool",
            "wait_tool",
        ],
    }
    kinds = [e["step"]["kind"] for e in steps]
    assert kinds == [
        "start",
        "gate",
        "request",
        "llm",
        "tool",
        "tool",
        "request",
        "llm",
        "finish",
    ]
    assert [e["step"]["sequence"] for e in steps] == list(range(1, 10))
    table_step, plain_step = steps[4]["step"], steps[5]["step"]
    assert table_step["tool_name"] == "table_tool"
    assert table_step["tool_artifacts"] == [
        {
            "type": "table",
            "label": "Cities",
            "data": {"columns": ["city", "people"], "rows": [["Oslo", "1000"], ["Other", "7"]]},
        }
    ]
    assert "tool_artifacts" not in plain_step
    run_id = terminal["run_id"]
    assert terminal == {
        "event": "done",
        "run_id": run_id,
        "status": "completed",
        "termination_reason": "completed",
        "final_content": "Oslo it is.",
        "truncated": False,
        "usage": Usage().to_dict(),
    }
    assert {s["step"]["run_id"] for s in steps} == {run_id}


def test_a_runs_view_names_the_level_its_steps_were_stored_at(client, tmp_path):
    kept = events(post(client, "/api/run", {"prompt": "Where?"}))[-1]["run_id"]
    # The host's configuration file (conftest.write_config), read again on change.
    config = tmp_path / "nrllm.toml"
    config.write_text(config.read_text() + '\n[privacy]\nlevel = "full"\n', encoding="utf-8")
    full = events(post(client, "/api/run", {"prompt": "Where?"}))[-1]["run_id"]
    # The configuration says "full" now; the first run's steps were kept at "metadata".
    assert client.get("/api/config").json()["privacy_level"] == "full"
    assert client.get(f"/api/runs/{kept}").json()["privacy_level"] == "metadata"
    assert client.get(f"/api/runs/{full}").json()["privacy_level"] == "full"


def test_a_skill_narrows_the_offered_tools_in_the_context(client):
    context = events(post(client, "/api/run", {"prompt": "x", "skill": "tables"}))[0]
    assert context["skill"] == "tables"
    assert context["offered"] == ["table_tool"]


def test_the_runs_page_is_the_filtered_audit_view(client):
    run_id = events(post(client, "/api/run", {"prompt": "Where?"}))[-1]["run_id"]
    runs = client.get("/api/runs").json()["runs"]
    assert [(r["run_id"], r["status"], r["steps"]) for r in runs] == [(run_id, "completed", 9)]
    detail = client.get(f"/api/runs/{run_id}").json()
    assert detail["privacy_level"] == "metadata"
    assert detail["run"]["run_id"] == run_id
    tool_step = detail["steps"][4]
    assert tool_step["sequence"] == 5
    assert tool_step["tool_name"] == "table_tool"
    # The live stream showed these; the stored copy at "metadata" keeps only their shape.
    assert "tool_result" not in tool_step
    assert "tool_artifacts" not in tool_step
    assert tool_step["tool_artifact_types"] == ["table"]
    assert client.get("/api/runs/unknown").status_code == 404


def test_a_direct_tool_call_streams_its_one_step_and_the_wire(client):
    stream = events(
        post(client, "/api/invoke", {"tool": "table_tool", "arguments": {"city": "Rome"}})
    )
    context, *steps, done = stream
    assert [e["step"]["kind"] for e in steps] == ["start", "tool", "finish"]
    step = steps[1]
    assert context["direct"] is True
    assert context["offered"] == ["table_tool"]
    assert step["step"]["tool_arguments"] == {"city": "Rome"}
    assert step["step"]["tool_artifacts"][0]["data"]["rows"][0] == ["Rome", "1000"]
    assert done["event"] == "done"
    assert done["run_id"] == step["step"]["run_id"]
    assert done["wire"]["content"] == "Rome: 2 rows"
    assert "tool_artifacts" not in done["wire"]


def test_a_direct_call_is_the_token_holders_and_needs_no_approval(client):
    # As documented: the person at the page calls, so a tool that asks for approval runs.
    stream = events(post(client, "/api/invoke", {"tool": "send_mail", "arguments": {"to": "a@b"}}))
    assert [e["event"] for e in stream] == ["context", "step", "step", "step", "done"]
    assert stream[-1]["final_content"] == "sent to a@b"
    assert client.get("/api/approvals").json() == {"approvals": [], "more": False}


def test_a_direct_call_through_a_provider_gets_that_providers_context(client):
    context = events(post(client, "/api/invoke", {"tool": "plain_tool", "provider": "mail"}))[0]
    assert context["provider"] == "mail"
    assert context["zone"] == "local"


def test_a_provider_failure_ends_with_its_readable_error(client):
    *_, terminal = events(post(client, "/api/run", {"prompt": "x", "provider": "empty"}))
    assert terminal["event"] == "error"
    assert "ran out after 0 turns" in terminal["error"]


def test_an_unexpected_exception_never_reaches_the_page(client, host, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("sk-secret-value in a traceback")

    monkeypatch.setattr(host, "stream", explode)
    with capture_logs() as logs:
        stream = events(post(client, "/api/run", {"prompt": "x"}))
    assert [e["event"] for e in stream] == ["context", "error"]
    assert "sk-secret" not in json.dumps(stream)
    assert "unexpected error" in stream[-1]["error"]
    assert [log["event"] for log in logs if log["log_level"] == "error"] == [
        "nrllm.inspector.stream_failed"
    ]


# -- the model's text as it streams ---------------------------------------------------------------


def shape(stream):
    """Each event as its name, a step as its kind, the model's text as its piece."""
    out = []
    for e in stream:
        if e["event"] == "step":
            out.append(e["step"]["kind"])
        elif e["event"] in ("text", "thinking"):
            out.append(f"{e['event']}:{e['text']}")
        else:
            out.append(e["event"])
    return out


def test_the_models_text_streams_before_its_step_and_the_outcome(client):
    stream = events(post(client, "/api/run", {"prompt": "Where?", "provider": "streamed"}))
    assert shape(stream) == [
        "context",
        "start",
        "gate",
        "request",
        "thinking:A table ",
        "thinking:helps.",
        "text:Let ",
        "text:me ",
        "text:look.",
        "llm",
        "tool",
        "request",
        "text:Oslo ",
        "text:has ",
        "text:1000.",
        "llm",
        "finish",
        "done",
    ]
    llm = [e["step"] for e in stream if e["event"] == "step" and e["step"]["kind"] == "llm"]
    assert [(s["content"], s.get("thinking")) for s in llm] == [
        ("Let me look.", "A table helps."),
        ("Oslo has 1000.", None),
    ]
    assert stream[-1]["final_content"] == "Oslo has 1000."


def test_a_text_event_holds_the_models_text_only_never_an_artifact(client):
    stream = events(post(client, "/api/run", {"prompt": "Where?", "provider": "streamed"}))
    pieces = [e for e in stream if e["event"] in ("text", "thinking")]
    assert {tuple(sorted(e)) for e in pieces} == {("event", "text")}
    # The tool's table went to the tool step; none of it is in the model's text.
    (tool_step,) = [e["step"] for e in stream if e.get("step", {}).get("kind") == "tool"]
    assert tool_step["tool_artifacts"][0]["label"] == "Cities"
    text = json.dumps(pieces)
    for shown in ("Cities", "people", "Other", "Oslo: 2 rows"):
        assert shown not in text


def test_a_restarted_stream_says_so_and_the_step_has_the_whole_answer_only(client):
    stream = events(post(client, "/api/run", {"prompt": "Again", "provider": "restarted"}))
    assert shape(stream)[4:] == [
        "text:A broken ",
        "text:answ",
        "restart",
        "text:The whole ",
        "text:answer.",
        "llm",
        "finish",
        "done",
    ]
    assert stream[-1]["final_content"] == "The whole answer."


def test_a_calls_progress_streams_before_its_step_as_plain_data(client, release):
    release.set()
    stream = events(post(client, "/api/run", {"prompt": "Go", "provider": "progress"}))
    progress = [e for e in stream if e["event"] == "progress"]
    # The NaN progress is left out, the infinite total is unknown: JSON carries neither.
    assert progress == [
        {
            "event": "progress",
            "call_id": "c0",
            "tool": "progress_tool",
            "progress": 1.0,
            "total": 2.0,
            "message": HOSTILE_PROGRESS,
        },
        {
            "event": "progress",
            "call_id": "c0",
            "tool": "progress_tool",
            "progress": 2.0,
            "total": None,
            "message": None,
        },
    ]
    assert shape(stream)[4:] == [
        "text:Calling.",
        "llm",
        "progress",
        "progress",
        "tool",
        "request",
        "text:Progressed.",
        "llm",
        "finish",
        "done",
    ]
    (tool_step,) = [e["step"] for e in stream if e.get("step", {}).get("kind") == "tool"]
    assert tool_step["tool_call_id"] == "c0"


def llm_event(sequence, content, *calls):
    fields = {"content": content, "requested_tool_calls": [{"id": c} for c in calls] or None}
    step = RunStep(kind=StepKind.LLM, round=1, duration_ms=0.0, fields=fields)
    return TraceEvent(run_id="r", sequence=sequence, step=step)


def tool_event(sequence):
    return TraceEvent(
        run_id="r", sequence=sequence, step=RunStep(kind=StepKind.TOOL, round=1, duration_ms=0.0)
    )


def outcome():
    done = RunOutcome(run_id="r", status="completed", termination_reason=None, final_content="")
    return Finished(outcome=done)


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        ("/api/run", {}, '"prompt" is required.'),
        ("/api/run", {"prompt": "   "}, '"prompt" is required.'),
        ("/api/run", {"prompt": 3}, '"prompt" must be a string.'),
        ("/api/run", {"prompt": "x", "provider": "nope"}, 'No provider named "nope"'),
        ("/api/run", {"prompt": "x", "skill": "nope"}, 'No skill named "nope"'),
        ("/api/run", {"prompt": "x", "max_rounds": 0}, '"max_rounds" must be'),
        ("/api/run", {"prompt": "x", "max_rounds": True}, '"max_rounds" must be'),
        ("/api/run", ["x"], "must be a JSON object"),
        ("/api/invoke", {"tool": "plain_tool", "arguments": [1]}, "must be a JSON object"),
        ("/api/invoke", {"arguments": {}}, '"tool" is required.'),
        ("/api/invoke", {"tool": "plain_tool", "provider": "nope"}, 'No provider named "nope"'),
        ("/api/approvals/r1", {"approve": "yes", "turn_digest": "d"}, '"approve" must be'),
        ("/api/approvals/r1", {"approve": True}, '"turn_digest" is required.'),
    ],
)
def test_bad_requests_get_400_with_a_readable_message(client, path, body, message):
    response = post(client, path, body)
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_a_body_that_is_not_json_is_refused(client):
    response = client.post(
        "/api/run", content=b"prompt=hi", headers={"Origin": ORIGIN, "Content-Type": "text/plain"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "Send the request as application/json."
    broken = client.post(
        "/api/run",
        content=b"{",
        headers={"Origin": ORIGIN, "Content-Type": "application/json"},
    )
    assert broken.json()["error"] == "The request is not valid JSON."


def test_a_body_past_the_bound_is_refused_without_being_read_whole(client):
    # Through the ASGI interface itself: the test client would buffer the whole body first.
    pieces = 0

    async def receive():
        nonlocal pieces
        pieces += 1
        # 64 MiB offered in 64 KiB pieces.
        return {"type": "http.request", "body": b" " * 65536, "more_body": pieces < 1024}

    sent = []

    async def send(message):
        sent.append(message)

    headers = [
        (b"host", b"127.0.0.1:8765"),
        (b"origin", ORIGIN.encode()),
        (b"content-type", b"application/json"),
        (b"cookie", f"{cookie_name(TOKEN)}={TOKEN}".encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/run",
        "raw_path": b"/api/run",
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "server": ("127.0.0.1", 8765),
        "client": ("127.0.0.1", 50000),
    }
    anyio.run(client.app, scope, receive, send)
    assert sent[0]["status"] == 400
    assert json.loads(b"".join(m.get("body", b"") for m in sent[1:])) == {
        "error": "The request is too large."
    }
    # It stopped just past its 1 MB bound: 16 pieces.
    assert pieces == 16


@pytest.mark.parametrize(
    "path",
    ["/%2F%2Fevil.example/", "/%2Fevil.example/", "/%5Cevil.example/", "/%2F%5Cevil.example/"],
)
def test_the_token_exchange_never_redirects_to_another_site(anonymous, path):
    response = anonymous.get(f"{path}?limit=3&token={TOKEN}", follow_redirects=False)
    assert response.status_code == 303
    location = response.headers["location"]
    # A path of this inspector: one slash, then no slash or backslash (a browser reads "//"
    # and "/\\" as the start of another site's address).
    assert location.startswith("/")
    assert location[1] not in "/\\"
    assert location.endswith("evil.example/?limit=3")


# -- approvals -----------------------------------------------------------------------------------


def suspend(client):
    stream = events(post(client, "/api/run", {"prompt": "Mail ops", "provider": "mail"}))
    terminal = stream[-1]
    assert terminal["event"] == "awaiting_approval"
    return terminal


def test_a_suspended_run_ends_its_stream_awaiting_approval(client):
    terminal = suspend(client)
    assert terminal["pending"] == [
        {
            "call_id": "c0",
            "name": "send_mail",
            "arguments": {"to": "ops@example.org"},
            "requires_approval": True,
            "preview": ["To: ops@example.org", "Subject: hello"],
            "policy_reason": None,
            "preview_failed": False,
            "preview_diff": None,
        }
    ]
    assert re.fullmatch(r"[0-9a-f]{16,}", terminal["turn_digest"])


def test_the_inbox_lists_the_suspended_run_and_approve_streams_the_rest(client):
    waiting = suspend(client)
    inbox = client.get("/api/approvals").json()["approvals"]
    assert len(inbox) == 1
    entry = inbox[0]
    assert entry["run"]["run_id"] == waiting["run_id"]
    assert entry["run"]["status"] == "awaiting_approval"
    assert entry["pending"] == waiting["pending"]
    assert entry["turn_digest"] == waiting["turn_digest"]
    # The run read nothing untrusted before its turn; the entry says so, as the page shows it.
    assert entry["untrusted"] == waiting["untrusted"] == []

    stream = events(
        post(
            client,
            f"/api/approvals/{waiting['run_id']}",
            {"approve": True, "turn_digest": waiting["turn_digest"]},
        )
    )
    assert stream[0]["event"] == "context"
    assert stream[0]["provider"] == "mail"
    steps = [e["step"] for e in stream[1:-1]]
    assert [s["kind"] for s in steps] == ["start", "approval", "tool", "request", "llm", "finish"]
    assert steps[1]["decision"] == "approved"
    assert steps[1]["approver"] == "operator"
    assert steps[2]["tool_result"] == "sent to ops@example.org"
    assert stream[-1]["event"] == "done"
    assert stream[-1]["final_content"] == "Mail sent."
    assert client.get("/api/approvals").json() == {"approvals": [], "more": False}


@pytest.mark.parametrize("nobody", [" ", "\\u200b"])
def test_an_approver_configured_as_nobody_cannot_decide(client, host, nobody):
    waiting = suspend(client)
    config = host.config.source
    text = config.read_text(encoding="utf-8").replace('id = "operator"', f'id = "{nobody}"')
    config.write_text(text, encoding="utf-8")

    stream = events(
        post(
            client,
            f"/api/approvals/{waiting['run_id']}",
            {"approve": True, "turn_digest": waiting["turn_digest"]},
        )
    )

    assert [e["event"] for e in stream] == ["error"]
    assert host.store.get_run(waiting["run_id"]).run.status == "awaiting_approval"


def test_deny_resumes_without_running_the_call(client):
    waiting = suspend(client)
    stream = events(
        post(
            client,
            f"/api/approvals/{waiting['run_id']}",
            {"approve": False, "turn_digest": waiting["turn_digest"]},
        )
    )
    steps = [e["step"] for e in stream if e["event"] == "step"]
    assert steps[1]["decision"] == "denied"
    assert all(s.get("tool_result") != "sent to ops@example.org" for s in steps)
    assert stream[-1]["event"] == "done"


def test_a_stale_digest_and_a_second_decision_end_with_readable_errors(client):
    waiting = suspend(client)
    url = f"/api/approvals/{waiting['run_id']}"
    stale = events(post(client, url, {"approve": True, "turn_digest": "0" * 64}))
    assert stale[-1] == {
        "event": "error",
        "run_id": waiting["run_id"],
        "error": "the digest does not match the pending turn; it may be stale",
    }
    assert (
        events(post(client, url, {"approve": True, "turn_digest": waiting["turn_digest"]}))[-1][
            "event"
        ]
        == "done"
    )
    again = events(post(client, url, {"approve": True, "turn_digest": waiting["turn_digest"]}))
    assert again[-1]["event"] == "error"
    assert "not awaiting approval" in again[-1]["error"]


def test_approving_an_unknown_run_is_an_error_event(client):
    stream = events(post(client, "/api/approvals/nope", {"approve": True, "turn_digest": "d"}))
    assert stream == [{"event": "error", "run_id": "nope", "error": "No run with this id."}]


def test_the_inbox_shows_a_page_of_the_newest_waiting_runs_and_says_more_wait(client, monkeypatch):
    from nrllm_core.inspector import _app

    monkeypatch.setattr(_app, "INBOX_PAGE", 2)
    waiting = [suspend(client) for _ in range(3)]
    inbox = client.get("/api/approvals").json()
    assert inbox["more"] is True
    newest = [w["run_id"] for w in waiting[:0:-1]]
    assert [e["run"]["run_id"] for e in inbox["approvals"]] == newest
    oldest = waiting[0]
    denial = {"approve": False, "turn_digest": oldest["turn_digest"]}
    events(post(client, f"/api/approvals/{oldest['run_id']}", denial))
    inbox = client.get("/api/approvals").json()
    assert (len(inbox["approvals"]), inbox["more"]) == (2, False)


def test_an_unopenable_suspension_shows_in_the_inbox_without_the_cause(
    client, host_factory, tmp_path
):
    waiting = suspend(client)
    other_key = base64.urlsafe_b64encode(b"k" * 32).decode()
    stranger = host_factory(tmp_path, environ={"NRLLM_STATE_KEY": other_key})
    with TestClient(create_app(stranger, token=TOKEN), base_url=ORIGIN) as other:
        other.get(f"/?token={TOKEN}")
        inbox = other.get("/api/approvals").json()["approvals"]
        assert inbox == [
            {
                "run": client.get("/api/approvals").json()["approvals"][0]["run"],
                "error": "the suspended state cannot be opened",
            }
        ]
        denied = events(
            post(
                other,
                f"/api/approvals/{waiting['run_id']}",
                {"approve": True, "turn_digest": waiting["turn_digest"]},
            )
        )
    assert denied[-1]["error"] == "the suspended state cannot be opened"


def test_an_inbox_entry_says_when_its_turn_expires_and_who_may_decide_it(client, host):
    waiting = suspend(client)
    before = datetime.now(UTC)
    (entry,) = client.get("/api/approvals").json()["approvals"]
    # The expiry sealed with the turn: suspended just now, open for the configured TTL.
    expires = datetime.fromisoformat(entry["expires_at"])
    ttl = timedelta(seconds=host.config.approvals.ttl_seconds)
    assert before - timedelta(minutes=1) < expires - ttl <= before
    # No four-eyes: the inspector's actor may decide the run it started.
    assert entry["may_approve"] is True
    assert entry["approve_refused"] is None
    assert entry["may_deny"] is True
    assert entry["deny_refused"] is None
    assert entry["pending"] == waiting["pending"]


def _configure(host, old: str, new: str) -> None:
    config = host.config.source
    config.write_text(config.read_text(encoding="utf-8").replace(old, new), encoding="utf-8")


@pytest.mark.parametrize(
    ("section", "skill"),
    [
        ('[providers.mail]\nkind = "scripted"\nscript = "mail.toml"\nfour_eyes = true', None),
        ('[skills.mailing]\nallowed_tools = ["send_mail"]\nfour_eyes = true', "mailing"),
    ],
)
def test_under_four_eyes_the_inbox_refuses_approve_to_the_initiator_with_the_reason(
    client, host, section, skill
):
    if skill is None:
        _configure(host, '[providers.mail]\nkind = "scripted"\nscript = "mail.toml"', section)
    else:
        _configure(host, "[defaults]", f"{section}\n\n[defaults]")
    body = {"prompt": "Mail ops", "provider": "mail", "skill": skill}
    waiting = events(post(client, "/api/run", body))[-1]
    assert waiting["event"] == "awaiting_approval"

    (entry,) = client.get("/api/approvals").json()["approvals"]
    assert entry["may_approve"] is False
    assert entry["approve_refused"] == (
        "four-eyes: the approver must differ from the run's initiator"
    )
    # Four-eyes bounds approving only: the initiator may still deny.
    assert entry["may_deny"] is True
    assert entry["deny_refused"] is None
    # The entry says what the approval itself gets: the same rule refuses it.
    url = f"/api/approvals/{waiting['run_id']}"
    refused = events(post(client, url, {"approve": True, "turn_digest": waiting["turn_digest"]}))
    assert refused[-1]["error"] == entry["approve_refused"]

    _configure(host, 'id = "operator"', 'id = "reviewer"')
    (entry,) = client.get("/api/approvals").json()["approvals"]
    assert entry["may_approve"] is True
    assert entry["approve_refused"] is None


def test_an_update_preview_is_sent_as_its_diff():
    preview = ["Update notes:7", "Before:", "id: 7", "title: old", "After:", "id: 7", "title: new"]
    assert preview_diff(preview) == {
        "heading": ["Update notes:7"],
        "lines": [
            {"change": "same", "text": "id: 7"},
            {"change": "removed", "text": "title: old"},
            {"change": "added", "text": "title: new"},
        ],
    }


@pytest.mark.parametrize(
    "preview",
    [
        ["To: ops@example.org", "Subject: hello"],
        ["After:", "x", "Before:", "y"],
        ["Before:", "only before"],
        # A cut preview holds part of the record after: its diff would invent removals.
        ["Update t:1", "Before:", *(f"c{i}: 1" for i in range(9)), "After:"]
        + [f"c{i}: 2" for i in range(8)]
        + ["… and 3 more line(s), not shown."],
    ],
)
def test_a_preview_that_is_not_a_whole_update_is_plain_lines(preview):
    assert preview_diff(preview) is None


# -- Host.pending --------------------------------------------------------------------------------


def test_host_pending_returns_the_turn_of_a_suspended_run_only(client, host):
    assert host.pending("unknown") is None
    done = events(post(client, "/api/run", {"prompt": "x"}))[-1]
    assert host.pending(done["run_id"]) is None
    waiting = suspend(client)
    pending = host.pending(waiting["run_id"])
    assert pending is not None
    assert pending.status == "awaiting_approval"
    assert pending.turn_digest == waiting["turn_digest"]
    assert [p.name for p in pending.pending] == ["send_mail"]
    assert pending.pending[0].preview == ("To: ops@example.org", "Subject: hello")


def test_host_pending_refuses_a_state_it_cannot_open(client, host_factory, tmp_path):
    waiting = suspend(client)
    other_key = base64.urlsafe_b64encode(b"z" * 32).decode()
    stranger = host_factory(tmp_path, environ={"NRLLM_STATE_KEY": other_key})
    with pytest.raises(ApprovalRefused, match=r"^the suspended state cannot be opened$"):
        stranger.pending(waiting["run_id"])

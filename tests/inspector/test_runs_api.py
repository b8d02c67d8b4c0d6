"""The runs listing's filters and pages, and a run's totals, through the inspector's API."""

from __future__ import annotations

import base64
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from nrllm_core.inspector import create_app

from .conftest import RUNS, T0, seed_runs

TOKEN = "runs-token"
ORIGIN = "http://127.0.0.1:8765"


@pytest.fixture
def client(host: Any, tmp_path: Path) -> Any:
    seed_runs(tmp_path / "data", RUNS)
    with TestClient(create_app(host, token=TOKEN), base_url=ORIGIN) as client:
        assert client.get(f"/?token={TOKEN}", follow_redirects=False).status_code == 303
        yield client


def ids(client: Any, query: str = "") -> list[str]:
    response = client.get(f"/api/runs?{query}")
    assert response.status_code == 200, response.text
    return [run["run_id"] for run in response.json()["runs"]]


def test_runs_are_listed_newest_first_ties_by_run_id(client: Any) -> None:
    assert ids(client) == ["r5", "r4", "r3", "r2", "r1"]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=failed", ["r2"]),
        ("status=completed", ["r5", "r4", "r3", "r1"]),
        ("kind=invoke", ["r3"]),
        ("kind=run", ["r5", "r4", "r2", "r1"]),
        ("provider=demo", ["r5", "r1"]),
        ("actor=ana", ["r3", "r1"]),
        ("tool=search", ["r4", "r1"]),
        ("tool=fetch", ["r4", "r3"]),
        ("tool=nothing", []),
        # A tool name is matched as a whole, not as a part of one.
        ("tool=sear", []),
        ("after=2026-03-01T10:00:00Z", ["r5", "r4", "r3", "r2"]),
        ("before=2026-03-01T10:00:00%2B00:00", ["r1"]),
        ("after=2026-03-01T11:00:00%2B01:00&before=2026-03-01T11:00:00Z", ["r2"]),
        ("actor=ana&tool=search", ["r1"]),
        ("provider=demo&status=completed&kind=run&tool=search", ["r1"]),
        # An empty value is no filter: the form sends its blank fields so.
        ("status=&provider=", ["r5", "r4", "r3", "r2", "r1"]),
    ],
)
def test_each_filter_keeps_its_runs(client: Any, query: str, expected: list[str]) -> None:
    assert ids(client, query) == expected


def test_pages_follow_one_another_to_the_last(client: Any) -> None:
    seen: list[str] = []
    query = "limit=2"
    pages = 0
    while True:
        body = client.get(f"/api/runs?{query}").json()
        assert body["limit"] == 2
        seen += [run["run_id"] for run in body["runs"]]
        pages += 1
        if body["next"] is None:
            break
        query = f"limit=2&cursor={body['next']}"
    assert (seen, pages) == (["r5", "r4", "r3", "r2", "r1"], 3)


def test_a_page_of_a_filtered_listing_continues_that_listing(client: Any) -> None:
    first = client.get("/api/runs?actor=ana&limit=1").json()
    assert [r["run_id"] for r in first["runs"]] == ["r3"]
    assert ids(client, f"actor=ana&limit=1&cursor={first['next']}") == ["r1"]
    # The last page names no next one, even when it is full.
    assert client.get(f"/api/runs?actor=ana&limit=1&cursor={first['next']}").json()["next"] is None


def test_a_cursor_under_other_filters_is_refused(client: Any) -> None:
    cursor = client.get("/api/runs?actor=ana&limit=1").json()["next"]
    response = client.get(f"/api/runs?actor=bo&limit=1&cursor={cursor}")
    assert response.status_code == 400
    assert "start from the first page" in response.json()["error"]


def tampered(cursor: str) -> str:
    encoded, _, mac = cursor.partition(".")
    body = base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
    edited = body.replace(b"r4", b"r9")
    assert edited != body
    return base64.urlsafe_b64encode(edited).decode().rstrip("=") + "." + mac


@pytest.mark.parametrize(
    "make",
    [
        tampered,
        lambda c: c[:-1] + ("0" if c[-1] != "0" else "1"),
        lambda c: c.partition(".")[0],
        lambda c: "not a cursor",
        lambda c: "",
        lambda c: "x" * 2000,
    ],
    ids=["edited-place", "edited-mac", "no-mac", "garbage", "empty-is-first-page", "too-long"],
)
def test_a_tampered_or_malformed_cursor_is_refused(client: Any, make: Any) -> None:
    cursor = client.get("/api/runs?limit=2").json()["next"]
    response = client.get("/api/runs", params={"limit": "2", "cursor": make(cursor)})
    if make(cursor) == "":
        assert response.status_code == 200
        return
    assert response.status_code == 400
    assert "first page" in response.json()["error"]


def test_a_cursor_of_another_inspector_start_is_refused(client: Any, host: Any) -> None:
    cursor = client.get("/api/runs?limit=2").json()["next"]
    with TestClient(create_app(host, token="a-new-token"), base_url=ORIGIN) as other:
        assert other.get("/?token=a-new-token", follow_redirects=False).status_code == 303
        assert other.get(f"/api/runs?limit=2&cursor={cursor}").status_code == 400


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=sleeping", 'Unknown status "sleeping": one of running'),
        ("kind=batch", 'Unknown kind "batch": one of run, invoke, mcp.'),
        ("limit=0", '"limit" must be a whole number from 1 to 200.'),
        ("limit=201", '"limit" must be a whole number from 1 to 200.'),
        ("limit=ten", '"limit" must be a whole number from 1 to 200.'),
        ("limit=-1", '"limit" must be a whole number from 1 to 200.'),
        ("limit=%C2%B2", '"limit" must be a whole number from 1 to 200.'),
        ("limit=%D9%A3", '"limit" must be a whole number from 1 to 200.'),
        ("limit=" + "9" * 5000, '"limit" must be a whole number from 1 to 200.'),
        ("after=yesterday", '"after" must be an ISO 8601 time'),
        ("before=2026-03-01T10:00:00", '"before" needs a time zone'),
        ("actor=" + "a" * 256, '"actor" is longer than 255 characters.'),
        ("status=failed&status=completed", '"status" is given more than once.'),
        ("colour=red", 'Unknown parameter "colour"'),
    ],
)
def test_a_wrong_filter_is_refused_with_a_clear_message(
    client: Any, query: str, message: str
) -> None:
    response = client.get(f"/api/runs?{query}")
    assert response.status_code == 400
    assert message in response.json()["error"]


def test_a_run_has_its_totals_from_its_steps(client: Any) -> None:
    totals = client.get("/api/runs/r4").json()["totals"]
    assert totals == {
        "wall_ms": 60_000.0,
        "model_ms": 40.0,
        "tool_ms": 15.0,
        "prompt_tokens": 10,
        "completion_tokens": 5,
        # A count the audit kept oddly ("lots") counts for nothing.
        "cached_tokens": 0,
        "reasoning_tokens": 3,
        "calls": 3,
        "errors": 1,
    }
    assert client.get("/api/runs/r1").json()["totals"]["cached_tokens"] == 60
    quiet = client.get("/api/runs/r5").json()["totals"]
    assert (quiet["calls"], quiet["model_ms"], quiet["prompt_tokens"]) == (0, 0.0, 0)


def test_a_runs_steps_say_when_they_were_recorded_for_the_waterfall(client: Any) -> None:
    steps = client.get("/api/runs/r4").json()["steps"]
    assert [step["sequence"] for step in steps] == [1, 2, 3, 4]
    # The seeded clock stands at r4's start while its steps are written: ISO 8601, in UTC.
    recorded = [datetime.fromisoformat(step["recorded_at"]) for step in steps]
    assert recorded == [T0 + timedelta(hours=3)] * 4
    assert all(step["recorded_at"].endswith("+00:00") for step in steps)


# -- the audit chain's verdict ---------------------------------------------------------------


def alter(host: Any, statement: str) -> None:
    """Change the store behind the API's back, as someone with the database could."""
    from sqlalchemy import text

    with host.store._engine.begin() as connection:
        connection.execute(text(statement))


def test_a_run_whose_steps_are_untouched_is_verified(client: Any) -> None:
    response = client.get("/api/runs/r4/verify")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-store"
    verdict = response.json()
    assert verdict["verified"] is True
    assert verdict["broken"] is None
    assert verdict["text"].startswith("Verified:")
    # No key in the environment: the chain is keyed from the database, and says what that means.
    assert verdict["key_source"] == "database"
    assert "detects accidents, not attackers" in verdict["note"]


def test_an_edited_step_breaks_the_chain_at_that_step(client: Any, host: Any) -> None:
    alter(host, "UPDATE run_steps SET payload = '{}' WHERE run_id = 'r4' AND sequence = 3")
    verdict = client.get("/api/runs/r4/verify").json()
    assert verdict["verified"] is False
    assert verdict["broken"] == {"sequence": 3, "problem": "edited"}
    assert verdict["text"] == "Broken at step 3: it was changed after it was recorded."
    # The check is per run: the others still hold.
    assert client.get("/api/runs/r1/verify").json()["verified"] is True


def test_a_deleted_step_is_named_missing(client: Any, host: Any) -> None:
    alter(host, "DELETE FROM run_steps WHERE run_id = 'r4' AND sequence = 2")
    verdict = client.get("/api/runs/r4/verify").json()
    assert verdict["broken"] == {"sequence": 2, "problem": "missing"}
    assert verdict["text"].startswith("Broken at step 2: it is missing")


def test_a_run_that_is_not_stored_is_reported_missing(client: Any) -> None:
    # As `nrllm runs verify NAME` reports a named run that is not there.
    verdict = client.get("/api/runs/nothing/verify").json()
    assert (verdict["verified"], verdict["broken"]) == (
        False,
        {"sequence": 1, "problem": "missing"},
    )


def test_the_verdict_needs_the_cookie(host: Any) -> None:
    with TestClient(create_app(host, token=TOKEN), base_url=ORIGIN) as stranger:
        assert stranger.get("/api/runs/r1/verify").status_code == 401

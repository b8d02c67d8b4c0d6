"""``nrllm mcp serve`` over HTTP with many clients at once: every call answered to its own
client, and the audit whole (each run's steps there once, in sequence, its chain intact),
on SQLite and PostgreSQL. ``benchmarks/bench_mcp_serve.py`` is the same at 50 x 20."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from nrllm_core.store import Store

from .conftest import free_port, serve_command, wait_for_port
from .test_serve import answering

CLIENTS = 10
CALLS = 5


@pytest.fixture
def loaded(
    served: dict[str, str], store_url: str | None
) -> Iterator[tuple[str, str, subprocess.Popen[str]]]:
    """The gateway over HTTP on the store ``store_url`` names: its endpoint, token, process."""
    if store_url is not None:
        config = Path(served["NRLLM_CONFIG"])
        config.write_text(config.read_text() + f"[store]\nurl = {json.dumps(store_url)}\n")
    port = free_port()
    with open(Path(served["NRLLM_HOME"]) / "serve.log", "w") as log:
        process = subprocess.Popen(
            serve_command("--transport", "http", "--port", str(port)),
            env=served,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    assert process.stdout is not None
    try:
        endpoint = process.stdout.readline().strip().removeprefix("nrllm MCP endpoint: ")
        token = process.stdout.readline().strip().removeprefix("bearer token: ")
        wait_for_port(port, process)
        yield endpoint, token, process
    finally:
        process.terminate()
        process.wait(30)
        process.stdout.close()


async def calls_at_once(url: str, token: str) -> list[tuple[str, str]]:
    """Every client's calls, all clients at once: each city asked and the answer it got.
    Every other client declares elicitation, so its answers come as SSE streams, the others'
    as JSON bodies (the tool is a read: nobody is asked)."""
    answers: list[tuple[str, str]] = []
    decline, asked = answering("decline")

    async def client(n: int) -> None:
        http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=60)
        elicitation = decline if n % 2 else None
        async with (
            http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write, elicitation_callback=elicitation) as session,
        ):
            await session.initialize()
            for m in range(CALLS):
                city = f"city-{n}-{m}"
                result = await session.call_tool("weather", {"city": city})
                assert result.is_error is False
                answers.append((city, result.content[0].text))  # type: ignore[union-attr]

    with anyio.fail_after(120):
        async with anyio.create_task_group() as group:
            for n in range(CLIENTS):
                group.start_soon(client, n)
    assert asked == []
    return answers


def test_no_audit_step_is_lost_or_duplicated_under_concurrent_clients(
    loaded: tuple[str, str, subprocess.Popen[str]], served: dict[str, str], store_url: str | None
) -> None:
    url, token, process = loaded
    answers = anyio.run(calls_at_once, url, token)
    assert sorted(answers) == sorted((c, f"Sunny in {c}.") for c, _ in answers)
    assert len({city for city, _ in answers}) == CLIENTS * CALLS
    # The audit is read as a user would after the gateway stopped (its store closed).
    process.terminate()
    assert process.wait(30) == 0

    store = Store.open(store_url, data_dir=Path(served["NRLLM_HOME"]))
    try:
        runs = store.list_runs()
        assert len(runs) == CLIENTS * CALLS
        for info in runs:
            detail = store.get_run(info.run_id)
            assert detail is not None
            assert (info.kind.value, info.status.value) == ("mcp", "completed")
            assert [s.kind for s in detail.steps] == ["start", "gate", "tool", "finish"]
            assert [s.sequence for s in detail.steps] == list(range(1, info.steps + 1))
        check = store.verify()
        assert (check.runs_checked, check.broken) == (CLIENTS * CALLS, ())
    finally:
        store.close()

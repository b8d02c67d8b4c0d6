"""``nrllm mcp serve`` under load: many MCP clients at once, and the audit they leave.

The gateway is started as a user starts it (``nrllm mcp serve --transport http --zone local``,
a temporary data folder and configuration, SQLite, or with ``--postgres`` a scratch schema on
``NRLLM_TEST_POSTGRES_URL``). ``--clients`` clients, all on one event loop in this process,
connect on ``--revision`` (2026-07-28 by default: the stateless revision the SDK's clients
speak unless told otherwise, ``ClientSession.discover()``; ``handshake``: the ``initialize``
handshake of 2025-11-25 and before, a session per client), then each makes ``--calls``
``tools/call`` of the read-only builtin ``get_system_status``, all at once. ``--client http``
(the default) sends the requests the SDK's client sends, written and read with h11 on one
keep-alive connection per client; ``--client sdk`` uses the SDK's ``ClientSession`` over
``streamable_http_client``, which spends more CPU per call than the server on the same cores.
With ``--elicitation`` the clients declare the elicitation capability, as a client that can
approve a call does: on the handshake revision the gateway then answers each request with an
SSE stream (which could carry the question) instead of a JSON body.

Printed, in wall time (the figures are what a client waits for):

- calls per second, from the first call to the last answer, and the CPU time per call of the
  server (its process, all threads, during the load; Linux's ``/proc``) and of the clients
  (this process: they share the machine's cores with the server);
- p50, p95 and p99 of one ``tools/call``, as the client sees it;
- beside it, ``Host.invoke`` of the same tool through the same gate and store in this process,
  one call at a time (before the load) and from as many threads at once as there are clients:
  the ratio p95(``tools/call``) / p95(``Host.invoke``), target at most 3 times, is taken at the
  same concurrency, so it shows what the gateway adds (HTTP, the SDK, the event loop), not the
  queueing that any 50 callers on a few cores see;
- the audit: exactly clients x calls runs of kind ``mcp``, each with its steps (start, gate,
  tool, finish), their sequence numbers contiguous from 1 (no step lost or duplicated), and
  the hash chain of every stored run verifying. A failed check exits non-zero.

    python benchmarks/bench_mcp_serve.py [--clients N] [--calls N] [--postgres]
        [--revision 2026-07-28|handshake] [--client http|sdk] [--elicitation]
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, nullcontext
from pathlib import Path
from typing import Any, Final

import anyio

TOOL: Final = "get_system_status"
ZONE: Final = "local"
STEPS: Final = ["start", "gate", "tool", "finish"]


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile: a value that was measured, not an interpolation."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered)) - 1))]


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far, user and system, all threads (Linux's ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def start_server(env: dict[str, str], port: int) -> tuple[subprocess.Popen[str], str, str]:
    """The gateway as a user starts it; its endpoint and bearer token, once it listens."""
    command = [sys.executable, "-m", "nrllm_core", "mcp", "serve", "--transport", "http"]
    process = subprocess.Popen(
        [*command, "--zone", ZONE, "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(Path(env["NRLLM_HOME"]) / "serve.log", "w"),  # noqa: SIM115 - the child's
        text=True,
    )
    assert process.stdout is not None
    url = process.stdout.readline().strip().removeprefix("nrllm MCP endpoint: ")
    token = process.stdout.readline().strip().removeprefix("bearer token: ")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = (Path(env["NRLLM_HOME"]) / "serve.log").read_text(encoding="utf-8")
            raise SystemExit(f"the server exited:\n{log}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, url, token
        time.sleep(0.05)
    raise SystemExit(f"nothing listens on port {port}")


# One ``tools/call``: whether the answer is an error, and its text.
Call = Callable[[], Awaitable[tuple[bool, str]]]
_CLIENT_INFO: Final = {"name": "bench", "version": "0"}


@asynccontextmanager
async def sdk_client(url: str, token: str, revision: str, asks: bool) -> AsyncIterator[Call]:
    """An SDK client session with the gateway, on ``revision``; declaring elicitation when it
    ``asks`` (the bench's tool is a read: nobody is asked)."""
    import httpx2
    import mcp.types as types
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def decline(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    http = httpx2.AsyncClient(headers={"authorization": f"Bearer {token}"}, timeout=120)
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, elicitation_callback=decline if asks else None) as session,
    ):
        if revision == "handshake":
            await session.initialize()
        else:
            await session.discover()

        async def call() -> tuple[bool, str]:
            result = await session.call_tool(TOOL, {})
            block = result.content[0]
            return result.is_error, getattr(block, "text", "")

        yield call


@asynccontextmanager
async def http_client(url: str, token: str, revision: str, asks: bool) -> AsyncIterator[Call]:
    """The requests the SDK's client sends for the same calls, written and read with h11 on
    one keep-alive connection: about what a client on another machine costs the gateway. The
    SDK's client spends more CPU per call than the server does, on the same cores, so with it
    the load would measure the clients' queue as much as the gateway. Elicitation is declared
    when it ``asks``."""
    import json
    from urllib.parse import urlsplit

    import h11

    parts = urlsplit(url)
    ids = itertools.count(1)
    headers = [
        ("host", parts.netloc),
        ("authorization", f"Bearer {token}"),
        ("accept", "application/json, text/event-stream"),
        ("content-type", "application/json"),
    ]
    connection = h11.Connection(h11.CLIENT)
    stream = await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80)

    async def send(message: dict[str, Any], *extra: tuple[str, str]) -> tuple[Any, h11.Response]:
        """The result the gateway answered ``message`` with (``None`` for a notification), and
        the answer's head."""
        body = json.dumps(message).encode()
        request = h11.Request(
            method="POST",
            target=parts.path,
            headers=[*headers, *extra, ("content-length", str(len(body)))],
        )
        await stream.send(
            connection.send(request)
            + connection.send(h11.Data(data=body))
            + connection.send(h11.EndOfMessage())
        )
        head: h11.Response | None = None
        chunks = []
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                connection.receive_data(await stream.receive())
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                chunks.append(event.data)
            elif isinstance(event, h11.EndOfMessage):
                break
        connection.start_next_cycle()
        assert head is not None
        if head.status_code >= 400:
            raise RuntimeError(f"the gateway answered {head.status_code}")
        if "id" not in message:
            return None, head
        text = b"".join(chunks).decode()
        if dict(head.headers).get(b"content-type", b"").startswith(b"text/event-stream"):
            # One event, the answer: its ``data:`` line.
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        answer = json.loads(text)
        if "result" not in answer:
            raise RuntimeError(f"the gateway answered an error: {answer.get('error')}")
        return answer["result"], head

    capabilities: dict[str, Any] = {"elicitation": {}} if asks else {}
    async with stream:
        params: dict[str, Any] = {"name": TOOL, "arguments": {}}
        extra: tuple[tuple[str, str], ...] = ()
        if revision == "handshake":
            initialize = {
                "protocolVersion": "2025-11-25",
                "capabilities": capabilities,
                "clientInfo": _CLIENT_INFO,
            }
            _, head = await send(
                {"jsonrpc": "2.0", "id": next(ids), "method": "initialize", "params": initialize}
            )
            session = dict(head.headers)[b"mcp-session-id"].decode()
            headers += [("mcp-session-id", session), ("mcp-protocol-version", "2025-11-25")]
            await send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        else:
            headers.append(("mcp-protocol-version", "2026-07-28"))
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": _CLIENT_INFO,
                "io.modelcontextprotocol/clientCapabilities": capabilities,
            }
            extra = (("mcp-method", "tools/call"), ("mcp-name", TOOL))

        async def call() -> tuple[bool, str]:
            body = {"jsonrpc": "2.0", "id": next(ids), "method": "tools/call", "params": params}
            result, _ = await send(body, *extra)
            return bool(result.get("isError")), str(result["content"][0].get("text", ""))

        yield call


CLIENTS: Final = {"http": http_client, "sdk": sdk_client}


async def load(
    url: str, token: str, revision: str, client: str, asks: bool, clients: int, calls: int
) -> tuple[list[float], float, int]:
    """Every client opened and initialized, then all calling at once: the latency of each
    call, the wall time from the first call to the last answer, and how many failed."""
    opened = CLIENTS[client]
    latencies: list[float] = []
    failed = 0
    ready = 0
    go = anyio.Event()
    all_ready = anyio.Event()

    async def one() -> None:
        nonlocal ready, failed
        async with opened(url, token, revision, asks) as call:
            ready += 1
            if ready == clients:
                all_ready.set()
            await go.wait()
            for _ in range(calls):
                began = time.perf_counter()
                is_error, text = await call()
                latencies.append(time.perf_counter() - began)
                if is_error or "pid: " not in text:
                    failed += 1

    # One call first, alone: the server's first call imports and builds what every later one
    # reuses, a cost of its start rather than of the load. Its run is counted in the audit.
    async with opened(url, token, revision, asks) as call:
        await call()

    began = 0.0
    with anyio.fail_after(600):
        async with anyio.create_task_group() as group:
            for _ in range(clients):
                group.start_soon(one)
            await all_ready.wait()
            began = time.perf_counter()
            go.set()
    return latencies, time.perf_counter() - began, failed


def direct(host: Any, threads: int, calls: int) -> list[float]:
    """``Host.invoke`` of the tool through the same gate, from ``threads`` threads at once."""
    from nrllm_core import TrustZone

    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def caller() -> None:
        barrier.wait()
        for _ in range(calls):
            began = time.perf_counter()
            answer = host.invoke(TOOL, {}, zone=TrustZone(ZONE))
            took = time.perf_counter() - began
            assert not answer.is_error, answer.content
            with lock:
                latencies.append(took)

    workers = [threading.Thread(target=caller) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return latencies


def check_audit(store: Any, expected: int) -> list[tuple[str, bool]]:
    """The audit the load left: every run there, each whole, and every chain intact."""
    served = [info for info in store.list_runs() if info.kind.value == "mcp"]
    whole = 0
    contiguous = 0
    for info in served:
        detail = store.get_run(info.run_id)
        sequences = [step.sequence for step in detail.steps]
        # A step lost or written twice shows as a gap, a repeat, or a count the run's own
        # header (its ``steps``, which the chain head covers) does not match.
        if sequences == list(range(1, len(sequences) + 1)) and len(sequences) == info.steps:
            contiguous += 1
        if [step.kind for step in detail.steps] == STEPS and info.status.value == "completed":
            whole += 1
    check = store.verify()
    return [
        (f"runs of kind mcp: {len(served)} (expected {expected})", len(served) == expected),
        (f"runs with start, gate, tool, finish, completed: {whole}", whole == expected),
        (f"runs with contiguous sequence numbers 1..steps: {contiguous}", contiguous == expected),
        (
            f"chains verified: {check.runs_checked} runs, {len(check.broken)} broken",
            not check.broken and check.runs_checked >= expected,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the store on PostgreSQL at $NRLLM_TEST_POSTGRES_URL, in a scratch schema",
    )
    parser.add_argument("--revision", choices=["2026-07-28", "handshake"], default="2026-07-28")
    parser.add_argument(
        "--client",
        choices=sorted(CLIENTS),
        default="http",
        help="http: the protocol's requests through h11 (default); sdk: the MCP SDK's client",
    )
    parser.add_argument(
        "--elicitation",
        action="store_true",
        help="the clients declare elicitation (up to 2025-11-25: each answer an SSE stream)",
    )
    options = parser.parse_args()
    from nrllm_core.testing import POSTGRES_ENV, postgres_schema

    if options.postgres and not os.environ.get(POSTGRES_ENV):
        raise SystemExit(f"--postgres needs {POSTGRES_ENV}")
    # The load's calls and the one warm-up call before it.
    expected = options.clients * options.calls + 1

    # The audit check counts every run in the store: the bench has a schema to itself.
    scratch = postgres_schema("nrllm_bench_serve") if options.postgres else nullcontext(None)
    with tempfile.TemporaryDirectory() as temporary, scratch as url:
        folder = Path(temporary)
        home = folder / "home"
        home.mkdir()
        config = folder / "nrllm.toml"
        lines = ['[actor]\nid = "bench"']
        if url is not None:
            lines.append(f"[store]\nurl = {url!r}")
        config.write_text("\n".join(lines) + "\n", encoding="utf-8")
        env = {
            **os.environ,
            "NRLLM_HOME": str(home),
            "NRLLM_CONFIG": str(config),
            "NRLLM_LOAD_PLUGINS": "builtin,mcp",
        }
        os.environ.update(env)
        import logging

        import structlog

        from nrllm_core import Host
        from nrllm_core.log import use_logger

        # The gate logs each decision at info; the bench's output is its figures.
        quiet = structlog.make_filtering_bound_logger(logging.WARNING)
        use_logger(structlog.wrap_logger(structlog.PrintLogger(sys.stderr), wrapper_class=quiet))

        host = Host.from_config(config)
        try:
            direct(host, 1, 20)
            alone = direct(host, 1, 200)
            crowded = direct(host, options.clients, options.calls)
        finally:
            host.store.close()

        port = free_port()
        process, endpoint, token = start_server(env, port)
        try:
            before, own = cpu_seconds(process.pid), time.process_time()
            latencies, wall, failed = anyio.run(
                load,
                endpoint,
                token,
                options.revision,
                options.client,
                options.elicitation,
                options.clients,
                options.calls,
            )
            server_cpu = cpu_seconds(process.pid) - before
            client_cpu = time.process_time() - own
        finally:
            # SIGTERM: uvicorn stops, and the command closes the store as a user's ^C would.
            process.send_signal(signal.SIGTERM)
            process.wait(60)
            assert process.stdout is not None
            process.stdout.close()

        from nrllm_core.store import Store

        store = Store.open(url, data_dir=home)
        try:
            checks = [
                (f"calls answered without error: {len(latencies) - failed}", failed == 0),
                *check_audit(store, expected),
            ]
        finally:
            store.close()

    ms = 1000
    ratio = percentile(latencies, 0.95) / percentile(crowded, 0.95)
    print(
        f"nrllm mcp serve --transport http, {'PostgreSQL' if url else 'SQLite'} store: "
        f"{options.clients} clients x {options.calls} tools/call of {TOOL} (zone {ZONE}), "
        f"revision {options.revision}, {options.client} clients"
        f"{' declaring elicitation' if options.elicitation else ''}"
    )
    print(f"calls/s: {len(latencies) / wall:.0f} ({len(latencies)} calls in {wall:.2f} s)")
    print(
        f"CPU per call: server {server_cpu / len(latencies) * ms:.2f} ms, "
        f"the {options.clients} clients {client_cpu / len(latencies) * ms:.2f} ms"
    )
    print(
        "tools/call latency: "
        + ", ".join(f"p{p} {percentile(latencies, p / 100) * ms:.1f} ms" for p in (50, 95, 99))
    )
    print(
        f"Host.invoke, {options.clients} threads at once: p50 "
        f"{percentile(crowded, 0.5) * ms:.1f} ms, p95 {percentile(crowded, 0.95) * ms:.1f} ms"
    )
    print(
        f"Host.invoke, one at a time: p50 {percentile(alone, 0.5) * ms:.2f} ms, "
        f"p95 {percentile(alone, 0.95) * ms:.2f} ms"
    )
    print(
        f"p95 tools/call / p95 Host.invoke at the same concurrency: {ratio:.2f}x "
        f"(target <= 3x: {'met' if ratio <= 3 else 'missed'})"
    )
    for text, passed in checks:
        print(f"{'ok  ' if passed else 'FAIL'} {text}")
    if not all(passed for _, passed in checks):
        sys.exit(1)


if __name__ == "__main__":
    main()

"""One HTTP client per provider: the turns of a run share one connection, which the host closes
when the run ends."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

from nrllm_core import AsyncHost, DataClass, Finished, Tool, ToolContext, ToolResult
from nrllm_core._host import Host
from nrllm_core._messages import ProviderAnswer, Usage
from nrllm_core.hookspecs import hookimpl
from nrllm_core.providers import OpenAIProvider

TURNS = 3


class Lookup(Tool):
    name = "lookup"
    description = "Find a page by its title."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text("found")


def calling(turn: int) -> dict[str, Any]:
    call = {"id": f"c{turn}", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {"id": f"r{turn}", "choices": [{"index": 0, "message": message}]}


def final(text: str) -> dict[str, Any]:
    message = {"role": "assistant", "content": text}
    return {"id": "r-final", "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


def chunks(answer: dict[str, Any]) -> list[bytes]:
    """``answer`` as an OpenAI stream: one chunk with the whole delta, then ``[DONE]``."""
    choice = answer["choices"][0]
    message = dict(choice["message"])
    if message.get("tool_calls"):
        message["tool_calls"] = [{"index": 0, **c} for c in message["tool_calls"]]
    finish = choice.get("finish_reason") or ("tool_calls" if message.get("tool_calls") else "stop")
    chunk = {"id": answer["id"], "choices": [{"index": 0, "delta": message}]}
    done = {"id": answer["id"], "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    usage = {
        "id": answer["id"],
        "choices": [],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    return [f"data: {json.dumps(c)}\n\n".encode() for c in (chunk, done, usage)] + [
        b"data: [DONE]\n\n"
    ]


def queue(server: Any, *, streamed: bool) -> None:
    answers = [*(calling(turn) for turn in range(TURNS - 1)), final("done")]
    for answer in answers:
        if streamed:
            server.stream(*chunks(answer))
        else:
            server.answer(answer)


@pytest.fixture
def make_host(tmp_path: Path, server: Any, tools_plugin: Any) -> Callable[[], Host]:
    def make() -> Host:
        section = {"kind": "openai", "model": "m", "base_url": f"{server.url}/v1"}
        return Host.from_config(
            data={
                "providers": {"model": section | {"trust_zone": "local"}},
                "defaults": {"provider": "model"},
                "actor": {"id": "alice"},
            },
            plugins=[tools_plugin(Lookup())],
            load_entry_points=False,
            data_dir=tmp_path / "home",
            environ={},
        )

    return make


def closed(server: Any) -> bool:
    """Whether every connection to ``server`` was closed (by the client) within 5 seconds."""
    deadline = time.monotonic() + 5
    while server.open and time.monotonic() < deadline:
        time.sleep(0.01)
    return server.open == 0


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_host_run_sends_its_turns_on_one_connection_and_closes_it(make_host, server, streamed):
    queue(server, streamed=streamed)
    host = make_host()
    if streamed:
        outcome = next(e for e in host.stream("go") if isinstance(e, Finished)).outcome
    else:
        outcome = host.run("go")
    host.store.close()

    assert (outcome.status, outcome.final_content) == ("completed", "done")
    assert len(server.bodies) == TURNS
    assert server.connections == 1
    assert closed(server)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_an_async_host_run_sends_its_turns_on_one_connection_and_closes_it(
    make_host, server, streamed
):
    async def run(host: AsyncHost) -> Any:
        if streamed:
            events = [e async for e in host.stream("go")]
            return events[-1].outcome
        return await host.run("go")

    host = make_host()
    # Each anyio.run is an event loop of its own: the second run may not reuse the first's.
    for _ in range(2):
        queue(server, streamed=streamed)
        outcome = anyio.run(run, AsyncHost(host))
        assert (outcome.status, outcome.final_content) == ("completed", "done")
    host.store.close()

    assert len(server.bodies) == 2 * TURNS
    assert server.connections == 2
    assert closed(server)


def test_a_provider_keeps_one_connection_until_it_is_closed(server, plain_answer):
    server.answer(plain_answer("openai"), plain_answer("openai"))
    model = OpenAIProvider.from_settings(
        "p", {"model": "m", "base_url": f"{server.url}/v1"}, environ={}
    )
    model.complete([], [])
    model.complete([], [])
    assert (server.connections, server.open) == (1, 1)

    model.close()

    assert closed(server)


class Closing:
    """A plugin's provider kind that answers at once and counts its closes, which raise."""

    def __init__(self) -> None:
        self.closed = 0

    @hookimpl
    def nrllm_register_providers(self, registry: Any) -> None:
        registry.register("closing", lambda *args, **kwargs: self)

    def complete(self, messages: Any, tools: Any) -> ProviderAnswer:
        return ProviderAnswer(content="done", tool_calls=(), usage=Usage(), finish_reason="stop")

    def close(self) -> None:
        self.closed += 1
        raise RuntimeError("sk-secret in the close")


def test_each_host_closes_the_provider_it_built_and_a_failing_close_keeps_the_outcome(
    tmp_path, tools_plugin
):
    kind = Closing()
    host = Host.from_config(
        data={
            "providers": {"model": {"kind": "closing", "trust_zone": "local"}},
            "defaults": {"provider": "model"},
            "actor": {"id": "alice"},
        },
        plugins=[tools_plugin(Lookup()), kind],
        load_entry_points=False,
        data_dir=tmp_path / "home",
        environ={},
    )
    with capture_logs() as logs:
        outcomes = [host.run("go"), anyio.run(AsyncHost(host).run, "go")]
    host.store.close()

    assert [o.error for o in outcomes] == [None, None]
    assert [(o.status, o.final_content) for o in outcomes] == [("completed", "done")] * 2
    assert kind.closed == 2
    failed = [e for e in logs if e["event"] == "nrllm.provider.close_failed"]
    assert (
        failed
        == [
            {
                "event": "nrllm.provider.close_failed",
                "error": "RuntimeError",
                "log_level": "warning",
            }
        ]
        * 2
    )


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_provider_left_open_on_an_event_loop_has_its_client_closed_when_that_loop_ends(
    server, plain_answer, backend
):
    server.answer(plain_answer("openai"), plain_answer("openai"))
    model = OpenAIProvider.from_settings(
        "p", {"model": "m", "base_url": f"{server.url}/v1"}, environ={}
    )

    # Used on one loop, never closed there, then on another: each loop's client (and its
    # connection) is closed on that loop as the loop ends.
    anyio.run(model.acomplete, [], [], backend=backend)
    assert (server.connections, closed(server)) == (1, True)
    anyio.run(model.acomplete, [], [], backend=backend)

    assert (server.connections, closed(server)) == (2, True)

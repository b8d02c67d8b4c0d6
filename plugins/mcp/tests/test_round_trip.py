"""Two hosts and a model on loopback: what reaches the provider is content, never artifacts."""

from __future__ import annotations

import base64
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import Host
from nrllm_core.store import Store

from .conftest import READ_ONLY, stdio_server
from .mcp_server import IMAGE
from .served_plugin import ARTIFACT_MARK


class Model:
    """An OpenAI-compatible endpoint on loopback: scripted answers, every request kept."""

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []
        self.requests: list[bytes] = []
        model = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                model.requests.append(body)
                data = json.dumps(model.answers.pop(0)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, tool: str, arguments: dict[str, Any]) -> None:
        call = {"id": "call_1", "type": "function", "function": {"name": tool}}
        call["function"]["arguments"] = json.dumps(arguments)
        self.answers = [
            {
                "choices": [
                    {
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                        "finish_reason": "tool_calls",
                    }
                ]
            },
            {
                "choices": [
                    {"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}
                ]
            },
        ]

    def provider(self, zone: str) -> str:
        return (
            f'[providers.llm]\nkind = "openai"\nmodel = "m"\nbase_url = "{self.url}"\n'
            f'trust_zone = "{zone}"\nmax_retries = 0\n'
        )


@pytest.fixture
def model() -> Iterator[Model]:
    served = Model()
    thread = threading.Thread(target=served.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield served
    served.server.shutdown()
    served.server.server_close()
    thread.join()


def run_prompt(home: Path) -> Any:
    host = Host.from_config(data_dir=home)
    try:
        return host.run("go", provider="llm")
    finally:
        host.store.close()


def test_an_image_result_never_reaches_the_provider(configure, state, model, home):
    configure({"demo": stdio_server(state, read_only_tools=READ_ONLY)}, model.provider("local"))
    model.script("demo__image", {})
    outcome = run_prompt(home)
    assert (outcome.status, outcome.final_content) == ("completed", "done")
    assert len(model.requests) == 2
    sent = b"".join(model.requests)
    assert b"here is the picture" in model.requests[1]
    assert base64.b64encode(IMAGE)[:64] not in sent
    assert IMAGE[:16] not in sent
    assert b"image/png" not in sent
    assert b"48 213" not in sent


def test_a_round_trip_through_two_hosts(configure, served, model, home):
    first = {
        "command": sys.executable,
        "args": ["-m", "nrllm_core", "mcp", "serve"],
        "env": {k: v for k, v in served.items() if k != "PATH"},
        "read_only_tools": ["weather"],
        "data_class": "editorContent",
    }
    configure({"first": first}, model.provider("externalGlobal"))
    model.script("first__weather", {"city": "Oslo"})
    outcome = run_prompt(home)
    assert (outcome.status, outcome.final_content) == ("completed", "done")
    tool_message = json.loads(model.requests[1])["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"] == "Sunny in Oslo."
    assert ARTIFACT_MARK.encode() not in b"".join(model.requests)
    # The first host recorded the call as one of its own runs, of kind mcp.
    store = Store.open(None, data_dir=Path(served["NRLLM_HOME"]))
    try:
        kinds = [info.kind.value for info in store.list_runs()]
    finally:
        store.close()
    assert kinds == ["mcp"]

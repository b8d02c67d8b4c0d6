"""The async host example of docs/how-to/async-hosts.md runs and streams as the page says."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from starlette.testclient import TestClient

from nrllm_core import AsyncHost, DataClass, ToolArtifact, ToolRegistry, ToolResult, hookimpl, tool

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "docs" / "examples" / "async-host" / "app.py"
PAGE = ROOT / "docs" / "how-to" / "async-hosts.md"


def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("async_host_example", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
async def lookup(city: str) -> ToolResult:
    """Look a city up."""
    return ToolResult.text(f"{city}: 3 rows", ToolArtifact.text("artifact-only-secret"))


class Tools:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(lookup)


def test_the_page_quotes_the_example_word_for_word():
    text = PAGE.read_text(encoding="utf-8")
    quoted = text.split("<!-- file: docs/examples/async-host/app.py -->\n```python\n", 1)[1]
    assert quoted.split("\n```\n", 1)[0] + "\n" == EXAMPLE.read_text(encoding="utf-8")


def test_the_example_streams_a_run_to_the_browser(nrllm):
    nrllm.load(Tools())
    name = nrllm.scripted(
        [
            {"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"city": "Oslo"}}]},
            {"content": "Oslo has 3 rows."},
        ]
    )
    nrllm.config = {"defaults": {"provider": name}}
    app = example().make_app(AsyncHost(nrllm.host))

    with TestClient(app) as client:
        response = client.post("/run", json={"prompt": "How many rows for Oslo?"})
        refused = client.post("/run", json={"prompt": " "})

    lines = [json.loads(x) for x in response.text.splitlines()]
    assert [x["event"] for x in lines] == ["call", "answer", "text", "end"]
    assert lines[2]["text"] == "Oslo has 3 rows."
    assert (lines[-1]["status"], lines[-1]["final_content"]) == ("completed", "Oslo has 3 rows.")
    assert "artifact-only-secret" not in response.text
    assert refused.status_code == 400

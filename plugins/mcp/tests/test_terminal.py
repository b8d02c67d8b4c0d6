"""What a hostile MCP server says reaches the terminal inert, through every ``nrllm mcp`` command.

The test server puts ESC sequences (clear the screen, set the window title), BEL, a C1 CSI and
a bidirectional override in its name, version and instructions, on its stderr, in a tool's
name, in descriptions and in a tool's result. Each command runs as the console script runs it
(the plugins' commands added from their entry points, the log lines on stderr), and its stdout
and stderr are searched for the raw bytes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner, Result

from nrllm_core import make_plugin_manager
from nrllm_core.cli import cli
from nrllm_core.cli._logging import configure_for_cli
from nrllm_core.log import use_logger
from nrllm_mcp._definition import visible

from .conftest import READ_ONLY, stdio_server

HOSTILE = "A\x1b[2J\x1b]0;owned\x07\x9b31m\u202eZ"
SHOWN = "A\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202eZ"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


@pytest.fixture(autouse=True)
def _logger_restored() -> Iterator[None]:
    yield
    use_logger(None)


def nrllm(*args: str) -> Result:
    """One command as ``main()`` runs it, on a copy of the group (the plugins add to it)."""
    assert cli.callback is not None
    callback = cli.callback

    def start(**params: Any) -> None:
        # As main() does, but inside the runner's streams: the log lines go to its stderr.
        configure_for_cli()
        callback(**params)

    group = type(cli)("nrllm", commands=dict(cli.commands), params=cli.params, callback=start)
    make_plugin_manager().register_commands(group)
    # As on a terminal: by default the runner has click strip the ANSI sequences it knows of
    # from all it prints, which would hide a raw one.
    return CliRunner().invoke(group, list(args), color=True)


def has_hostile(value: Any) -> bool:
    if isinstance(value, str):
        return HOSTILE in value
    if isinstance(value, dict):
        return any(has_hostile(v) for v in value.values())
    if isinstance(value, list):
        return any(has_hostile(v) for v in value)
    return False


@pytest.fixture
def hostile(configure, state):
    (state / "hostile").write_text(HOSTILE, encoding="utf-8")
    settings = {
        "read_only_tools": [*READ_ONLY, "shout"],
        "timeout_seconds": 20,
        "data_class": "publicContent",
    }
    configure({"demo": stdio_server(state, **settings)}, '[privacy]\nlevel = "full"\n')
    return state


def test_no_mcp_command_prints_a_raw_control_character(hostile):
    text: dict[str, Result] = {}
    json_out: dict[str, Result] = {}

    def both(name: str, *args: str) -> None:
        text[name] = nrllm(*args)
        json_out[name] = nrllm(*args, "--json")

    # The first listing pins every tool, the hostile one among them.
    both("tools", "tools")
    both("mcp pins", "mcp", "pins")
    both("mcp servers", "mcp", "servers")
    both("invoke", "invoke", "demo__shout")
    (hostile / "description").write_text(f"Echo {HOSTILE} back.", encoding="utf-8")
    text["mcp pins approve"] = nrllm("mcp", "pins", "approve", "demo", "--yes")
    refused = {
        "pins approve": nrllm("mcp", "pins", "approve", "demo", f"{HOSTILE}x"),
        "serve": nrllm("mcp", "serve", "--transport", "http", "--host", HOSTILE),
    }

    for name, result in [*text.items(), *json_out.items(), *refused.items()]:
        for raw in RAW:
            assert raw not in result.stdout, (name, result.stdout)
            assert raw not in result.stderr, (name, result.stderr)
    for name, result in [*text.items(), *json_out.items()]:
        assert result.exit_code == 0, (name, result.output)
    for name, result in refused.items():
        assert result.exit_code == 2, (name, result.output)
        assert SHOWN in result.stderr, (name, result.stderr)
    # The catalog offers the cleaned description under nrllm's name for the tool; every other
    # command shows the server's own text, escaped (the diff shows the definition's JSON, every
    # code point that shows as nothing written out).
    diff = visible(json.dumps(f"Echo {HOSTILE} back.", ensure_ascii=False))
    assert f'+  "description": {diff},' in text.pop("mcp pins approve").stdout
    for name, result in text.items():
        assert (SHOWN in result.stdout) is (name != "tools"), (name, result.stdout)
    for name, result in json_out.items():
        assert has_hostile(json.loads(result.stdout)) is (name != "tools"), name

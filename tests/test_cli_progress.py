"""The progress line of ``nrllm run``: a long call's progress on a terminal's standard error,
shown only after a second, as inert text, cleared when the call answers."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from structlog.testing import capture_logs

from nrllm_core import (
    DataClass,
    Tool,
    ToolContext,
    ToolResult,
    make_plugin_manager,
)
from nrllm_core._ask_values import PersonAnswer, Question
from nrllm_core._events import Finished, ToolAnswered, ToolCallStarted, ToolProgress
from nrllm_core._payloads import WirePayload
from nrllm_core.cli import _common, _progress, cli
from nrllm_core.cli._progress import ProgressLine
from nrllm_core.cli._terminal import status_line

from .conftest import ToolsPlugin

CLEAR = "\r\x1b[K"


class Slow(Tool):
    name = "slow"
    description = "Reports its progress."
    group = "content"
    data_class = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        context.report_progress(1, 2, "half\x1b[2J way")
        context.report_progress(2)
        return ToolResult.text("done")


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(
        _common,
        "plugin_manager",
        lambda **_: make_plugin_manager(plugins=[ToolsPlugin(Slow())], load_entry_points=False),
    )
    monkeypatch.setenv("NRLLM_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("NRLLM_STATE_KEY", raising=False)
    monkeypatch.delenv("NRLLM_CONFIG", raising=False)
    path = tmp_path / "nrllm.toml"
    path.write_text(
        textwrap.dedent(
            """
            [actor]
            id = "alice"
            [defaults]
            provider = "model"
            [providers.model]
            kind = "scripted"
            script = "turns.json"
            trust_zone = "local"
            """
        ),
        encoding="utf-8",
    )
    turns = [
        {"tool_calls": [{"id": "c1", "name": "slow", "arguments": {}}]},
        {"content": "all done"},
    ]
    (tmp_path / "turns.json").write_text(json.dumps({"turns": turns}), encoding="utf-8")
    return path


def nrllm(config: Path, *args: str) -> Result:
    with capture_logs():
        return CliRunner().invoke(cli, ["--config", str(config), *args])


def test_a_long_call_shows_its_progress_on_a_terminal_and_clears_it(config, monkeypatch):
    monkeypatch.setattr("nrllm_core.cli._run._stderr_terminal", lambda: True)
    # Every call counts as long: the threshold is what is under test below.
    monkeypatch.setattr(_progress, "PROGRESS_AFTER_SECONDS", 0.0)

    result = nrllm(config, "run", "hi")

    assert (result.exit_code, result.stdout) == (0, "all done\n")
    # The control sequence in the message never reaches the terminal as one.
    assert result.stderr == f"{CLEAR}slow: 1/2 half[2J way{CLEAR}slow: 2{CLEAR}"


def test_a_call_that_answers_within_the_threshold_shows_nothing(config, monkeypatch):
    monkeypatch.setattr("nrllm_core.cli._run._stderr_terminal", lambda: True)
    monkeypatch.setattr(_progress, "PROGRESS_AFTER_SECONDS", 3600.0)

    result = nrllm(config, "run", "hi")

    assert (result.exit_code, result.stdout, result.stderr) == (0, "all done\n", "")


@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["readable", "json"])
def test_off_a_terminal_there_is_no_progress_line(config, monkeypatch, flags):
    monkeypatch.setattr(_progress, "PROGRESS_AFTER_SECONDS", 0.0)

    result = nrllm(config, "run", *flags, "hi")

    assert result.exit_code == 0
    assert result.stderr == ""
    if flags:
        assert json.loads(result.stdout)["final_content"] == "all done"


def test_the_progress_line_check_is_stderr_being_a_tty(monkeypatch):
    import io

    from nrllm_core.cli._run import _stderr_terminal

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert _stderr_terminal() is False
    monkeypatch.setattr("sys.stderr", Tty())
    assert _stderr_terminal() is True


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def progress(call_id: str, progress: float, total: float | None = None, message: str | None = None):
    return ToolProgress(
        call_id=call_id, name=call_id, progress=progress, total=total, message=message
    )


def answered(call_id: str) -> ToolAnswered:
    return ToolAnswered(
        payload=WirePayload(call_id=call_id, tool_name=call_id, content="", is_error=False)
    )


def test_the_line_waits_a_second_follows_the_latest_call_and_clears_on_its_answer(capsys):
    clock = Clock()
    line = ProgressLine(clock)
    line.see(ToolCallStarted(call_id="a", name="a"))
    line.see(ToolCallStarted(call_id="b", name="b"))
    line.see(progress("a", 1, 10, "early"))
    assert capsys.readouterr().err == ""

    clock.now += 1.0
    line.see(progress("a", 2, 10, "reading"))
    line.see(progress("b", 0.5))
    assert capsys.readouterr().err == f"{CLEAR}a: 2/10 reading{CLEAR}b: 0.5"

    # Another call's answer leaves the line alone; the shown call's clears it.
    line.see(answered("a"))
    assert capsys.readouterr().err == ""
    line.see(answered("b"))
    assert capsys.readouterr().err == CLEAR
    # Progress of a call that already answered (a late notification) is not shown.
    line.see(progress("b", 1))
    assert capsys.readouterr().err == ""


def test_a_question_clears_the_line_and_holds_it(capsys):
    clock = Clock()
    line = ProgressLine(clock)
    line.see(ToolCallStarted(call_id="a", name="a"))
    clock.now += 2
    line.see(progress("a", 1))
    capsys.readouterr()

    def handler(question: Question) -> PersonAnswer:
        # While the person answers, progress of other calls is not drawn over the question.
        line.see(progress("a", 2))
        return PersonAnswer.declined()

    ask = line.asking(handler)
    question = Question(
        run_id="r", call_id="a", tool="a", message="sure?", schema={"type": "object"}
    )
    assert ask(question) == PersonAnswer.declined()
    assert capsys.readouterr().err == CLEAR
    line.see(progress("a", 3))
    assert capsys.readouterr().err == f"{CLEAR}a: 3"


def test_the_line_ends_with_the_run(capsys):
    clock = Clock()
    line = ProgressLine(clock)
    line.see(ToolCallStarted(call_id="a", name="a"))
    clock.now += 2
    line.see(progress("a", 1))
    capsys.readouterr()
    line.see(Finished(outcome=object()))  # type: ignore[arg-type]
    assert capsys.readouterr().err == CLEAR


def test_the_status_line_shows_control_characters_as_escapes_and_fits_the_width(
    capsys, monkeypatch
):
    import os

    monkeypatch.setattr("shutil.get_terminal_size", lambda: os.terminal_size((12, 24)))
    status_line("ab\x1b[2J\u202ecdefgh")
    assert capsys.readouterr().err == f"{CLEAR}ab\\x1b[2J\\u"

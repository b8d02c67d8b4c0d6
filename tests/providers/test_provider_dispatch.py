"""``acomplete``, ``stream`` and ``astream``: a provider's own methods, or the stand-ins for a
provider that lacks them; and the scripted provider streaming its text a word at a time."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from nrllm_core import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    TextDelta,
    ToolCall,
    ToolSpec,
    Usage,
)
from nrllm_core._providers import acomplete, astream, stream
from nrllm_core.providers._scripted import scripted_factory

HELLO = [ChatMessage.user("hi")]
TOOLS = [ToolSpec(name="lookup", description="Find.", parameters={})]


def answer(content: str) -> ProviderAnswer:
    return ProviderAnswer(content=content, tool_calls=(), usage=Usage(), finish_reason="stop")


class OnlyComplete:
    """A provider written before streaming: ``complete`` without even ``tool_choice``."""

    def __init__(self, content: str = "Hallo Welt") -> None:
        self.content = content
        self.calls: list[tuple[int, int]] = []

    def complete(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> Any:
        self.calls.append((len(tools), threading.get_ident()))
        return answer(self.content)


class SyncStreaming(OnlyComplete):
    """A provider that streams, but only synchronously."""

    def stream(self, messages: Any, tools: Any, *, tool_choice: str, on_delta: Any) -> Any:
        self.calls.append((len(tools), threading.get_ident()))
        for word in ("Hallo ", "Welt"):
            on_delta(TextDelta(text=word))
        return answer(f"{tool_choice}: Hallo Welt")


class Recording(list[tuple[Delta, int]]):
    """An ``on_delta`` that keeps each delta and the thread it was called on."""

    def __call__(self, delta: Delta) -> None:
        self.append((delta, threading.get_ident()))

    @property
    def deltas(self) -> list[Delta]:
        return [delta for delta, _ in self]


def test_stream_of_a_provider_without_stream_completes_and_sends_the_text_once():
    model = OnlyComplete()
    seen = Recording()

    assert stream(model, HELLO, TOOLS, on_delta=seen) == answer("Hallo Welt")
    assert seen.deltas == [TextDelta(text="Hallo Welt")]


def test_an_answer_without_text_sends_no_delta():
    seen = Recording()

    stream(OnlyComplete(""), HELLO, TOOLS, on_delta=seen)

    assert seen == []


def test_the_stand_ins_keep_the_tool_choice_rules_of_complete():
    model = OnlyComplete()

    stream(model, HELLO, TOOLS, tool_choice="none", on_delta=Recording())
    stream(model, HELLO, TOOLS, on_delta=Recording())

    # A provider that takes no tool_choice is asked for text only by being offered no tools.
    assert [tools for tools, _ in model.calls] == [0, 1]


@pytest.mark.anyio
async def test_acomplete_of_a_sync_provider_runs_it_in_a_worker_thread():
    model = OnlyComplete()

    result = await acomplete(model, HELLO, TOOLS, tool_choice="none")

    assert result == answer("Hallo Welt")
    assert [tools for tools, _ in model.calls] == [0]
    assert model.calls[0][1] != threading.get_ident()


@pytest.mark.anyio
async def test_astream_of_a_provider_without_stream_completes_in_a_thread_then_sends_the_text():
    model = OnlyComplete()
    seen = Recording()

    assert await astream(model, HELLO, TOOLS, on_delta=seen) == answer("Hallo Welt")
    assert seen == [(TextDelta(text="Hallo Welt"), threading.get_ident())]
    assert model.calls[0][1] != threading.get_ident()


@pytest.mark.anyio
async def test_astream_of_a_sync_stream_delivers_its_deltas_on_the_event_loop_thread():
    model = SyncStreaming()
    seen = Recording()

    result = await astream(model, HELLO, TOOLS, tool_choice="none", on_delta=seen)

    assert result == answer("none: Hallo Welt")
    assert seen == [
        (TextDelta(text="Hallo "), threading.get_ident()),
        (TextDelta(text="Welt"), threading.get_ident()),
    ]
    assert model.calls[0][1] != threading.get_ident()


@pytest.mark.anyio
async def test_a_provider_error_comes_through_the_worker_thread_unchanged():
    class Failing(OnlyComplete):
        def complete(self, messages: Any, tools: Any) -> Any:
            raise ProviderError('provider "f": down', status_code=503)

    with pytest.raises(ProviderError, match='provider "f": down') as caught:
        await acomplete(Failing(), HELLO, TOOLS)
    assert caught.value.status_code == 503


# -- scripted --------------------------------------------------------------------------------


@pytest.fixture
def scripted(tmp_path: Path) -> Any:
    script = tmp_path / "script.toml"
    script.write_text(
        '[[turns]]\ncontent = "  Ich suche  die Seite.\\n"\n'
        'tool_calls = [{ name = "lookup", arguments = { q = "home" } }]\n'
    )
    return scripted_factory("demo", {"script": str(script)}, config_dir=None, environ={})


def test_the_scripted_provider_streams_its_text_a_word_at_a_time(scripted):
    seen = Recording()

    result = scripted.stream(HELLO, TOOLS, on_delta=seen)

    assert seen.deltas == [
        TextDelta(text="  Ich "),
        TextDelta(text="suche  "),
        TextDelta(text="die "),
        TextDelta(text="Seite.\n"),
    ]
    assert result == scripted.complete(HELLO, TOOLS)
    assert result.tool_calls == (ToolCall(id="call_0_0", name="lookup", arguments={"q": "home"}),)


@pytest.mark.anyio
async def test_the_scripted_provider_answers_async_on_the_loop_thread(scripted):
    seen = Recording()

    streamed = await astream(scripted, HELLO, TOOLS, tool_choice="none", on_delta=seen)

    assert streamed == await acomplete(scripted, HELLO, TOOLS, tool_choice="none")
    assert streamed.tool_calls == ()
    assert "".join(d.text for d in seen.deltas if isinstance(d, TextDelta)) == streamed.content
    assert {thread for _, thread in seen} == {threading.get_ident()}

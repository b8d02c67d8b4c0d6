"""Provider kinds: building them, the scripted replay, and the HTTP adapters on loopback servers."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import pytest
from structlog.testing import capture_logs

from nrllm_core import hookimpl, make_plugin_manager
from nrllm_core._messages import ChatMessage, ProviderError, ToolCall, ToolSpec, Usage
from nrllm_core._providers import ProviderConfigError, ProviderRegistry, build_provider
from nrllm_core.providers import AnthropicProvider, OpenAIProvider, ScriptedProvider

KEY = "sk-test-PLANTEDKEY0123456789abcdef"
OTHER_KEY = "sk-proj-abcdefghijklmnopqrstuvwxyz012345"
ENV = {"TEST_LLM_KEY": KEY}
TOOL = ToolSpec(
    name="lookup",
    description="find a page",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}},
)


# -- a loopback server that answers from a queue and records every request -----------------------


@attrs.define
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = attrs.Factory(dict)
    delay: float = 0.0


@attrs.define
class Seen:
    path: str
    headers: dict[str, str]
    body: Any


class Loopback:
    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.seen: list[Seen] = []
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                body = json.loads(self.rfile.read(length))
                loopback.seen.append(
                    Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                reply = loopback.replies.pop(0)
                time.sleep(reply.delay)
                raw = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body)
                data = raw if isinstance(raw, bytes) else raw.encode()
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up waiting: that is the point of a timeout test

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, *replies: Reply) -> None:
        self.replies.extend(replies)


@pytest.fixture
def server() -> Iterator[Loopback]:
    loopback = Loopback()
    thread = threading.Thread(target=loopback.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield loopback
    loopback.server.shutdown()
    loopback.server.server_close()
    thread.join()


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def _openai(server: Loopback, sleeps: Sleeps | None = None, **settings: Any) -> OpenAIProvider:
    return OpenAIProvider.from_settings(
        "gpt",
        {
            "kind": "openai",
            "model": "gpt-test",
            "base_url": f"{server.url}/v1",
            "api_key_env": "TEST_LLM_KEY",
            **settings,
        },
        environ=ENV,
        sleep=sleeps if sleeps is not None else Sleeps(),
    )


def _anthropic(
    server: Loopback, sleeps: Sleeps | None = None, **settings: Any
) -> AnthropicProvider:
    return AnthropicProvider.from_settings(
        "claude",
        {
            "kind": "anthropic",
            "model": "claude-test",
            "base_url": server.url,
            "api_key_env": "TEST_LLM_KEY",
            **settings,
        },
        environ=ENV,
        sleep=sleeps if sleeps is not None else Sleeps(),
    )


def _openai_answer(content: str | None = "hello", tool_calls: Any = None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }


def _anthropic_answer(*blocks: dict[str, Any], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": list(blocks),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 7},
    }


HELLO = [ChatMessage.system("be brief"), ChatMessage.user("hi")]


# -- building providers --------------------------------------------------------------------------


def test_the_core_kinds_are_registered_once_and_cached():
    pm = make_plugin_manager(load_entry_points=False)
    registry = pm.provider_registry()
    assert registry.kinds == ("anthropic", "gemini", "openai", "openai-responses", "scripted")
    assert pm.provider_registry() is registry


class _EchoProvider:
    def complete(self, messages, tools):
        raise ProviderError("unused")


class _EchoPlugin:
    @hookimpl
    def nrllm_register_providers(self, registry):
        registry.register("echo", lambda name, settings, *, config_dir, environ: _EchoProvider())


class _ClashingPlugin:
    @hookimpl
    def nrllm_register_providers(self, registry):
        registry.register("openai", lambda name, settings, *, config_dir, environ: None)


class _BrokenPlugin:
    @hookimpl
    def nrllm_register_providers(self, registry):
        registry.register("half", lambda name, settings, *, config_dir, environ: None)
        raise RuntimeError("broken")


def test_registering_a_plugin_refreshes_the_kinds():
    pm = make_plugin_manager(load_entry_points=False)
    assert "echo" not in pm.provider_registry().kinds
    plugin = _EchoPlugin()
    pm.register(plugin, name="echo")
    assert "echo" in pm.provider_registry().kinds
    pm.unregister(plugin)
    assert "echo" not in pm.provider_registry().kinds


def test_a_clashing_kind_is_withheld_and_a_failing_plugin_adds_nothing():
    pm = make_plugin_manager(plugins=[_ClashingPlugin(), _BrokenPlugin()], load_entry_points=False)
    with capture_logs() as logs:
        kinds = pm.provider_registry().kinds
    assert kinds == ("anthropic", "gemini", "openai-responses", "scripted")
    events = {e["event"] for e in logs}
    assert {"nrllm.provider.kind_clash", "nrllm.plugin.registration_failed"} <= events


def test_the_registry_refuses_a_second_factory_for_a_kind():
    registry = ProviderRegistry()
    registry.register("x", lambda name, settings, *, config_dir, environ: _EchoProvider())
    with pytest.raises(ValueError, match="already registered"):
        registry.register("x", lambda name, settings, *, config_dir, environ: _EchoProvider())
    with pytest.raises(ValueError, match="non-empty"):
        registry.register("", lambda name, settings, *, config_dir, environ: _EchoProvider())


def test_build_provider_names_the_known_kinds():
    registry = make_plugin_manager(load_entry_points=False).provider_registry()
    with pytest.raises(ProviderConfigError) as info:
        build_provider(registry, "mine", {"kind": "bedrock"}, config_dir=None, environ={})
    assert str(info.value) == (
        'provider "mine" has the unknown kind "bedrock"; '
        "known kinds: anthropic, gemini, openai, openai-responses, scripted"
    )
    with pytest.raises(ProviderConfigError, match="has no kind; known kinds: anthropic"):
        build_provider(registry, "mine", {}, config_dir=None, environ={})


def test_build_provider_hides_a_factory_exception_text_and_checks_the_result():
    registry = ProviderRegistry()

    def leaky(name, settings, *, config_dir, environ):
        raise KeyError(KEY)

    registry.register("leaky", leaky)
    registry.register("empty", lambda name, settings, *, config_dir, environ: object())
    with capture_logs() as logs, pytest.raises(ProviderConfigError) as info:
        build_provider(registry, "p", {"kind": "leaky"}, config_dir=None, environ={})
    assert str(info.value) == 'provider "p" (kind "leaky") could not be built: KeyError'
    assert KEY not in repr(logs)
    with pytest.raises(ProviderConfigError, match="returned no provider"):
        build_provider(registry, "p", {"kind": "empty"}, config_dir=None, environ={})


def test_a_missing_key_variable_is_named_and_its_value_never_shown(server):
    registry = make_plugin_manager(load_entry_points=False).provider_registry()
    for kind in ("openai", "anthropic"):
        settings = {"kind": kind, "model": "m", "api_key_env": "NOT_SET_VARIABLE"}
        with pytest.raises(ProviderConfigError, match="NOT_SET_VARIABLE is not set"):
            build_provider(registry, "p", settings, config_dir=None, environ={})
    with pytest.raises(ProviderConfigError, match="ANTHROPIC_API_KEY is not set"):
        build_provider(
            registry, "p", {"kind": "anthropic", "model": "m"}, config_dir=None, environ={}
        )
    provider = build_provider(
        registry,
        "p",
        {"kind": "openai", "model": "m", "api_key_env": "TEST_LLM_KEY"},
        config_dir=None,
        environ=ENV,
    )
    assert isinstance(provider, OpenAIProvider)
    assert KEY not in repr(provider)
    assert KEY not in repr(_anthropic(server))


def test_the_http_settings_show_their_url_without_a_password_or_a_query():
    from nrllm_core.providers._http import HttpSettings

    settings = HttpSettings(
        provider="local",
        url="http://user:hunter2@127.0.0.1:11434/v1/chat/completions?key=sk-abc",
        headers={},
        secrets=(),
        timeout=1.0,
        max_retries=0,
    )
    shown = repr(settings)
    assert shown == (
        "HttpSettings(provider='local', url='http://127.0.0.1:11434/v1/chat/completions')"
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        pytest.param({"kind": "openai"}, '"model" must be', id="no-model"),
        pytest.param({"kind": "openai", "model": "m", "timeout_seconds": 0}, "timeout", id="t"),
        pytest.param({"kind": "openai", "model": "m", "max_retries": -1}, "max_retries", id="r"),
        pytest.param({"kind": "openai", "model": "m", "max_tokens": "9"}, "max_tokens", id="mt"),
        pytest.param({"kind": "scripted"}, '"script" must', id="no-script"),
    ],
)
def test_bad_settings_are_named(settings, message):
    registry = make_plugin_manager(load_entry_points=False).provider_registry()
    with pytest.raises(ProviderConfigError, match=message):
        build_provider(registry, "p", settings, config_dir=None, environ=ENV)


# -- scripted --------------------------------------------------------------------------------------

SCRIPT_TOML = """
[[turns]]
content = "Let me look."
tool_calls = [{ name = "lookup", arguments = { q = "home" } }, { name = "count" }]
usage = { prompt_tokens = 10, completion_tokens = 2 }

[[turns]]
tool_calls = [{ id = "mine", name = "lookup", arguments = { q = "about" } }]

[[turns]]
content = "Two pages."
"""


def _scripted(tmp_path: Path, text: str, filename: str = "script.toml") -> ScriptedProvider:
    (tmp_path / filename).write_text(text)
    registry = make_plugin_manager(load_entry_points=False).provider_registry()
    provider = build_provider(
        registry, "demo", {"kind": "scripted", "script": filename}, config_dir=tmp_path, environ={}
    )
    assert isinstance(provider, ScriptedProvider)
    return provider


def test_scripted_replays_toml_turns_with_generated_ids(tmp_path):
    provider = _scripted(tmp_path, SCRIPT_TOML)
    first = provider.complete(HELLO, [TOOL])
    assert first.content == "Let me look."
    assert first.tool_calls == (
        ToolCall(id="call_0_0", name="lookup", arguments={"q": "home"}),
        ToolCall(id="call_0_1", name="count", arguments={}),
    )
    assert (first.usage, first.finish_reason) == (
        Usage(prompt_tokens=10, completion_tokens=2),
        "tool_calls",
    )
    transcript = [*HELLO, ChatMessage.assistant(first.content, first.tool_calls)]
    transcript += [ChatMessage.tool_result(c.id, "ok") for c in first.tool_calls]
    second = provider.complete(transcript, [TOOL])
    assert (second.content, second.tool_calls) == (
        "",
        (ToolCall(id="mine", name="lookup", arguments={"q": "about"}),),
    )
    transcript.append(ChatMessage.assistant(second.content, second.tool_calls))
    third = provider.complete(transcript, [TOOL])
    assert (third.content, third.tool_calls, third.finish_reason) == ("Two pages.", (), "stop")
    assert third.usage == Usage()
    # Same transcript, same answer: the provider keeps no state.
    assert provider.complete(HELLO, [TOOL]) == first


def test_scripted_resumes_from_a_stored_transcript_in_a_fresh_provider(tmp_path):
    provider = _scripted(tmp_path, SCRIPT_TOML)
    first = provider.complete(HELLO, [TOOL])
    stored = json.dumps(
        [m.to_dict() for m in [*HELLO, ChatMessage.assistant(first.content, first.tool_calls)]]
    )
    # Another process: a new provider from the same file and the transcript it stored.
    again = _scripted(tmp_path, SCRIPT_TOML)
    resumed = again.complete([ChatMessage.from_dict(m) for m in json.loads(stored)], [TOOL])
    assert resumed.tool_calls[0].id == "mine"


def test_scripted_reads_json_with_the_same_shape(tmp_path):
    script = {"turns": [{"tool_calls": [{"name": "lookup"}]}, {"content": "done"}]}
    provider = _scripted(tmp_path, json.dumps(script), "script.json")
    assert provider.complete(HELLO, [TOOL]).tool_calls == (ToolCall(id="call_0_0", name="lookup"),)


def test_scripted_makes_no_calls_when_no_tools_are_offered(tmp_path):
    answer = _scripted(tmp_path, SCRIPT_TOML).complete(HELLO, [])
    assert (answer.content, answer.tool_calls, answer.finish_reason) == ("Let me look.", (), "stop")


def test_scripted_says_when_the_script_ran_out(tmp_path):
    provider = _scripted(tmp_path, '[[turns]]\ntool_calls = [{ name = "lookup" }]\n')
    first = provider.complete(HELLO, [TOOL])
    transcript = [*HELLO, ChatMessage.assistant("", first.tool_calls)]
    with pytest.raises(ProviderError) as info:
        provider.complete(transcript, [TOOL])
    assert str(info.value) == (
        'provider "demo": the script script.toml ran out after 1 turns (turn 2 was asked for)'
    )


def test_scripted_resolves_an_absolute_path_as_given(tmp_path):
    path = tmp_path / "abs.toml"
    path.write_text('[[turns]]\ncontent = "hi"\n')
    registry = make_plugin_manager(load_entry_points=False).provider_registry()
    provider = build_provider(
        registry,
        "d",
        {"kind": "scripted", "script": str(path)},
        config_dir=Path("/nowhere"),
        environ={},
    )
    assert provider.complete(HELLO, []).content == "hi"


def test_scripted_reads_its_file_again_only_when_it_changed(tmp_path):
    # A host builds its provider for every run: an unchanged script is not parsed again.
    first = _scripted(tmp_path, '[[turns]]\ncontent = "one"\n')
    again = build_provider(
        make_plugin_manager(load_entry_points=False).provider_registry(),
        "demo",
        {"kind": "scripted", "script": "script.toml"},
        config_dir=tmp_path,
        environ={},
    )
    assert isinstance(again, ScriptedProvider)
    assert again._turns is first._turns
    changed = _scripted(tmp_path, '[[turns]]\ncontent = "two, now"\n')
    assert changed.complete(HELLO, []).content == "two, now"
    with pytest.raises(ProviderConfigError, match="not valid JSON or TOML"):
        _scripted(tmp_path, "turns = [")
    (tmp_path / "script.toml").unlink()
    with pytest.raises(ProviderConfigError, match="cannot be read"):
        ScriptedProvider.load("demo", tmp_path / "script.toml")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("turns = [", "not valid JSON or TOML", id="syntax"),
        pytest.param("x = " + "[" * 5000 + "]" * 5000, "not valid JSON or TOML", id="too-deep"),
        pytest.param('turns = "x"', 'needs a list "turns"', id="turns-not-list"),
        pytest.param("[[turns]]\n", 'turn 1: needs "content"', id="empty-turn"),
        pytest.param("[[turns]]\ncontent = 3\n", '"content" must be a string', id="content"),
        pytest.param('[[turns]]\ncontent = ""\nextra = 1\n', "turn 1: must be a table", id="key"),
        pytest.param(
            "[[turns]]\ntool_calls = [{ arguments = {} }]\n", "call 1 needs a name", id="no-name"
        ),
        pytest.param(
            '[[turns]]\ntool_calls = [{ name = "f", arguments = { at = 1979-05-27 } }]\n',
            "no JSON form",
            id="date",
        ),
        pytest.param(
            '[[turns]]\ncontent = ""\nusage = { prompt_tokens = -1 }\n', "non-negative", id="usage"
        ),
    ],
)
def test_a_bad_script_fails_when_the_provider_is_built(tmp_path, text, message):
    with pytest.raises(ProviderConfigError, match=message):
        _scripted(tmp_path, text)


def test_a_missing_script_is_a_config_error(tmp_path):
    registry = make_plugin_manager(load_entry_points=False).provider_registry()
    with pytest.raises(ProviderConfigError, match="cannot be read"):
        build_provider(
            registry,
            "d",
            {"kind": "scripted", "script": "gone.toml"},
            config_dir=tmp_path,
            environ={},
        )


# -- openai ----------------------------------------------------------------------------------------


def test_openai_plain_answer_sends_no_tools_key(server):
    server.answer(Reply(body=_openai_answer("hello")))
    answer = _openai(server).complete(HELLO, [])
    assert answer.content == "hello"
    assert answer.usage == Usage(prompt_tokens=12, completion_tokens=5)
    assert (answer.tool_calls, answer.finish_reason) == ((), "stop")
    [seen] = server.seen
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {KEY}"
    assert seen.body == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
    }


def test_openai_tool_calls_round_trip_with_the_models_own_arguments(server):
    server.answer(
        Reply(
            body=_openai_answer(
                None,
                [
                    {
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "home"}'},
                    },
                    {
                        "id": "call_d",
                        "type": "function",
                        "function": {"name": "now", "arguments": "{oops"},
                    },
                ],
            )
        ),
        Reply(body=_openai_answer("Found it.")),
    )
    provider = _openai(server)
    first = provider.complete(HELLO, [TOOL])
    assert first.content == ""
    assert first.tool_calls == (
        ToolCall(id="call_a", name="lookup", arguments={"q": "home"}),
        # Malformed arguments are {} for the seam, which refuses them, and the model's own
        # string for the history.
        ToolCall(
            id="call_d", name="now", arguments={}, arguments_valid=False, raw_arguments="{oops"
        ),
    )
    transcript = [
        *HELLO,
        ChatMessage.assistant(first.content, first.tool_calls),
        ChatMessage.tool_result("call_a", "Home page"),
        ChatMessage.tool_result("call_d", "12:00"),
    ]
    assert provider.complete(transcript, [TOOL]).content == "Found it."
    sent = server.seen[1].body
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "description": "find a page",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ]
    assert sent["messages"][2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": '{"q":"home"}'},
                },
                {
                    "id": "call_d",
                    "type": "function",
                    "function": {"name": "now", "arguments": "{oops"},
                },
            ],
        },
        {"role": "tool", "content": "Home page", "tool_call_id": "call_a"},
        {"role": "tool", "content": "12:00", "tool_call_id": "call_d"},
    ]


def test_openai_retries_a_429_after_the_servers_retry_after(server):
    sleeps = Sleeps()
    server.answer(
        Reply(status=429, body={"error": {"message": "slow down"}}, headers={"retry-after": "2"}),
        Reply(
            status=429, body={"error": {"message": "slow down"}}, headers={"retry-after": "9999"}
        ),
        Reply(body=_openai_answer("finally")),
    )
    with capture_logs() as logs:
        answer = _openai(server, sleeps).complete(HELLO, [])
    assert answer.content == "finally"
    assert sleeps == [2.0, 30.0]
    assert len(server.seen) == 3
    assert [e["status"] for e in logs if e["event"] == "nrllm.provider.retry"] == [429, 429]


def test_openai_gives_up_after_bounded_retries_on_500(server):
    sleeps = Sleeps()
    server.answer(*[Reply(status=500, body={"error": "internal"})] * 3)
    with pytest.raises(ProviderError) as info:
        _openai(server, sleeps).complete(HELLO, [])
    assert str(info.value) == ('provider "gpt": HTTP 500: {"error": "internal"} (after 3 attempts)')
    assert info.value.status_code == 500
    assert sleeps == [0.5, 1.0]
    assert len(server.seen) == 3


def test_openai_does_not_retry_other_client_errors(server):
    sleeps = Sleeps()
    server.answer(Reply(status=400, body={"error": {"message": "bad model"}}))
    with pytest.raises(ProviderError, match=r'^provider "gpt": HTTP 400: .*bad model') as info:
        _openai(server, sleeps).complete(HELLO, [])
    assert info.value.status_code == 400
    assert (sleeps, len(server.seen)) == ([], 1)


def test_openai_times_out_and_retries(server):
    sleeps = Sleeps()
    server.answer(Reply(body=_openai_answer(), delay=1.0), Reply(body=_openai_answer(), delay=1.0))
    provider = _openai(server, sleeps, timeout_seconds=0.05, max_retries=1)
    with pytest.raises(ProviderError) as info:
        provider.complete(HELLO, [])
    assert str(info.value) == 'provider "gpt": timed out after 0.05 s (after 2 attempts)'
    assert info.value.status_code is None
    assert sleeps == [0.5]


def test_openai_error_bodies_are_redacted_and_the_key_is_never_shown(server, caplog):
    caplog.set_level(logging.DEBUG)
    leaky = {"error": {"message": f"Incorrect API key provided: {KEY}; also {OTHER_KEY}"}}
    server.answer(Reply(status=401, body=leaky), *[Reply(status=503, body=leaky)] * 3)
    provider = _openai(server)
    with capture_logs() as logs:
        with pytest.raises(ProviderError) as unauthorised:
            provider.complete(HELLO, [])
        with pytest.raises(ProviderError) as unavailable:
            provider.complete(HELLO, [])
    for error in (unauthorised.value, unavailable.value):
        assert "Incorrect API key provided: ***" in str(error)
        assert KEY not in str(error)
        assert OTHER_KEY not in str(error)
        assert "also sk-***" in str(error)
    assert logs
    assert KEY not in repr(logs)
    assert KEY not in caplog.text


SLASHED_KEY = KEY[:5] + "/" + KEY[5:]


@pytest.mark.parametrize(
    ("key", "spelled"),
    [
        (KEY, "\\u0073" + KEY[1:]),
        (KEY, KEY[:3] + "\\u0074" + KEY[4:]),
        (KEY, "".join(f"\\u{ord(c):04x}" for c in KEY)),
        (SLASHED_KEY, SLASHED_KEY.replace("/", "\\/")),
    ],
    ids=["first-escaped", "one-escaped", "all-escaped", "escaped-slash"],
)
def test_a_key_echoed_json_escaped_is_masked_too(server, key, spelled):
    body = ('{"error": {"message": "Incorrect API key provided: ' + spelled + '"}}').encode()
    server.answer(Reply(status=401, body=body))
    provider = OpenAIProvider.from_settings(
        "gpt",
        {
            "kind": "openai",
            "model": "gpt-test",
            "base_url": f"{server.url}/v1",
            "api_key_env": "TEST_LLM_KEY",
        },
        environ={"TEST_LLM_KEY": key},
        sleep=Sleeps(),
    )
    with pytest.raises(ProviderError) as refused:
        provider.complete(HELLO, [])
    assert "Incorrect API key provided: ***" in str(refused.value)
    assert key not in str(refused.value)


def test_a_body_that_does_not_decode_fails_as_a_broken_answer(server):
    garbled = Reply(body=b"not gzip at all", headers={"content-encoding": "gzip"})
    server.answer(*[garbled] * 3)
    sleeps = Sleeps()
    with pytest.raises(ProviderError, match="does not decode"):
        _openai(server, sleeps).complete(HELLO, [])
    # Asked again as a broken answer is, within the retries.
    assert len(server.seen) == 3


def test_an_error_excerpt_is_short_and_one_line(server):
    server.answer(Reply(status=404, body=b"not\n\nfound " + b"x " * 3000 + OTHER_KEY.encode()))
    with pytest.raises(ProviderError) as info:
        _openai(server).complete(HELLO, [])
    message = str(info.value)
    assert message.startswith('provider "gpt": HTTP 404: not found x x x')
    assert message.endswith("…")
    assert "\n" not in message
    assert len(message) < 400


@pytest.mark.parametrize(
    ("body", "message"),
    [
        pytest.param(b"{not json", "malformed JSON", id="not-json"),
        pytest.param({"choices": []}, "without a message", id="no-choices"),
        pytest.param({"error": "x"}, 'answered with an error: "x"', id="error-object"),
        pytest.param([1, 2], "without a message", id="list"),
    ],
)
def test_openai_malformed_answers_fail(server, body, message):
    sleeps = Sleeps()
    server.answer(Reply(body=body))
    with pytest.raises(ProviderError, match=message):
        _openai(server, sleeps).complete(HELLO, [])
    assert sleeps == []


def test_openai_without_a_key_sends_no_authorization(server):
    server.answer(Reply(body=_openai_answer("local")))
    provider = OpenAIProvider.from_settings(
        "ollama", {"model": "llama", "base_url": server.url, "temperature": 0}, environ={}
    )
    assert provider.complete(HELLO, []).content == "local"
    [seen] = server.seen
    assert "authorization" not in seen.headers
    assert seen.body["temperature"] == 0


def test_openai_reads_reasoning_and_ignores_bad_usage(server):
    answer = _openai_answer("ok")
    answer["choices"][0]["message"]["reasoning_content"] = "because"
    answer["usage"] = {"prompt_tokens": "many", "completion_tokens": -3}
    server.answer(Reply(body=answer))
    result = _openai(server).complete(HELLO, [])
    assert (result.thinking, result.usage) == ("because", Usage())


# -- anthropic -------------------------------------------------------------------------------------


def test_anthropic_plain_answer(server):
    server.answer(Reply(body=_anthropic_answer({"type": "text", "text": "hello"})))
    answer = _anthropic(server).complete(HELLO, [])
    assert (answer.content, answer.tool_calls, answer.finish_reason) == ("hello", (), "end_turn")
    assert answer.usage == Usage(prompt_tokens=20, completion_tokens=7)
    [seen] = server.seen
    assert seen.path == "/v1/messages"
    assert seen.headers["x-api-key"] == KEY
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in seen.headers
    assert seen.body == {
        "model": "claude-test",
        "max_tokens": 4096,
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_anthropic_tool_use_round_trip(server):
    server.answer(
        Reply(
            body=_anthropic_answer(
                {"type": "thinking", "thinking": "need data", "signature": "s"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "home"}},
                {"type": "tool_use", "id": "toolu_3", "name": "now", "input": "oops"},
                stop="tool_use",
            )
        ),
        Reply(body=_anthropic_answer({"type": "text", "text": "Done."})),
    )
    provider = _anthropic(server, max_tokens=512)
    first = provider.complete(HELLO, [TOOL])
    assert (first.content, first.thinking, first.finish_reason) == (
        "Looking.",
        "need data",
        "tool_use",
    )
    assert first.tool_calls == (
        ToolCall(id="toolu_1", name="lookup", arguments={"q": "home"}),
        ToolCall(
            id="toolu_3", name="now", arguments={}, arguments_valid=False, raw_arguments="oops"
        ),
    )
    transcript = [
        *HELLO,
        ChatMessage.assistant(first.content, first.tool_calls),
        ChatMessage.tool_result("toolu_1", "Home page"),
        ChatMessage.tool_result("toolu_3", "12:00"),
        ChatMessage.user("and?"),
    ]
    assert provider.complete(transcript, [TOOL]).content == "Done."
    sent = server.seen[1].body
    assert sent["max_tokens"] == 512
    assert sent["tools"] == [
        {
            "name": "lookup",
            "description": "find a page",
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]
    assert sent["messages"] == [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "home"}},
                {"type": "tool_use", "id": "toolu_3", "name": "now", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Home page"},
                {"type": "tool_result", "tool_use_id": "toolu_3", "content": "12:00"},
                # A user message after the results joins them: the roles alternate.
                {"type": "text", "text": "and?"},
            ],
        },
    ]


def test_anthropic_retries_overloaded_then_succeeds(server):
    sleeps = Sleeps()
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.answer(
        Reply(status=529, body=overloaded),
        Reply(body=_anthropic_answer({"type": "text", "text": "ok"})),
    )
    assert _anthropic(server, sleeps).complete(HELLO, []).content == "ok"
    assert sleeps == [0.5]


def test_anthropic_errors_are_redacted(server, caplog):
    caplog.set_level(logging.DEBUG)
    body = {"type": "error", "error": {"type": "authentication_error", "message": f"bad key {KEY}"}}
    server.answer(Reply(status=401, body=body))
    with capture_logs() as logs, pytest.raises(ProviderError) as info:
        _anthropic(server).complete(HELLO, [])
    assert "authentication_error" in str(info.value)
    assert KEY not in str(info.value)
    assert KEY not in repr(logs)
    assert KEY not in caplog.text


def test_anthropic_malformed_answer_fails(server):
    server.answer(Reply(body={"type": "message", "content": "text"}))
    with pytest.raises(ProviderError, match="without content blocks"):
        _anthropic(server).complete(HELLO, [])


def test_a_token_cut_by_the_read_window_is_dropped_whole(server):
    server.answer(Reply(status=502, body=b" " * 4090 + b"PARTIALTOKEN0123456789"))
    with pytest.raises(ProviderError) as info:
        _openai(server, max_retries=0).complete(HELLO, [])
    assert str(info.value) == 'provider "gpt": HTTP 502: (empty body) (after 1 attempt)'


# -- a kind's own checks -------------------------------------------------------------------------


def _mode_check(name, settings, *, config_dir):
    mode = settings.get("params", {}).get("mode")
    if mode not in (None, "fast", "slow"):
        yield "params.mode", f"must be fast or slow, not {mode!r}"
    if settings.get("max_tokens") == 7:
        yield "", "seven is refused for the whole section"


class _CheckedPlugin:
    @hookimpl
    def nrllm_register_providers(self, registry):
        registry.register(
            "checked",
            lambda name, settings, *, config_dir, environ: _EchoProvider(),
            check=_mode_check,
        )


class _RaisingCheckPlugin:
    @hookimpl
    def nrllm_register_providers(self, registry):
        def check(name, settings, *, config_dir):
            raise RuntimeError(f"secret {settings['params']}")

        registry.register(
            "raising", lambda name, settings, *, config_dir, environ: _EchoProvider(), check=check
        )


def _section(kind: str, **more: Any) -> dict[str, Any]:
    return {"providers": {"p": {"kind": kind, **more}}}


def test_a_kind_from_a_plugin_checks_its_sections_at_every_load():
    from nrllm_core import ConfigError, load_config

    pm = make_plugin_manager(plugins=[_CheckedPlugin()], load_entry_points=False)
    kinds = pm.provider_registry().registered
    assert load_config(data=_section("checked", params={"mode": "fast"}), provider_kinds=kinds)

    with pytest.raises(ConfigError) as refused:
        load_config(
            data=_section("checked", params={"mode": "warp"}, max_tokens=7), provider_kinds=kinds
        )

    assert str(refused.value) == (
        "providers.p.params.mode: must be fast or slow, not 'warp'; "
        "providers.p: seven is refused for the whole section"
    )


def test_a_kinds_check_that_raises_refuses_the_section_without_its_text():
    from nrllm_core import ConfigError, load_config

    pm = make_plugin_manager(plugins=[_RaisingCheckPlugin()], load_entry_points=False)
    with capture_logs() as logs, pytest.raises(ConfigError) as refused:
        load_config(
            data=_section("raising", params={"k": "hunter2"}),
            provider_kinds=pm.provider_registry().registered,
        )

    assert str(refused.value) == 'providers.p: the check of kind "raising" failed (RuntimeError)'
    assert "hunter2" not in repr(logs)


def test_the_anthropic_check_is_the_kinds_own_and_applies_without_installed_kinds():
    from nrllm_core import ConfigError, load_config

    registry = make_plugin_manager(load_entry_points=False).provider_registry()
    assert registry.kind("anthropic").check is not None
    assert registry.kind("openai").check is not None
    section = _section("anthropic", max_completion_tokens=10)
    for kinds in (None, registry.registered, registry.kinds):
        with pytest.raises(ConfigError, match="max_completion_tokens: is OpenAI's"):
            load_config(data=section, provider_kinds=kinds)


def test_the_registry_refuses_a_check_that_is_not_callable():
    registry = ProviderRegistry()
    with pytest.raises(TypeError, match="check for provider kind 'x' is not callable"):
        registry.register(
            "x", lambda name, settings, *, config_dir, environ: _EchoProvider(), check="no"
        )
    with pytest.raises(TypeError, match="endpoint of provider kind 'x' is not callable"):
        registry.register(
            "x", lambda name, settings, *, config_dir, environ: _EchoProvider(), endpoint="no"
        )


def test_core_kinds_register_the_endpoints_config_check_prints():
    from nrllm_core.providers._kinds import register_core_kinds

    registry = ProviderRegistry()
    register_core_kinds(registry)
    with_endpoint = {name for name, kind in registry.registered.items() if kind.endpoint}
    assert with_endpoint == {"openai", "openai-responses", "gemini"}


# -- a kind's own settings ---------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class _ModeSettings:
    mode: str = "fast"
    region: str = "eu-west-1"


class _ModePlugin:
    def __init__(self) -> None:
        self.given: list[Any] = []

    @hookimpl
    def nrllm_register_providers(self, registry):
        def build(name, settings, *, config_dir, environ):
            self.given.append(settings["options"])
            return _EchoProvider()

        registry.register("moded", build, settings=_ModeSettings)


def test_a_kind_from_a_plugin_takes_settings_of_its_own_typed():
    from nrllm_core import load_config

    plugin = _ModePlugin()
    pm = make_plugin_manager(plugins=[plugin], load_entry_points=False)
    kinds = pm.provider_registry().registered
    config = load_config(data=_section("moded", mode="slow"), provider_kinds=kinds)

    assert config.providers["p"].options == _ModeSettings(mode="slow")
    build_provider(
        pm.provider_registry(), "p", config.providers["p"].section(), config_dir=None, environ={}
    )
    assert plugin.given == [_ModeSettings(mode="slow")]
    # A kind without settings of its own has none.
    assert (
        load_config(data=_section("anthropic"), provider_kinds=kinds).providers["p"].options is None
    )


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"speed": 1}, "providers.p.speed: unknown key"),
        ({"mode": 5}, "providers.p.mode: expected a string, got an integer"),
        ({"options": {"mode": "x"}}, "providers.p.options: unknown key"),
    ],
)
def test_a_kinds_settings_are_checked_and_unknown_keys_still_refused(section, message):
    from nrllm_core import ConfigError, load_config

    pm = make_plugin_manager(plugins=[_ModePlugin()], load_entry_points=False)
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(
            data=_section("moded", **section), provider_kinds=pm.provider_registry().registered
        )
    # Without the kind installed, its keys are unknown.
    with pytest.raises(ConfigError, match=r"providers\.p\.mode: unknown key"):
        load_config(data=_section("openai", mode="slow"))


def test_a_kinds_check_gets_its_settings_as_the_factory_does():
    from nrllm_core import ConfigError, ProviderRegistry, load_config

    seen: list[Any] = []

    def check(name, settings, *, config_dir):
        seen.append(settings["options"])
        if settings["options"].mode == "slow":
            yield "mode", "too slow"

    registry = ProviderRegistry()
    registry.register("moded", lambda *a, **k: _EchoProvider(), check=check, settings=_ModeSettings)
    load_config(data=_section("moded", mode="fast"), provider_kinds=registry.registered)
    with pytest.raises(ConfigError, match=r"providers\.p\.mode: too slow"):
        load_config(data=_section("moded", mode="slow"), provider_kinds=registry.registered)

    assert seen == [_ModeSettings(mode="fast"), _ModeSettings(mode="slow")]


def test_a_kinds_settings_may_not_rename_cores_keys():
    from nrllm_core import ConfigError, ProviderRegistry, load_config

    @attrs.frozen
    class Clashing:
        model: str = "x"

    registry = ProviderRegistry()
    registry.register("clash", lambda *a, **k: _EchoProvider(), settings=Clashing)
    with pytest.raises(ConfigError, match="name keys core has already \\(model\\)"):
        load_config(data=_section("clash"), provider_kinds=registry.registered)
    with pytest.raises(TypeError, match="not an attrs class"):
        registry.register("plain", lambda *a, **k: _EchoProvider(), settings=dict)

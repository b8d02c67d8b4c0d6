"""Provider fidelity fixtures: a loopback model server, the official SDKs' request types as
oracles (unknown keys forbidden, strict), and the semantic checks a request must pass."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

import attrs
import pytest
from jsonschema.validators import validator_for
from pydantic import BaseModel, ConfigDict, TypeAdapter
from typing_extensions import TypedDict, is_typeddict


@attrs.define
class Stream:
    """A streamed answer: ``chunks`` written and flushed one by one; ``cut`` breaks the
    connection after them."""

    chunks: list[bytes]
    cut: bool = False


@attrs.define
class Reply:
    body: Any
    status: int = 200
    headers: dict[str, str] = attrs.Factory(dict)


class Loopback:
    """Answers each POST with the next queued reply and keeps every request body; speaks
    HTTP/1.1, so a client may send several requests on one connection, and counts the
    connections it accepted and those still open."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.bodies: list[Any] = []
        self.raw: list[bytes] = []
        # Each request's target (path and query) and its headers, names lowercased.
        self.targets: list[str] = []
        self.headers: list[dict[str, str]] = []
        self.connections = 0
        self.open = 0
        loopback = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with lock:
                    loopback.connections += 1
                    loopback.open += 1

            def finish(self) -> None:
                super().finish()
                with lock:
                    loopback.open -= 1

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                loopback.raw.append(raw)
                loopback.targets.append(self.path)
                loopback.headers.append({k.lower(): v for k, v in self.headers.items()})
                loopback.bodies.append(json.loads(raw))
                reply = loopback.replies.pop(0)
                if isinstance(reply.body, Stream):
                    self._stream(reply.status, reply.body)
                    return
                body = reply.body
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, status: int, stream: Stream) -> None:
                total = sum(len(chunk) for chunk in stream.chunks)
                self.send_response(status)
                self.send_header("content-type", "text/event-stream")
                # A cut stream promises more than it sends: the client sees the connection break.
                self.send_header("content-length", str(total + 1 if stream.cut else total))
                self.end_headers()
                for chunk in stream.chunks:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                if stream.cut:
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(
        self, *bodies: Any, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        """Queue answers: SDK models' ``model_dump_json()`` text, or JSON data."""
        self.replies.extend(Reply(body, status, headers or {}) for body in bodies)

    def stream(self, *chunks: bytes, cut: bool = False) -> None:
        """Queue a ``text/event-stream`` answer of ``chunks``, broken after them if ``cut``."""
        self.replies.append(Reply(Stream(list(chunks), cut)))


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
    """An injected sleep: records each wait, never waits."""

    def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def _plain_answer(kind: str, content: str = "ok") -> str:
    """A final answer of ``kind`` built with the SDK's response model, as the server sends it."""
    if kind == "openai":
        from openai.types.chat import ChatCompletion, ChatCompletionMessage
        from openai.types.chat.chat_completion import Choice

        message = ChatCompletionMessage(role="assistant", content=content)
        return ChatCompletion(
            id="chatcmpl-1",
            object="chat.completion",
            created=1,
            model="m",
            choices=[Choice(index=0, finish_reason="stop", message=message)],
        ).model_dump_json()
    from anthropic import types as at

    return at.Message(
        id="msg_1",
        type="message",
        role="assistant",
        model="m",
        content=[at.TextBlock(type="text", text=content)],
        stop_reason="end_turn",
        usage=at.Usage(input_tokens=1, output_tokens=1),
    ).model_dump_json()


@pytest.fixture(scope="session")
def plain_answer() -> Callable[..., str]:
    return _plain_answer


# -- the SDK oracles ---------------------------------------------------------------------------

_STRICT = ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=True)


def _request_type(hint: Any, done: dict[int, tuple[Any, Any]]) -> Any:
    """``hint`` as a strict request type: every TypedDict reachable from it strict and
    extra-forbidding, and the SDK's response models dropped from its unions (``None`` for a
    hint that admits nothing else).

    ``TypeAdapter(T, config=...)`` is refused for a TypedDict, and a TypedDict's own config
    does not reach the TypedDicts nested in it, so each one gets its own. The client also takes
    the SDK's response models (``ContentBlock``) in a message's content, dumping them; lax
    pydantic models that keep extra keys, they would let any block of their type through. So a
    TypedDict that holds one is rebuilt without it; what holds none is kept as it is.
    """
    if id(hint) in done:
        # ``done`` keeps each hint alive, so no other object takes its id; a recursive
        # reference, met before its TypedDict is rebuilt, keeps the SDK's own.
        return done[id(hint)][1]
    done[id(hint)] = (hint, hint)
    result = hint
    origin = get_origin(hint)
    if is_typeddict(hint):
        fields = get_type_hints(hint, include_extras=True)
        strict = {name: _request_type(inner, done) for name, inner in fields.items()}
        if strict != fields:
            result = TypedDict(hint.__name__, strict)
            # Which keys are required also comes from base classes of other totality.
            result.__required_keys__ = hint.__required_keys__
            result.__optional_keys__ = hint.__optional_keys__
        result.__pydantic_config__ = _STRICT
    elif isinstance(hint, type) and issubclass(hint, BaseModel):
        result = None
    elif origin is Annotated:
        base = _request_type(hint.__origin__, done)
        if base is not hint.__origin__:
            result = None if base is None else hint.copy_with((base,))
    elif origin is not Literal:
        args = get_args(hint)
        strict_args = tuple(_request_type(arg, done) for arg in args)
        if strict_args != args and (origin is Union or origin is UnionType):
            kept = tuple(arg for arg in strict_args if arg is not None)
            result = Union[kept] if kept else None  # noqa: UP007 - built from a tuple
        elif strict_args != args:
            result = hint.copy_with(strict_args)
    done[id(hint)] = (hint, result)
    return result


def _drain(value: Any) -> None:
    # pydantic validates an Iterable lazily: consuming it is what checks its items.
    if isinstance(value, dict):
        for item in value.values():
            _drain(item)
    elif isinstance(value, list | tuple) or type(value).__name__ == "ValidatorIterator":
        for item in value:
            _drain(item)


def _oracle(params: Any) -> Callable[[Any], None]:
    adapter = TypeAdapter(_request_type(params, {}))

    def validate(body: Any) -> None:
        _drain(adapter.validate_python(body))

    return validate


@pytest.fixture(scope="session")
def openai_oracle() -> Callable[[Any], None]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming

    return _oracle(CompletionCreateParamsNonStreaming)


@pytest.fixture(scope="session")
def anthropic_oracle() -> Callable[[Any], None]:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    return _oracle(MessageCreateParamsNonStreaming)


@pytest.fixture(scope="session")
def openai_stream_oracle() -> Callable[[Any], None]:
    from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming

    return _oracle(CompletionCreateParamsStreaming)


@pytest.fixture(scope="session")
def anthropic_stream_oracle() -> Callable[[Any], None]:
    from anthropic.types.message_create_params import MessageCreateParamsStreaming

    return _oracle(MessageCreateParamsStreaming)


# -- the semantic checks -----------------------------------------------------------------------


def _check_schema(schema: Any) -> None:
    validator_for(schema).check_schema(schema)


def openai_semantics(body: dict[str, Any]) -> None:
    """Every call answered, in order, right after its turn; ids linked; sides alternating; no
    empty content; every tool schema a valid JSON Schema."""
    for tool in body.get("tools", []):
        _check_schema(tool["function"]["parameters"])
    messages = body["messages"]
    roles = [m["role"] for m in messages]
    assert "system" not in roles[1:], "a system message only comes first"
    turns = [m for m in messages if m["role"] != "system"]
    assert turns[0]["role"] == "user"
    index = 0
    previous_side = None
    while index < len(turns):
        message = turns[index]
        side = "assistant" if message["role"] == "assistant" else "user"
        assert side != previous_side, f"two {side} turns in a row at {index}"
        previous_side = side
        if message["role"] == "assistant":
            calls = message.get("tool_calls") or []
            assert message.get("content") or calls, "an empty assistant turn"
            answers = turns[index + 1 : index + 1 + len(calls)]
            assert [a["role"] for a in answers] == ["tool"] * len(calls), "a call unanswered"
            assert [a["tool_call_id"] for a in answers] == [c["id"] for c in calls]
            assert all(a["content"] for a in answers), "an empty tool result"
            index += 1 + len(calls)
            previous_side = "user" if calls else "assistant"
            continue
        assert message["role"] == "user", f"a {message['role']} message without its call"
        assert isinstance(message["content"], str)
        assert message["content"].strip(), "an empty user message"
        index += 1
    for message in messages:
        if message["role"] == "system":
            assert message["content"].strip()


def anthropic_semantics(body: dict[str, Any]) -> None:
    """The same checks in the Messages API's shape: strictly alternating roles, each turn's
    ``tool_use`` blocks answered by the next user message's leading ``tool_result`` blocks."""
    for tool in body.get("tools", []):
        _check_schema(tool["input_schema"])
    if "system" in body:
        assert body["system"].strip()
    messages = body["messages"]
    assert messages[0]["role"] == "user"
    for index, message in enumerate(messages):
        if index:
            assert message["role"] != messages[index - 1]["role"], f"same role twice at {index}"
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        assert blocks, "an empty message"
        for block in blocks:
            if block["type"] == "text":
                assert block["text"].strip(), "an empty text block"
            if block["type"] == "tool_result":
                assert block["content"], "an empty tool result"
        uses = [b["id"] for b in blocks if b["type"] == "tool_use"]
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if message["role"] == "user" and results:
            assert index > 0, "a result before any call"
            before = messages[index - 1]["content"]
            called = [b["id"] for b in before if b["type"] == "tool_use"]
            assert results == called, "results not in the order of their calls"
            assert [b["type"] for b in blocks[: len(results)]] == ["tool_result"] * len(results)
        if uses:
            assert index + 1 < len(messages), "a call unanswered"
            following = messages[index + 1]["content"]
            assert [b.get("tool_use_id") for b in following[: len(uses)]] == uses


@pytest.fixture(scope="session")
def semantics() -> dict[str, Callable[[dict[str, Any]], None]]:
    return {"openai": openai_semantics, "anthropic": anthropic_semantics}


@pytest.fixture(scope="session")
def responses_oracle() -> Callable[[Any], None]:
    from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

    return _oracle(ResponseCreateParamsNonStreaming)


@pytest.fixture(scope="session")
def responses_stream_oracle() -> Callable[[Any], None]:
    from openai.types.responses.response_create_params import ResponseCreateParamsStreaming

    return _oracle(ResponseCreateParamsStreaming)

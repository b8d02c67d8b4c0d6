"""A loopback Bedrock: answers queued as JSON or as AWS event-stream frames (encoded here, per
the format's spec, and decoded by the client with botocore), and botocore's own service model
and parsers as the oracles the adapter's requests and answers are held against."""

from __future__ import annotations

import base64
import binascii
import json
import struct
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs
import pytest
from botocore.credentials import Credentials


@attrs.define
class Reply:
    body: bytes
    status: int = 200
    headers: dict[str, str] = attrs.Factory(dict)
    content_type: str = "application/json"
    # Break the connection after the body, having promised one more byte.
    cut: bool = False


class Loopback:
    """Answers each POST with the next queued reply; keeps each request's path, headers
    (names lowercased) and body."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.bodies: list[Any] = []
        self.raw: list[bytes] = []
        self.targets: list[str] = []
        self.headers: list[dict[str, str]] = []
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length", "0")))
                loopback.raw.append(raw)
                loopback.targets.append(self.path)
                loopback.headers.append({k.lower(): v for k, v in self.headers.items()})
                loopback.bodies.append(json.loads(raw))
                reply = loopback.replies.pop(0)
                self.send_response(reply.status)
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", reply.content_type)
                self.send_header("content-length", str(len(reply.body) + reply.cut))
                self.end_headers()
                self.wfile.write(reply.body)
                self.wfile.flush()
                if reply.cut:
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(
        self, *bodies: Any, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        """Queue JSON answers."""
        for body in bodies:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            self.replies.append(Reply(data, status, headers or {}))

    def stream(self, *frames: bytes, cut: bool = False) -> None:
        """Queue an ``application/vnd.amazon.eventstream`` answer of ``frames``."""
        self.replies.append(
            Reply(b"".join(frames), content_type="application/vnd.amazon.eventstream", cut=cut)
        )


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


CREDENTIALS = Credentials("AKID", "SECRET-ACCESS-KEY", "SESSION-TOKEN")


@pytest.fixture
def credentials() -> Credentials:
    return CREDENTIALS


# -- the event-stream format -------------------------------------------------------------------


def frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One message of the AWS event-stream format: a prelude (total and headers length, and
    their CRC32), string headers (type 7), the payload, and the CRC32 of all before it."""
    encoded = b"".join(
        struct.pack("!B", len(name))
        + name.encode()
        + struct.pack("!BH", 7, len(value.encode()))
        + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack("!II", total, len(encoded))
    prelude += struct.pack("!I", binascii.crc32(prelude))
    message = prelude + encoded + payload
    return message + struct.pack("!I", binascii.crc32(message))


def event(kind: str, data: dict[str, Any]) -> bytes:
    """A ConverseStream event, with the padding field ``p`` Bedrock adds to each."""
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    return frame(headers, json.dumps({**data, "p": "abcdefgh"}).encode())


def exception(kind: str, message: str) -> bytes:
    headers = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return frame(headers, json.dumps({"message": message}).encode())


def stream_of(answer: dict[str, Any], *, pieces: int = 3) -> list[bytes]:
    """The ConverseStream events that say what the whole ``answer`` says: text, tool input and
    reasoning cut into ``pieces`` deltas each."""

    def cut(text: str) -> list[str]:
        size = max(1, -(-len(text) // pieces))
        return [text[i : i + size] for i in range(0, len(text), size)] or [""]

    message = answer["output"]["message"]
    frames = [event("messageStart", {"role": message["role"]})]
    for index, block in enumerate(message["content"]):
        at = {"contentBlockIndex": index}
        if "text" in block:
            deltas = [{"text": piece} for piece in cut(block["text"])]
        elif "toolUse" in block:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            frames.append(event("contentBlockStart", {**at, "start": start}))
            deltas = [{"toolUse": {"input": p}} for p in cut(json.dumps(use["input"]))]
        else:
            reasoning = block["reasoningContent"]
            if "redactedContent" in reasoning:
                deltas = [{"reasoningContent": {"redactedContent": reasoning["redactedContent"]}}]
            else:
                text = reasoning["reasoningText"]
                deltas = [{"reasoningContent": {"text": piece}} for piece in cut(text["text"])]
                deltas.append({"reasoningContent": {"signature": text["signature"]}})
        frames.extend(event("contentBlockDelta", {**at, "delta": d}) for d in deltas)
        frames.append(event("contentBlockStop", at))
    frames.append(event("messageStop", {"stopReason": answer["stopReason"]}))
    frames.append(event("metadata", {"usage": answer["usage"], "metrics": {"latencyMs": 12}}))
    return frames


REDACTED = base64.b64encode(b"\x00opaque reasoning\xff").decode()


@pytest.fixture
def wire() -> Any:
    """The helpers above, for the tests (which cannot import a conftest by name)."""
    import types

    return types.SimpleNamespace(
        frame=frame,
        event=event,
        exception=exception,
        stream_of=stream_of,
        redacted=REDACTED,
    )


# -- botocore as the oracle --------------------------------------------------------------------


def _service() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("bedrock-runtime")


def validate_request(model: str, body: dict[str, Any]) -> None:
    """Raise unless ``body`` is a Converse request botocore's model takes: every field known,
    every type right, every required field there. Blobs go to the validator as the bytes
    botocore's callers pass (the wire carries them as base64)."""
    from botocore.validate import ParamValidator

    params = _blobs_decoded({"modelId": model, **body})
    shape = _service().operation_model("Converse").input_shape
    report = ParamValidator().validate(params, shape)
    if report.has_errors():
        raise AssertionError(report.generate_report())


def _blobs_decoded(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: base64.b64decode(v) if k == "redactedContent" else _blobs_decoded(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_blobs_decoded(v) for v in value]
    return value


def parse_whole(body: bytes) -> dict[str, Any]:
    """Converse's answer as botocore parses it (rest-json, its output shape)."""
    from botocore.parsers import create_parser

    shape = _service().operation_model("Converse").output_shape
    parsed: dict[str, Any] = create_parser("rest-json").parse(
        {"status_code": 200, "headers": {}, "body": body}, shape
    )
    parsed.pop("ResponseMetadata", None)
    return parsed


def parse_stream(frames: bytes) -> list[dict[str, Any]]:
    """ConverseStream's events as botocore's ``EventStream`` parses them; an exception event
    raises as it does for boto3's callers."""
    from botocore.eventstream import EventStream
    from botocore.parsers import EventStreamJSONParser

    shape = _service().operation_model("ConverseStream").output_shape.members["stream"]

    class Raw:
        def stream(self) -> Iterator[bytes]:
            yield frames

    return list(EventStream(Raw(), shape, EventStreamJSONParser(), "ConverseStream"))


@pytest.fixture
def oracle() -> Any:
    import types

    return types.SimpleNamespace(
        validate=validate_request, parse_whole=parse_whole, parse_stream=parse_stream
    )


@pytest.fixture
def make_provider(server: Loopback, sleeps: Sleeps, credentials: Credentials) -> Callable[..., Any]:
    """A ``bedrock`` provider on the loopback server, signing with the test credentials."""
    from nrllm_bedrock import BedrockProvider, BedrockSettings

    def make(
        *, environ: dict[str, str] | None = None, options: Any = None, **section: Any
    ) -> BedrockProvider:
        settings = {
            "kind": "bedrock",
            "model": "anthropic.claude-sonnet-4-v1:0",
            "base_url": server.url,
            "options": options or BedrockSettings(region="us-east-1"),
            **section,
        }
        return BedrockProvider.from_settings(
            "br", settings, environ=environ or {}, credentials=credentials, sleep=sleeps
        )

    return make

"""Time to the first streamed text: from the loopback server's first byte of the answer's body
to the first ``TextDelta`` a streaming call hands its ``on_delta``.

The server sends the headers, waits until the client is surely waiting for the body, notes the
time and writes the first event; the client notes the time its first ``TextDelta`` arrives. One
process, one clock. Prints the median of each way over ``RUNS`` calls next to the target.
"""

from __future__ import annotations

import binascii
import json
import statistics
import struct
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

import anyio

from nrllm_core import ChatMessage, Delta, TextDelta
from nrllm_core._providers import astream, stream
from nrllm_core.providers import (
    AnthropicProvider,
    GeminiProvider,
    OpenAIProvider,
    ResponsesProvider,
)

RUNS: Final = 200
TARGET_MS: Final = 1.0
# Long enough for the client to have read the headers and to be blocked reading the body.
HEADERS_HEAD_START_SECONDS: Final = 0.005
HELLO: Final = [ChatMessage.user("hi")]

OPENAI_EVENTS: Final = [
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"Hallo"}}]}\n\n',
    b'data: {"id":"c","choices":[{"index":0,"delta":{"content":" Welt"},'
    b'"finish_reason":"stop"}]}\n\n',
    b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}\n\n',
    b"data: [DONE]\n\n",
]
ANTHROPIC_EVENTS: Final = [
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","content":[],'
    b'"usage":{"input_tokens":1,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"Hallo"}}\n\n',
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":2}}\n\n',
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
]
RESPONSES_EVENTS: Final = [
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"Hallo","sequence_number":1}'
    b"\n\n",
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":2,'
    b'"response":{"id":"resp_1","object":"response","created_at":0,"model":"m",'
    b'"status":"completed","output":[{"type":"message","id":"msg_1","role":"assistant",'
    b'"status":"completed","content":[{"type":"output_text","text":"Hallo","annotations":[]}]}],'
    b'"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}}\n\n',
]
GEMINI_EVENTS: Final = [
    b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":"Hallo"}]},"index":0}]}\n\n',
    b'data: {"candidates":[{"content":{"role":"model","parts":[{"text":" Welt"}]},'
    b'"finishReason":"STOP","index":0}],'
    b'"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":2}}\n\n',
]


def frame(kind: str, data: dict[str, Any]) -> bytes:
    """One ConverseStream event in the AWS event-stream framing: prelude, string headers,
    payload, each part checked by CRC32."""
    headers = {":event-type": kind, ":content-type": "application/json", ":message-type": "event"}
    encoded = b"".join(
        struct.pack("!B", len(k)) + k.encode() + struct.pack("!BH", 7, len(v)) + v.encode()
        for k, v in headers.items()
    )
    payload = json.dumps(data).encode()
    prelude = struct.pack("!II", 16 + len(encoded) + len(payload), len(encoded))
    message = prelude + struct.pack("!I", binascii.crc32(prelude)) + encoded + payload
    return message + struct.pack("!I", binascii.crc32(message))


BEDROCK_EVENTS: Final = [
    frame("messageStart", {"role": "assistant"}),
    frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "Hallo"}}),
    frame("contentBlockStop", {"contentBlockIndex": 0}),
    frame("messageStop", {"stopReason": "end_turn"}),
    frame("metadata", {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}}),
]


class Loopback:
    """Streams ``events`` to every POST, noting when the first body byte is written."""

    def __init__(self, events: list[bytes]) -> None:
        self.first_byte: list[float] = []
        self.content_type = (
            "application/vnd.amazon.eventstream"
            if events is BEDROCK_EVENTS
            else "text/event-stream"
        )
        loopback = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                self.send_response(200)
                self.send_header("content-type", loopback.content_type)
                self.send_header("content-length", str(sum(map(len, events))))
                self.end_headers()
                self.wfile.flush()
                time.sleep(HEADERS_HEAD_START_SECONDS)
                loopback.first_byte.append(time.perf_counter())
                for event in events:
                    self.wfile.write(event)
                    self.wfile.flush()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()


class FirstText:
    """An ``on_delta`` noting when the first ``TextDelta`` arrived."""

    def __init__(self) -> None:
        self.at: float | None = None

    def __call__(self, delta: Delta) -> None:
        if self.at is None and isinstance(delta, TextDelta):
            self.at = time.perf_counter()


def make(kind: str) -> tuple[Any, Loopback]:
    server = Loopback(EVENTS[kind])
    settings = {"model": "m", "base_url": server.url, "api_key_env": "K"}
    environ = {"K": "bench-key"}
    if kind == "openai":
        model: Any = OpenAIProvider.from_settings(
            "bench", {**settings, "base_url": f"{server.url}/v1"}, environ=environ
        )
    elif kind == "openai-responses":
        model = ResponsesProvider.from_settings("bench", settings, environ=environ)
    elif kind == "gemini":
        model = GeminiProvider.from_settings("bench", settings, environ=environ)
    elif kind == "bedrock":
        from nrllm_bedrock import BedrockProvider

        model = BedrockProvider.from_settings("bench", settings, environ=environ)
    else:
        model = AnthropicProvider.from_settings("bench", settings, environ=environ)
    return model, server


EVENTS: Final = {
    "openai": OPENAI_EVENTS,
    "openai-responses": RESPONSES_EVENTS,
    "anthropic": ANTHROPIC_EVENTS,
    "gemini": GEMINI_EVENTS,
    "bedrock": BEDROCK_EVENTS,
}


def latencies(kind: str, call: Callable[[Any, FirstText], None]) -> list[float]:
    model, server = make(kind)
    figures = []
    try:
        for _ in range(RUNS):
            first = FirstText()
            call(model, first)
            assert first.at is not None
            figures.append((first.at - server.first_byte[-1]) * 1000)
    finally:
        server.server.shutdown()
        server.server.server_close()
    return figures


def sync_stream(model: Any, first: FirstText) -> None:
    stream(model, HELLO, [], on_delta=first)


def async_stream(model: Any, first: FirstText) -> None:
    async def call() -> None:
        await astream(model, HELLO, [], on_delta=first)

    anyio.run(call)


def main() -> None:
    print(f"time to the first TextDelta after the server's first body byte, median of {RUNS}")
    for kind in EVENTS:
        for way, call in (("stream", sync_stream), ("astream", async_stream)):
            figures = sorted(latencies(kind, call))
            median = statistics.median(figures)
            p90 = figures[int(len(figures) * 0.9)]
            verdict = "ok" if median <= TARGET_MS else "ABOVE TARGET"
            print(
                f"  {kind:16} {way:8} median {median:6.3f} ms  p90 {p90:6.3f} ms  "
                f"(target <= {TARGET_MS:g} ms: {verdict})"
            )


if __name__ == "__main__":
    main()

"""ConverseStream's answer: AWS event-stream frames cut by botocore's decoder, then assembled
into the answer Converse sends whole."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Any, Final, final

from nrllm_core import Delta, TextDelta, ThinkingDelta
from nrllm_core.providers.http import StreamBroken, StreamFailed

__all__ = ["BLOCK_SEPARATOR", "EventFrames", "Events"]

# Between the text of two blocks, in the whole answer and in the deltas a viewer sees.
BLOCK_SEPARATOR: Final = "\n\n"

# One decoded frame: its headers (``:message-type``, ``:event-type``, ...) and its payload.
Frame = tuple[Mapping[str, Any], bytes]


@final
class EventFrames:
    """The ``application/vnd.amazon.eventstream`` framing (prelude, headers, payload, each
    checked against its CRC32), decoded by botocore's ``EventStreamBuffer``. A frame that
    fails its checks breaks the stream."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        from botocore.eventstream import EventStreamBuffer

        self._buffer = EventStreamBuffer()

    def feed(self, chunk: bytes) -> list[Frame]:
        from botocore.eventstream import ParserError

        self._buffer.add_data(chunk)
        try:
            return [(message.headers, message.payload) for message in self._buffer]
        except ParserError:
            raise StreamBroken("a malformed event-stream frame") from None

    def close(self) -> list[Frame]:
        # A frame the body did not finish is never an event.
        return []


@final
class Events:
    """A ConverseStream answer, assembled into Converse's: each content block built from its
    start and deltas (text, tool input JSON, reasoning text, its signature, redacted reasoning),
    then the stop reason of ``messageStop`` and the usage of ``metadata``, the final event.

    The viewer sees each block's text as it comes, and ``BLOCK_SEPARATOR`` before the text of
    a block that follows another one of its kind, so that the deltas join as the answer does."""

    __slots__ = (
        "_blocks",
        "_inputs",
        "_message",
        "_on_delta",
        "_pieces",
        "_role",
        "_shown",
        "_stopped",
    )

    def __init__(self, on_delta: Callable[[Delta], None]) -> None:
        self._on_delta = on_delta
        self._role: str | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, list[str]] = {}
        # Each block's text, reasoning, signature and redacted reasoning in pieces, joined
        # once in ``answer``: appending to a string copies it, which made a long stream cost
        # its length squared.
        self._pieces: dict[tuple[int, str], list[Any]] = {}
        self._message: dict[str, Any] = {}
        self._stopped = False
        # The block whose text each kind of delta showed last.
        self._shown: dict[type[TextDelta] | type[ThinkingDelta], int] = {}

    def feed(self, event: Frame) -> bool:
        headers, payload = event
        kind = headers.get(":message-type")
        if kind == "error":
            raise StreamFailed(
                {"message": headers.get(":error-message"), "code": headers.get(":error-code")}
            )
        data = _object(payload)
        if kind == "exception":
            raise StreamFailed(
                {"message": data.get("message"), "code": headers.get(":exception-type")}
            )
        name = headers.get(":event-type")
        if kind != "event" or not isinstance(name, str):
            raise StreamBroken("a frame that is no event")
        if name == "messageStart":
            role = data.get("role")
            if self._role is not None or not isinstance(role, str):
                raise StreamBroken("a malformed messageStart")
            self._role = role
            return False
        if name == "metadata":
            if not self._stopped:
                raise StreamBroken("metadata before messageStop")
            self._message.update({k: data[k] for k in ("usage", "metrics", "trace") if k in data})
            return True
        if name == "messageStop":
            self._started()
            self._stopped = True
            self._message.update(
                {
                    k: v
                    for k, v in data.items()
                    if k in ("stopReason", "additionalModelResponseFields")
                }
            )
        elif name in _BLOCK_EVENTS:
            self._block_event(name, data)
        # Event types newer than this adapter carry nothing the answer needs.
        return False

    def _started(self) -> str:
        if self._role is None:
            raise StreamBroken("an event before messageStart")
        return self._role

    def _block_event(self, name: str, data: dict[str, Any]) -> None:
        self._started()
        index = data.get("contentBlockIndex")
        if type(index) is not int or index < 0:
            raise StreamBroken(f"a {name} without a block index")
        if name == "contentBlockStart":
            start = data.get("start")
            tool = start.get("toolUse") if isinstance(start, dict) else None
            if index in self._blocks or not isinstance(tool, dict):
                raise StreamBroken("a malformed contentBlockStart")
            self._blocks[index] = {"toolUse": {**tool, "input": {}}}
            self._inputs[index] = []
        elif name == "contentBlockStop":
            parts = self._inputs.pop(index, None)
            block = self._blocks.get(index)
            if block is not None and "toolUse" in block and parts:
                raw = "".join(parts)
                try:
                    block["toolUse"]["input"] = _json_loads(raw)
                except ValueError:
                    # ToolCall.parse marks a call whose input is no JSON object invalid.
                    block["toolUse"]["input"] = raw
        else:
            delta = data.get("delta")
            if not isinstance(delta, dict) or len(delta) != 1:
                raise StreamBroken("a contentBlockDelta without one delta")
            self._delta(index, delta)

    def _delta(self, index: int, delta: dict[str, Any]) -> None:
        ((field, value),) = delta.items()
        block = self._blocks.get(index)
        # A text or reasoning block starts with its first delta; a tool call with its start.
        if block is None and field in ("text", "reasoningContent"):
            block = self._blocks[index] = {}
        if block is None or next(iter(block), field) != field:
            raise StreamBroken("a delta of another kind than its block")
        if field == "text" and isinstance(value, str):
            block.setdefault("text", "")
            self._pieces.setdefault((index, "text"), []).append(value)
            self._show(TextDelta, index, value)
        elif field == "toolUse" and isinstance(value, dict) and index in self._inputs:
            piece = value.get("input")
            if isinstance(piece, str):
                self._inputs[index].append(piece)
        elif field == "reasoningContent" and isinstance(value, dict):
            self._reasoning(index, block.setdefault("reasoningContent", {}), value)
        else:
            raise StreamBroken(f"a malformed {field} delta")

    def _reasoning(self, index: int, reasoning: dict[str, Any], value: dict[str, Any]) -> None:
        if isinstance(value.get("redactedContent"), str):
            reasoning.setdefault("redactedContent", "")
            self._pieces.setdefault((index, "redacted"), []).append(_blob(value["redactedContent"]))
            return
        text = reasoning.setdefault("reasoningText", {})
        for field in ("text", "signature"):
            if isinstance(value.get(field), str):
                text.setdefault(field, "")
                self._pieces.setdefault((index, field), []).append(value[field])
        if isinstance(value.get("text"), str):
            self._show(ThinkingDelta, index, value["text"])

    def _show(self, shown: type[TextDelta] | type[ThinkingDelta], index: int, text: str) -> None:
        if not text:
            return
        if self._shown.get(shown, index) != index:
            self._on_delta(shown(text=BLOCK_SEPARATOR))
        self._shown[shown] = index
        self._on_delta(shown(text=text))

    def may_end(self) -> bool:
        # After messageStop the answer is whole; only its usage would be missing.
        return self._stopped

    def answer(self) -> dict[str, Any]:
        for (index, field), pieces in self._pieces.items():
            block = self._blocks[index]
            if field == "redacted":
                joined = base64.b64encode(b"".join(pieces)).decode("ascii")
                block["reasoningContent"]["redactedContent"] = joined
            elif "reasoningContent" in block:
                block["reasoningContent"]["reasoningText"][field] = "".join(pieces)
            else:
                block[field] = "".join(pieces)
        self._pieces.clear()
        content = [self._blocks[index] for index in sorted(self._blocks)]
        return {
            "output": {"message": {"role": self._started(), "content": content}},
            **self._message,
        }


_BLOCK_EVENTS: Final = frozenset({"contentBlockStart", "contentBlockDelta", "contentBlockStop"})


def _blob(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise StreamBroken("redacted reasoning that is not base64") from None


def _json_loads(raw: bytes | str) -> Any:
    # orjson, as nrllm-core reads JSON: it refuses lone surrogates, which the standard
    # library's reader hands on, to fail later where the audit encodes the answer.
    import orjson

    return orjson.loads(raw)


def _object(payload: bytes) -> dict[str, Any]:
    try:
        data = _json_loads(payload) if payload else {}
    except ValueError:
        raise StreamBroken("a malformed event payload") from None
    if not isinstance(data, dict):
        raise StreamBroken("an event payload that is no object")
    return data

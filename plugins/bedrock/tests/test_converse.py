"""The ``bedrock`` kind against a loopback Bedrock: requests botocore's model takes, answers
read as botocore reads them, whole or streamed, sync or async, signed or with an API key."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest

from nrllm_bedrock import BedrockSettings
from nrllm_core import (
    ChatMessage,
    ProviderError,
    Replay,
    Stop,
    StreamRestarted,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolSpec,
    Usage,
)

MODEL = "anthropic.claude-sonnet-4-v1:0"
LOOKUP = ToolSpec(
    name="lookup",
    description="Find a page.",
    parameters={"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
)
SIGNATURE = "EqQBCkYIARgCIkD-signature"


def answer(*blocks: dict[str, Any], stop: str = "end_turn", **usage: int) -> dict[str, Any]:
    counts = {"inputTokens": 11, "outputTokens": 7, "totalTokens": 18, **usage}
    return {
        "output": {"message": {"role": "assistant", "content": list(blocks)}},
        "stopReason": stop,
        "usage": counts,
        "metrics": {"latencyMs": 12},
    }


def text(value: str) -> dict[str, Any]:
    return {"text": value}


def use(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"toolUse": {"toolUseId": call_id, "name": name, "input": arguments}}


def reasoning(value: str, signature: str = SIGNATURE) -> dict[str, Any]:
    return {"reasoningContent": {"reasoningText": {"text": value, "signature": signature}}}


ANSWERS = {
    "text": answer(text("Hallo, Welt.")),
    "two texts": answer(text("Eins."), text("Zwei.")),
    "parallel calls": answer(
        text("Ich suche."), use("tooluse_1", "lookup", {"q": "a"}), use("tooluse_2", "lookup", {})
    ),
    "reasoning then a call": answer(
        reasoning("Erst nachdenken. Dann suchen."),
        use("tooluse_3", "lookup", {"q": "ü"}),
        stop="tool_use",
    ),
    "redacted reasoning": answer(
        {"reasoningContent": {"redactedContent": "AG9wYXF1ZSByZWFzb25pbmf/"}}, text("Fertig.")
    ),
    "max tokens": answer(text("Abgeschn"), stop="max_tokens"),
    "guardrail": answer(text("Sorry, blocked."), stop="guardrail_intervened"),
    "content filtered": answer(stop="content_filtered"),
    "cached": answer(text("ok"), cacheReadInputTokens=100, cacheWriteInputTokens=20),
}


def expected_from_botocore(parsed: dict[str, Any]) -> dict[str, Any]:
    """What an answer says, read from botocore's parse of it."""
    blocks = parsed["output"]["message"]["content"]
    usage = parsed["usage"]
    read, written = usage.get("cacheReadInputTokens", 0), usage.get("cacheWriteInputTokens", 0)
    return {
        "texts": [b["text"] for b in blocks if "text" in b],
        "calls": [
            (b["toolUse"]["toolUseId"], b["toolUse"]["name"], b["toolUse"]["input"])
            for b in blocks
            if "toolUse" in b
        ],
        "thinking": [
            b["reasoningContent"]["reasoningText"]["text"]
            for b in blocks
            if "reasoningText" in b.get("reasoningContent", {})
        ],
        "stop": parsed["stopReason"],
        "usage": Usage(
            prompt_tokens=usage["inputTokens"] + read + written,
            completion_tokens=usage["outputTokens"],
            cached_tokens=read,
        ),
        "cache_written": written,
    }


def expected_from_botocore_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """What a stream says, assembled from botocore's parse of its events, block by block."""
    blocks: dict[int, dict[str, Any]] = {}
    stop, usage = None, None
    for item in events:
        ((kind, data),) = item.items()
        if kind == "contentBlockStart":
            start = data["start"]["toolUse"]
            blocks[data["contentBlockIndex"]] = {"toolUse": {**start, "input": ""}}
        elif kind == "contentBlockDelta":
            block = blocks.setdefault(data["contentBlockIndex"], {})
            ((field, value),) = data["delta"].items()
            if field == "text":
                block["text"] = block.get("text", "") + value
            elif field == "toolUse":
                block["toolUse"]["input"] += value["input"]
            else:
                reasoning = block.setdefault("reasoningContent", {"reasoningText": {"text": ""}})
                reasoning["reasoningText"]["text"] += value.get("text", "")
        elif kind == "messageStop":
            stop = data["stopReason"]
        elif kind == "metadata":
            usage = data["usage"]
    content = []
    for _, block in sorted(blocks.items()):
        if "toolUse" in block:
            block["toolUse"]["input"] = json.loads(block["toolUse"]["input"] or "{}")
        if not block.get("reasoningContent", {}).get("reasoningText", {"text": "x"})["text"]:
            del block["reasoningContent"]["reasoningText"]
        content.append(block)
    whole = {"output": {"message": {"content": content}}, "stopReason": stop, "usage": usage}
    return expected_from_botocore(whole)


def said(answer: Any) -> dict[str, Any]:
    return {
        "texts": [t for t in answer.content.split("\n\n") if t]
        if answer.stop is not Stop.REFUSAL
        or answer.content != "The provider's guardrail or content filter stopped the answer."
        else [],
        "calls": [(c.id, c.name, dict(c.arguments)) for c in answer.tool_calls],
        "thinking": [answer.thinking] if answer.thinking else [],
        "stop": answer.finish_reason,
        "usage": answer.usage,
        "cache_written": answer.cache_creation_tokens,
    }


# -- requests -------------------------------------------------------------------------------------


def transcript(provider: Any) -> list[ChatMessage]:
    calls = [
        ToolCall(id="tooluse_1", name="lookup", arguments={"q": "a"}),
        ToolCall(id="tooluse_2", name="lookup", arguments={"q": "b"}),
    ]
    replayed = Replay(
        origin=provider.origin,
        blocks=[reasoning("Denken."), use("tooluse_3", "lookup", {"q": "c"})],
    )
    return [
        ChatMessage.system("Sei knapp."),
        ChatMessage.user("Such a und b."),
        ChatMessage.assistant("Ich suche beide.", calls),
        ChatMessage.tool_result("tooluse_1", "Seite a"),
        ChatMessage.tool_result("tooluse_2", "nicht gefunden", is_error=True),
        ChatMessage.assistant(
            "", [ToolCall(id="tooluse_3", name="lookup", arguments={"q": "c"})], replay=replayed
        ),
        ChatMessage.tool_result("tooluse_3", "Seite c"),
    ]


def test_a_transcript_with_calls_results_and_reasoning_is_a_request_botocore_takes(
    make_provider, server, oracle
):
    provider = make_provider(
        temperature=0.2,
        max_tokens=512,
        params={
            "inferenceConfig": {"topP": 0.9, "stopSequences": ["END"]},
            "additionalModelRequestFields": {
                "thinking": {"type": "enabled", "budget_tokens": 1024}
            },
        },
    )
    server.answer(answer(text("Fertig.")))

    provider.complete(transcript(provider), [LOOKUP])

    (body,) = server.bodies
    oracle.validate(MODEL, body)
    assert server.targets == [f"/model/{MODEL.replace(':', '%3A')}/converse"]
    assert body["system"] == [{"text": "Sei knapp."}]
    assert body["inferenceConfig"] == {
        "topP": 0.9,
        "stopSequences": ["END"],
        "maxTokens": 512,
        "temperature": 0.2,
    }
    assert body["additionalModelRequestFields"] == {
        "thinking": {"type": "enabled", "budget_tokens": 1024}
    }
    assert body["toolConfig"] == {
        "tools": [
            {
                "toolSpec": {
                    "name": "lookup",
                    "description": "Find a page.",
                    "inputSchema": {"json": dict(LOOKUP.parameters)},
                }
            }
        ]
    }
    assert [m["role"] for m in body["messages"]] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert body["messages"][1]["content"] == [
        text("Ich suche beide."),
        use("tooluse_1", "lookup", {"q": "a"}),
        use("tooluse_2", "lookup", {"q": "b"}),
    ]
    assert body["messages"][2]["content"] == [
        {"toolResult": {"toolUseId": "tooluse_1", "content": [text("Seite a")]}},
        {
            "toolResult": {
                "toolUseId": "tooluse_2",
                "content": [text("nicht gefunden")],
                "status": "error",
            }
        },
    ]
    # The replayed turn goes back as it came, its reasoning signed.
    assert body["messages"][3]["content"] == [
        reasoning("Denken."),
        use("tooluse_3", "lookup", {"q": "c"}),
    ]


def test_a_turn_of_another_provider_goes_as_its_portable_fields(make_provider, server, oracle):
    provider = make_provider()
    other = Replay(origin="bedrock:other:m", blocks=[reasoning("Fremd.")])
    server.answer(answer(text("ok")))
    provider.complete(
        [
            ChatMessage.user("hi"),
            ChatMessage.assistant("Hallo.", replay=other),
            ChatMessage.user("?"),
        ],
        [],
    )
    (body,) = server.bodies
    oracle.validate(MODEL, body)
    assert body["messages"][1] == {"role": "assistant", "content": [text("Hallo.")]}
    assert "toolConfig" not in body
    assert "inferenceConfig" not in body


def test_the_last_round_keeps_the_tools_declared_without_a_tool_choice(
    make_provider, server, oracle
):
    provider = make_provider()
    server.answer(answer(text("ok")))
    provider.complete([ChatMessage.user("hi")], [LOOKUP], tool_choice="none")
    (body,) = server.bodies
    oracle.validate(MODEL, body)
    assert "toolChoice" not in body["toolConfig"]
    assert [t["toolSpec"]["name"] for t in body["toolConfig"]["tools"]] == ["lookup"]


# -- whole answers --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_whole_answer_means_what_botocore_parses(name, make_provider, server, oracle):
    data = ANSWERS[name]
    server.answer(data)
    got = make_provider().complete([ChatMessage.user("?")], [LOOKUP])
    parsed = oracle.parse_whole(json.dumps(data).encode())
    assert said(got) == expected_from_botocore(parsed)


@pytest.mark.parametrize(
    ("name", "stop"),
    [("max tokens", Stop.LENGTH), ("guardrail", Stop.REFUSAL), ("content filtered", Stop.REFUSAL)],
)
def test_stop_reasons(name, stop, make_provider, server):
    server.answer(ANSWERS[name])
    got = make_provider().complete([ChatMessage.user("?")], [])
    assert got.stop is stop
    assert got.content
    assert got.replay is None


def test_reasoning_is_kept_as_a_replay_of_this_provider(make_provider, server):
    provider = make_provider()
    server.answer(ANSWERS["reasoning then a call"], ANSWERS["redacted reasoning"])
    signed = provider.complete([ChatMessage.user("?")], [LOOKUP])
    redacted = provider.complete([ChatMessage.user("?")], [LOOKUP])
    assert signed.thinking == "Erst nachdenken. Dann suchen."
    assert signed.replay == Replay(
        origin=f"bedrock:br:{MODEL}",
        blocks=ANSWERS["reasoning then a call"]["output"]["message"]["content"],
    )
    assert redacted.replay is not None
    assert redacted.replay.blocks[0]["reasoningContent"]["redactedContent"] == (
        "AG9wYXF1ZSByZWFzb25pbmf/"
    )
    assert redacted.thinking is None


# -- streams --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(ANSWERS))
def test_a_stream_means_what_botocore_parses_and_what_the_whole_answer_does(
    name, make_provider, server, oracle, wire
):
    data = ANSWERS[name]
    frames = wire.stream_of(data)
    server.stream(*frames)
    server.answer(data)
    provider = make_provider()
    deltas: list[Any] = []

    streamed = provider.stream([ChatMessage.user("?")], [LOOKUP], on_delta=deltas.append)
    whole = provider.complete([ChatMessage.user("?")], [LOOKUP])

    assert server.targets[0].endswith("/converse-stream")
    assert server.bodies[0] == server.bodies[1]
    assert said(streamed) == expected_from_botocore_events(oracle.parse_stream(b"".join(frames)))
    assert streamed == whole
    shown = "".join(d.text for d in deltas if isinstance(d, TextDelta))
    if whole.stop is not Stop.REFUSAL or shown:
        assert shown == whole.content
    assert "".join(d.text for d in deltas if isinstance(d, ThinkingDelta)) == (whole.thinking or "")


def test_a_cut_stream_is_asked_for_again_as_a_whole(make_provider, server, sleeps, wire):
    frames = wire.stream_of(ANSWERS["text"])
    server.stream(*frames[:3], cut=True)
    server.stream(*frames)
    deltas: list[Any] = []
    got = make_provider().stream([ChatMessage.user("?")], [], on_delta=deltas.append)
    assert got.content == "Hallo, Welt."
    assert StreamRestarted() in deltas
    assert len(server.bodies) == 2
    assert len(sleeps) == 1


def test_a_corrupt_frame_breaks_the_stream(make_provider, server, sleeps, wire):
    frames = wire.stream_of(ANSWERS["text"])
    broken = bytearray(frames[1])
    broken[-1] ^= 0xFF
    server.stream(frames[0], bytes(broken), *frames[2:])
    server.stream(*frames)
    got = make_provider().stream([ChatMessage.user("?")], [], on_delta=lambda d: None)
    assert got.content == "Hallo, Welt."
    assert len(server.bodies) == 2


def test_a_stream_ended_before_message_stop_is_broken(make_provider, server, sleeps, wire):
    frames = wire.stream_of(ANSWERS["text"])
    for _ in range(3):
        server.stream(*frames[:-2])
    with pytest.raises(ProviderError, match="the stream ended before its final event"):
        make_provider().stream([ChatMessage.user("?")], [], on_delta=lambda d: None)


def test_a_stream_without_its_metadata_is_whole(make_provider, server, wire):
    frames = wire.stream_of(ANSWERS["text"])
    server.stream(*frames[:-1])
    got = make_provider().stream([ChatMessage.user("?")], [], on_delta=lambda d: None)
    assert (got.content, got.usage) == ("Hallo, Welt.", Usage())


def test_an_exception_event_mid_stream_fails_at_once(make_provider, server, sleeps, wire, oracle):
    frames = wire.stream_of(ANSWERS["text"])
    failing = [*frames[:2], wire.exception("modelStreamErrorException", "The model broke.")]
    server.stream(*failing)
    with pytest.raises(ProviderError) as raised:
        make_provider().stream([ChatMessage.user("?")], [], on_delta=lambda d: None)
    assert str(raised.value) == (
        'provider "br" answered with an error: The model broke. (code modelStreamErrorException)'
    )
    assert (len(server.bodies), sleeps) == (1, [])
    from botocore.exceptions import EventStreamError

    with pytest.raises(EventStreamError, match="The model broke"):
        oracle.parse_stream(b"".join(failing))


def test_acomplete_and_astream_answer_as_complete_and_stream_do(make_provider, server, wire):
    data = ANSWERS["parallel calls"]
    for _ in range(2):
        server.answer(data)
        server.stream(*wire.stream_of(data))
    provider = make_provider()
    messages = [ChatMessage.user("?")]

    async def both() -> tuple[Any, Any]:
        deltas: list[Any] = []
        whole = await provider.acomplete(messages, [LOOKUP])
        streamed = await provider.astream(messages, [LOOKUP], on_delta=deltas.append)
        await provider.aclose()
        return whole, streamed

    whole, streamed = anyio.run(both)
    assert whole == streamed
    assert provider.complete(messages, [LOOKUP]) == whole
    assert provider.stream(messages, [LOOKUP], on_delta=lambda d: None) == whole
    assert [c.id for c in whole.tool_calls] == ["tooluse_1", "tooluse_2"]
    assert whole.tool_calls[1].arguments == {}


# -- auth -----------------------------------------------------------------------------------------


def test_requests_are_signed_with_sigv4_and_the_signature_verifies(
    make_provider, server, credentials
):
    server.answer(answer(text("ok")))
    make_provider().complete([ChatMessage.user("hi")], [])

    (headers,) = server.headers
    authorization = headers["authorization"]
    assert re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=AKID/\d{8}/us-east-1/bedrock/aws4_request, "
        r"SignedHeaders=content-type;host;x-amz-date;x-amz-security-token, Signature=[0-9a-f]{64}",
        authorization,
    ), authorization
    assert headers["x-amz-security-token"] == "SESSION-TOKEN"
    # The server's side: the same request, signed for the time it names, signs the same.
    request = AWSRequest(
        method="POST",
        url=server.url + server.targets[0],
        data=server.raw[0],
        headers={
            "content-type": headers["content-type"],
            "X-Amz-Date": headers["x-amz-date"],
            "X-Amz-Security-Token": headers["x-amz-security-token"],
        },
    )
    request.context["timestamp"] = headers["x-amz-date"]
    signer = SigV4Auth(credentials.get_frozen_credentials(), "bedrock", "us-east-1")
    signature = signer.signature(
        signer.string_to_sign(request, signer.canonical_request(request)), request
    )
    assert authorization.endswith(f"Signature={signature}")


def test_an_api_key_goes_as_a_bearer_token_and_is_never_shown(make_provider, server, sleeps):
    key = "ABSKQmVkcm9ja0FQSUtleS1zZWNyZXQ="
    server.answer(answer(text("ok")))
    server.answer(
        {"message": f"The key {key} is not valid."},
        status=403,
        headers={
            "x-amzn-errortype": "AccessDeniedException:http://internal.amazon.com/coral/com.amazon.bedrock/"
        },
    )
    provider = make_provider(environ={"AWS_BEARER_TOKEN_BEDROCK": key})
    provider.complete([ChatMessage.user("hi")], [])
    with pytest.raises(ProviderError) as raised:
        provider.complete([ChatMessage.user("hi")], [])

    assert server.headers[0]["authorization"] == f"Bearer {key}"
    assert "x-amz-date" not in server.headers[0]
    assert str(raised.value) == (
        'provider "br": HTTP 403 AccessDeniedException: {"message": "The key *** is not valid."}'
    )
    assert raised.value.status_code == 403


def test_a_named_key_variable_must_be_set(make_provider):
    with pytest.raises(ProviderError, match="the API key variable MY_BEDROCK_KEY is not set"):
        make_provider(api_key_env="MY_BEDROCK_KEY")


def test_without_credentials_the_request_is_refused_before_it_is_sent(server, sleeps, monkeypatch):
    from nrllm_bedrock import BedrockProvider

    monkeypatch.setattr("botocore.session.Session.get_credentials", lambda self: None)
    provider = BedrockProvider.from_settings(
        "br",
        {"model": MODEL, "base_url": server.url, "options": BedrockSettings(region="eu-west-1")},
        environ={},
    )
    with pytest.raises(ProviderError, match="no AWS credentials were found"):
        provider.complete([ChatMessage.user("hi")], [])
    assert server.bodies == []


# -- retries --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind"), [(429, "ThrottlingException"), (503, "ServiceUnavailableException")]
)
def test_throttling_and_unavailability_are_retried(status, kind, make_provider, server, sleeps):
    refused = {"message": "Too many requests, please wait before trying again."}
    errortype = {"x-amzn-errortype": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"}
    server.answer(refused, status=status, headers={**errortype, "retry-after": "3"})
    server.answer(answer(text("ok")))
    got = make_provider().complete([ChatMessage.user("hi")], [])
    assert got.content == "ok"
    assert sleeps == [3.0]
    # Each attempt is signed for its own time.
    assert all(h["authorization"].startswith("AWS4-HMAC-SHA256") for h in server.headers)


def test_throttling_that_persists_fails_with_the_error_type(make_provider, server, sleeps):
    errortype = {"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/coral/"}
    for _ in range(3):
        server.answer({"message": "Too many requests."}, status=429, headers=errortype)
    with pytest.raises(ProviderError) as raised:
        make_provider().complete([ChatMessage.user("hi")], [])
    assert str(raised.value) == (
        'provider "br": HTTP 429 ThrottlingException: {"message": "Too many requests."} '
        "(after 3 attempts)"
    )
    assert len(sleeps) == 2


def test_a_validation_error_is_not_retried(make_provider, server, sleeps):
    server.answer(
        {"message": "Malformed input request."},
        status=400,
        headers={"x-amzn-errortype": "ValidationException"},
    )
    with pytest.raises(ProviderError, match=r"HTTP 400 ValidationException: .*Malformed input"):
        make_provider().complete([ChatMessage.user("hi")], [])
    assert sleeps == []


@pytest.mark.parametrize(
    "broken",
    [
        [
            ("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "a"}}),
            (
                "contentBlockDelta",
                {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "b"}}},
            ),
        ],
        [("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{}"}}})],
        [("metadata", {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}})],
        [("contentBlockDelta", {"delta": {"text": "a"}})],
        # No JSON text holds one; a reader that let it through failed the answer's audit step.
        [("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "a\ud800"}})],
    ],
    ids=[
        "two kinds in one block",
        "tool input without its start",
        "metadata first",
        "no index",
        "a lone surrogate",
    ],
)
def test_events_that_make_no_sense_break_the_stream(broken, make_provider, server, sleeps, wire):
    good = wire.stream_of(ANSWERS["text"])
    events = [wire.event(kind, data) for kind, data in broken]
    server.stream(good[0], *events, *good[1:])
    server.stream(*good)
    deltas: list[Any] = []
    got = make_provider().stream([ChatMessage.user("?")], [], on_delta=deltas.append)
    assert got.content == "Hallo, Welt."
    assert len(server.bodies) == 2
    assert StreamRestarted() in deltas


def test_a_long_stream_is_assembled_in_time_linear_in_its_length():
    import time

    from nrllm_bedrock._stream import Events

    def frame(kind: str, data: dict[str, Any]) -> Any:
        headers = {":message-type": "event", ":event-type": kind}
        return headers, json.dumps(data).encode()

    # 8 MB of text and as much reasoning, in 100-character pieces: joined once, not copied
    # on every piece (appending to a string cost the stream its length squared).
    piece = "x" * 100
    events = Events(lambda delta: None)
    started = time.perf_counter()
    events.feed(frame("messageStart", {"role": "assistant"}))
    text = frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": piece}})
    reasoning = frame(
        "contentBlockDelta",
        {"contentBlockIndex": 1, "delta": {"reasoningContent": {"text": piece, "signature": "s"}}},
    )
    for _ in range(80_000):
        events.feed(text)
    for _ in range(80_000):
        events.feed(reasoning)
    events.feed(frame("messageStop", {"stopReason": "end_turn"}))
    answer = events.answer()
    seconds = time.perf_counter() - started
    first, second = answer["output"]["message"]["content"]
    assert first == {"text": piece * 80_000}
    assert second == {
        "reasoningContent": {"reasoningText": {"text": piece * 80_000, "signature": "s" * 80_000}}
    }
    assert seconds < 3.0

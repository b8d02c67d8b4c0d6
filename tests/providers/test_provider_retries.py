"""Retries as the official SDKs do them: which statuses, which headers, and the bounds."""

from __future__ import annotations

from typing import Any

import pytest

from nrllm_core import ChatMessage, ProviderError
from nrllm_core.providers import AnthropicProvider, OpenAIProvider
from nrllm_core.providers._http import RETRY_AFTER_CAP_SECONDS

HELLO = [ChatMessage.user("hi")]


def provider(kind: str, server: Any, sleeps: Any, **settings: Any) -> Any:
    if kind == "openai":
        base = {"model": "m", "base_url": f"{server.url}/v1"}
        return OpenAIProvider.from_settings("p", base | settings, environ={}, sleep=sleeps)
    base = {"model": "m", "base_url": server.url, "api_key_env": "K"}
    return AnthropicProvider.from_settings(
        "p", base | settings, environ={"K": "sk-ant-x"}, sleep=sleeps
    )


KINDS = pytest.mark.parametrize("kind", ["openai", "anthropic"])
FAILED = {"error": {"message": "try later", "type": "server_error"}}


@KINDS
@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 529])
def test_the_statuses_the_sdks_retry_are_retried(kind, status, server, sleeps, plain_answer):
    server.answer(FAILED, status=status)
    server.answer(plain_answer(kind))

    assert provider(kind, server, sleeps).complete(HELLO, []).content == "ok"
    assert (len(server.bodies), sleeps) == (2, [0.5])


@KINDS
@pytest.mark.parametrize("status", [400, 401, 403, 404, 413, 422])
def test_other_client_errors_fail_at_once(kind, status, server, sleeps):
    server.answer(FAILED, status=status)

    with pytest.raises(ProviderError, match=f"HTTP {status}") as caught:
        provider(kind, server, sleeps).complete(HELLO, [])
    assert caught.value.status_code == status
    assert (len(server.bodies), sleeps) == (1, [])


@KINDS
def test_retry_after_ms_comes_before_retry_after(kind, server, sleeps, plain_answer):
    server.answer(FAILED, status=429, headers={"retry-after-ms": "1500", "retry-after": "7"})
    server.answer(FAILED, status=503, headers={"retry-after-ms": "soon", "retry-after": "3"})
    server.answer(plain_answer(kind))

    provider(kind, server, sleeps).complete(HELLO, [])

    assert sleeps == [1.5, 3.0]


def test_retry_after_ms_is_capped(server, sleeps, plain_answer):
    server.answer(FAILED, status=429, headers={"retry-after-ms": "90000"})
    server.answer(plain_answer("openai"))

    provider("openai", server, sleeps).complete(HELLO, [])

    assert sleeps == [RETRY_AFTER_CAP_SECONDS]


@KINDS
@pytest.mark.parametrize(
    ("status", "header", "retried"),
    [(503, "false", False), (529, "false", False), (400, "true", True), (409, "true", True)],
)
def test_x_should_retry_overrides_the_status(
    kind, status, header, retried, server, sleeps, plain_answer
):
    server.answer(FAILED, status=status, headers={"x-should-retry": header})
    server.answer(plain_answer(kind))
    model = provider(kind, server, sleeps)

    if retried:
        assert model.complete(HELLO, []).content == "ok"
    else:
        with pytest.raises(ProviderError, match=f"HTTP {status}"):
            model.complete(HELLO, [])
    assert len(server.bodies) == (2 if retried else 1)


@pytest.mark.parametrize(
    "error",
    [
        {"message": "You exceeded your current quota", "code": "insufficient_quota"},
        {"message": "You exceeded your current quota", "type": "insufficient_quota"},
    ],
    ids=["code", "type"],
)
def test_a_429_for_insufficient_quota_is_not_retried(error, server, sleeps):
    server.answer({"error": error}, status=429, headers={"retry-after": "1"})

    with pytest.raises(ProviderError, match=r"HTTP 429: .*insufficient_quota"):
        provider("openai", server, sleeps).complete(HELLO, [])
    assert (len(server.bodies), sleeps) == (1, [])


def test_a_rate_limit_429_is_still_retried(server, sleeps, plain_answer):
    server.answer({"error": {"message": "slow down", "code": "rate_limit_exceeded"}}, status=429)
    server.answer(plain_answer("openai"))

    assert provider("openai", server, sleeps).complete(HELLO, []).content == "ok"


@KINDS
def test_retries_are_bounded_by_max_retries(kind, server, sleeps):
    server.answer(*[FAILED] * 4, status=408)

    with pytest.raises(ProviderError, match=r"HTTP 408: .*\(after 4 attempts\)"):
        provider(kind, server, sleeps, max_retries=3).complete(HELLO, [])
    assert (len(server.bodies), sleeps) == (4, [0.5, 1.0, 2.0])

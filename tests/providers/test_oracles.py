"""The SDK oracles themselves: a request body they pass is one the request types allow.

The Messages API's content union also holds the SDK's response models, which keep extra keys
and coerce; the oracles must judge each block by the request block types alone.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic import ValidationError

BLOCKS = {
    "text": {"type": "text", "text": "t"},
    "tool_use": {"type": "tool_use", "id": "t1", "name": "lookup", "input": {"q": None}},
}
ROLES = pytest.mark.parametrize("role", ["user", "assistant"])
KINDS = pytest.mark.parametrize("kind", sorted(BLOCKS))


@pytest.fixture(params=["unstreamed", "streamed"])
def oracle(
    request: pytest.FixtureRequest,
    anthropic_oracle: Callable[[Any], None],
    anthropic_stream_oracle: Callable[[Any], None],
) -> Callable[[dict[str, Any]], None]:
    if request.param == "unstreamed":
        return anthropic_oracle
    return lambda body: anthropic_stream_oracle({**body, "stream": True})


def body(role: str, block: dict[str, Any]) -> dict[str, Any]:
    before = [{"role": "user", "content": "hi"}] if role == "assistant" else []
    return {
        "model": "m",
        "max_tokens": 1,
        "messages": [*before, {"role": role, "content": [block]}],
    }


@ROLES
@KINDS
def test_a_request_block_passes(oracle, role, kind):
    oracle(body(role, BLOCKS[kind]))


@ROLES
@KINDS
def test_a_block_with_an_extra_key_is_rejected(oracle, role, kind):
    with pytest.raises(ValidationError):
        oracle(body(role, {**BLOCKS[kind], "bogus": 1}))


@ROLES
def test_a_null_the_request_type_does_not_take_is_rejected(oracle, role):
    # The response model's dump has it; ToolUseBlockParam's caller is no Optional.
    with pytest.raises(ValidationError):
        oracle(body(role, {**BLOCKS["tool_use"], "caller": None}))

"""What a provider kind of a plugin builds on to call a JSON model API over HTTP as core's own
kinds do: the same clients, retries (backoff, ``Retry-After``), size limits, redacted error
excerpts and stream handling, so that a plugin's kind fails, retries and streams like them.

Importing it loads no HTTP client: httpx loads on the first request.
"""

from __future__ import annotations

from nrllm_core.providers._api import HttpProvider
from nrllm_core.providers._http import (
    Framing,
    HttpSettings,
    StreamAssembler,
    StreamBroken,
    StreamFailed,
    token_count,
)
from nrllm_core.providers._settings import Settings

__all__ = [
    "Framing",
    "HttpProvider",
    "HttpSettings",
    "Settings",
    "StreamAssembler",
    "StreamBroken",
    "StreamFailed",
    "token_count",
]

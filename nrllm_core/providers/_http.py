"""One JSON POST to a model API with bounded retries; every failure a safe ``ProviderError``."""

from __future__ import annotations

import email.utils
import math
import re
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, final

from nrllm_core import _json
from nrllm_core._messages import ProviderError
from nrllm_core.log import logger
from nrllm_core.providers._settings import Settings

__all__ = [
    "BACKOFF_CAP_SECONDS",
    "RETRY_AFTER_CAP_SECONDS",
    "HttpSettings",
    "post_json",
    "response_id",
]

BACKOFF_BASE_SECONDS: Final = 0.5
BACKOFF_CAP_SECONDS: Final = 8.0
RETRY_AFTER_CAP_SECONDS: Final = 30.0
EXCERPT_MAX_CHARS: Final = 300
# Only this much of an error body is ever read: redaction then sees whole keys, not the tail
# of one cut at the excerpt's edge.
_SCAN_MAX_CHARS: Final = 4096
_SPACE: Final = re.compile(r"\s+")
_TRAILING_WORD: Final = re.compile(r"\S*$")


@final
class HttpSettings:
    """Where and how to POST; the key is held here and never shown."""

    __slots__ = ("headers", "max_retries", "provider", "secrets", "sleep", "timeout", "url")

    def __init__(
        self,
        *,
        provider: str,
        url: str,
        headers: Mapping[str, str],
        secrets: tuple[str, ...],
        timeout: float,
        max_retries: int,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.provider = provider
        self.url = url
        self.headers = dict(headers)
        self.secrets = secrets
        self.timeout = timeout
        self.max_retries = max_retries
        self.sleep = sleep

    def __repr__(self) -> str:
        return f"HttpSettings(provider={self.provider!r}, url={self.url!r})"


def http_settings(
    read: Settings,
    *,
    path: str,
    default_base_url: str,
    headers: Mapping[str, str],
    secrets: tuple[str, ...],
    sleep: Callable[[float], None],
) -> HttpSettings:
    """The POST target and limits every HTTP provider kind reads the same way from its section:
    ``base_url`` (+ ``path``), ``timeout_seconds`` (60) and ``max_retries`` (2)."""
    base_url = read.text("base_url", default_base_url).rstrip("/")
    return HttpSettings(
        provider=read.name,
        url=f"{base_url}{path}",
        headers=headers,
        secrets=secrets,
        timeout=read.seconds("timeout_seconds", 60.0),
        max_retries=read.count("max_retries", 2),
        sleep=sleep,
    )


def post_json(http: HttpSettings, body: Mapping[str, Any]) -> Any:
    """The decoded JSON answer to POSTing ``body``.

    429, 5xx and transport failures (timeouts included) are retried ``max_retries`` times with
    exponential backoff, or after the server's ``Retry-After`` up to a cap; any other status
    fails at once.
    """
    import httpx

    content = _json.dumps(body)
    headers = {**http.headers, "content-type": "application/json"}
    attempts = http.max_retries + 1
    failure = ""
    status: int | None = None
    with httpx.Client(timeout=http.timeout) as client:
        for attempt in range(attempts):
            delay = min(BACKOFF_BASE_SECONDS * 2**attempt, BACKOFF_CAP_SECONDS)
            try:
                response = client.post(http.url, content=content, headers=headers)
            except httpx.TimeoutException:
                failure, status = f"timed out after {http.timeout:g} s", None
            except httpx.TransportError as exc:
                failure, status = f"could not reach the server ({type(exc).__name__})", None
            else:
                status = response.status_code
                if 200 <= status < 300:
                    return _decode(http, response.content)
                failure = f"HTTP {status}: {excerpt(response.content, http.secrets)}"
                if status != 429 and status < 500:
                    raise ProviderError(
                        f'provider "{http.provider}": {failure}', status_code=status
                    )
                delay = _retry_after(response.headers.get("retry-after"), delay)
            if attempt + 1 < attempts:
                logger().warning(
                    "nrllm.provider.retry",
                    provider=http.provider,
                    attempt=attempt + 1,
                    status=status,
                    delay_seconds=delay,
                )
                http.sleep(delay)
    logger().error(
        "nrllm.provider.failed", provider=http.provider, attempts=attempts, status=status
    )
    raise ProviderError(
        f'provider "{http.provider}": {failure} '
        f"(after {attempts} attempt{'s' if attempts > 1 else ''})",
        status_code=status,
    )


def _decode(http: HttpSettings, content: bytes) -> Any:
    try:
        return _json.loads(content)
    except ValueError:
        raise ProviderError(f'provider "{http.provider}" answered with malformed JSON') from None


def _retry_after(value: str | None, fallback: float) -> float:
    """Seconds to wait as the server asks (delta seconds or an HTTP date), capped."""
    if value is None:
        return fallback
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return fallback
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if math.isnan(seconds):
        return fallback
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


def excerpt(body: bytes, secrets: tuple[str, ...]) -> str:
    """A short, redacted, one-line excerpt of an error body."""
    from nrllm_core.redact import redact

    text = body[: _SCAN_MAX_CHARS * 4].decode("utf-8", "replace")
    if len(text) > _SCAN_MAX_CHARS:
        # Whatever straddles the edge of the window is dropped whole, so no key is half-read.
        text = _TRAILING_WORD.sub("", text[:_SCAN_MAX_CHARS])
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    text = redact(_SPACE.sub(" ", text).strip())
    if len(text) > EXCERPT_MAX_CHARS:
        text = text[:EXCERPT_MAX_CHARS] + "…"
    return text or "(empty body)"


def token_count(usage: object, key: str) -> int:
    """A token count from a provider's usage object; anything but a count is 0."""
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if type(value) is int and value >= 0 else 0


def response_id(data: object) -> str | None:
    """The answer's ``id`` (both APIs put it at the top level), when it is a string."""
    value = data.get("id") if isinstance(data, Mapping) else None
    return value if isinstance(value, str) and value else None

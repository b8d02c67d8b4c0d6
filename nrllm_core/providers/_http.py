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
# Retried as the official SDKs retry: request timeout, lock conflict, rate limit, server errors.
_RETRIED_STATUSES: Final = frozenset({408, 409, 429})
# A 429 that says the account is out of credit: waiting does not bring the credit back.
_NOT_RETRIED_CODES: Final = frozenset({"insufficient_quota"})
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

    408, 409, 429, 5xx and transport failures (timeouts included) are retried ``max_retries``
    times with exponential backoff, or after the server's ``retry-after-ms`` or ``Retry-After``
    up to a cap; ``x-should-retry: true|false`` overrides the status, and a 429 whose error code
    is ``insufficient_quota`` is not retried. Any other status fails at once, and so does a
    2xx answer whose body is an error object.
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
                if not _retried(status, response.headers, response.content):
                    raise ProviderError(
                        f'provider "{http.provider}": {failure}', status_code=status
                    )
                delay = _retry_after(response.headers, delay)
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
        data = _json.loads(content)
    except ValueError:
        raise ProviderError(f'provider "{http.provider}" answered with malformed JSON') from None
    error = data.get("error") if isinstance(data, dict) else None
    if error is not None:
        # Some OpenAI-compatible gateways report a failure in a 200 answer.
        raise ProviderError(
            f'provider "{http.provider}" answered with an error: {_error_text(http, error)}'
        )
    return data


def _error_text(http: HttpSettings, error: object) -> str:
    """An error object's message and code, redacted like any excerpt of an error body."""
    if not isinstance(error, dict):
        return excerpt(_json.dumps(error), http.secrets)
    message = error.get("message")
    code = _error_code(error)
    text = message if isinstance(message, str) and message else "(no message)"
    if code is not None:
        text = f"{text} (code {code})"
    return excerpt(text.encode(), http.secrets)


def _error_code(error: dict[str, Any]) -> str | None:
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    return None


def _retried(status: int, headers: Mapping[str, str], content: bytes) -> bool:
    """Whether a failed status is worth another attempt, as the official SDKs decide."""
    verdict = headers.get("x-should-retry")
    if verdict in ("true", "false"):
        return verdict == "true"
    if status == 429:
        try:
            data = _json.loads(content[: _SCAN_MAX_CHARS * 4])
        except ValueError:
            return True
        error = data.get("error") if isinstance(data, dict) else None
        codes = (error.get("code"), error.get("type")) if isinstance(error, dict) else ()
        return not any(code in _NOT_RETRIED_CODES for code in codes)
    return status in _RETRIED_STATUSES or status >= 500


def _retry_after(headers: Mapping[str, str], fallback: float) -> float:
    """Seconds to wait as the server asks (``retry-after-ms``, else ``Retry-After`` in delta
    seconds or as an HTTP date), capped."""
    milliseconds = _finite(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return min(max(milliseconds / 1000, 0.0), RETRY_AFTER_CAP_SECONDS)
    value = headers.get("retry-after")
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


def _finite(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) else None


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

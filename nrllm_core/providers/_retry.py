"""When a refused request is worth another attempt, and how long the server asked to wait."""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Final

from nrllm_core import _json

__all__ = ["RETRY_AFTER_CAP_SECONDS", "retried", "retry_after"]

RETRY_AFTER_CAP_SECONDS: Final = 30.0
# Retried as the official SDKs retry: request timeout, lock conflict, rate limit, server errors.
_RETRIED_STATUSES: Final = frozenset({408, 409, 429})
# A 429 that says the account is out of credit: waiting does not bring the credit back.
_NOT_RETRIED_CODES: Final = frozenset({"insufficient_quota"})
# Google's APIs say how long to wait in the error's details, not in a header.
_RETRY_INFO: Final = "type.googleapis.com/google.rpc.RetryInfo"
# A protobuf Duration in JSON: seconds with up to nine decimals and an "s".
_DURATION: Final = re.compile(r"(\d{1,12}(?:\.\d{1,9})?)s")


def retried(status: int, headers: Mapping[str, str], content: bytes) -> bool:
    """Whether a failed status is worth another attempt, as the official SDKs decide."""
    verdict = headers.get("x-should-retry")
    if verdict in ("true", "false"):
        return verdict == "true"
    if status == 429:
        error = _error(content)
        codes = (error.get("code"), error.get("type")) if error is not None else ()
        return not any(code in _NOT_RETRIED_CODES for code in codes)
    return status in _RETRIED_STATUSES or status >= 500


def retry_after(headers: Mapping[str, str], content: bytes) -> float | None:
    """Seconds to wait as the server asks, capped: ``retry-after-ms``, else ``Retry-After``
    in delta seconds or as an HTTP date, else the ``retryDelay`` of a ``google.rpc.RetryInfo``
    among the error's ``details``; ``None`` when it asks for nothing."""
    milliseconds = _finite(headers.get("retry-after-ms"))
    if milliseconds is not None:
        return _capped(milliseconds / 1000)
    value = headers.get("retry-after")
    if value is None:
        return _retry_info(content)
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    return None if math.isnan(seconds) else _capped(seconds)


def _retry_info(content: bytes) -> float | None:
    error = _error(content)
    details = error.get("details") if error is not None else None
    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO:
            delay = detail.get("retryDelay")
            matched = _DURATION.fullmatch(delay) if isinstance(delay, str) else None
            if matched is not None:
                return _capped(float(matched[1]))
    return None


def _error(content: bytes) -> dict[str, object] | None:
    """The error object of an error body, when it is JSON and has one."""
    try:
        data = _json.loads(content)
    except ValueError:
        return None
    error = data.get("error") if isinstance(data, dict) else None
    return error if isinstance(error, dict) else None


def _capped(seconds: float) -> float:
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


def _finite(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else math.nan
    except ValueError:
        return None
    return number if math.isfinite(number) else None

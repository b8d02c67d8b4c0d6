"""The plugin's one event loop: a daemon thread started on first use, never at import.

The SDK is asynchronous and nrllm's loop is not: every MCP session lives on this loop, and
synchronous code submits coroutines to it and waits, bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

__all__ = ["Abandoned", "loop", "run"]

T = TypeVar("T")

_lock = threading.Lock()
_loop: list[asyncio.AbstractEventLoop] = []


def loop() -> asyncio.AbstractEventLoop:
    """The running loop, started now if this is the first call."""
    with _lock:
        if not _loop:
            started = asyncio.new_event_loop()
            threading.Thread(target=started.run_forever, name="nrllm-mcp", daemon=True).start()
            _loop.append(started)
        return _loop[0]


class Abandoned(Exception):
    """The caller stopped waiting (its ``abandoned`` was set); the coroutine is cancelled."""


# How often a wait looks at its ``abandoned``.
_POLL_SECONDS: Final = 0.05


def run(
    coroutine: Coroutine[Any, Any, T],
    timeout: float,
    abandoned: threading.Event | None = None,
) -> T:
    """Run ``coroutine`` on the loop and wait at most ``timeout`` seconds for its result, and
    no longer than until ``abandoned`` is set.

    Raises :class:`TimeoutError` or :class:`Abandoned` (the coroutine is cancelled: an MCP
    request's cancellation sends ``notifications/cancelled``), or what the coroutine raised.
    """
    future = asyncio.run_coroutine_threadsafe(coroutine, loop())
    try:
        if abandoned is None:
            return future.result(timeout)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            done, _ = concurrent.futures.wait([future], max(0.0, min(left, _POLL_SECONDS)))
            if done:
                return future.result()
            if abandoned.is_set():
                future.cancel()
                raise Abandoned
            if left <= 0:
                raise concurrent.futures.TimeoutError
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError from None

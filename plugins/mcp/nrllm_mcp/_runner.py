"""The plugin's one event loop: a daemon thread started on first use, never at import.

The SDK is asynchronous and nrllm's loop is not: every MCP session lives on this loop, and
synchronous code submits coroutines to it and waits, bounded by a timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["loop", "run"]

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


def run(coroutine: Coroutine[Any, Any, T], timeout: float) -> T:
    """Run ``coroutine`` on the loop and wait at most ``timeout`` seconds for its result.

    Raises :class:`TimeoutError` (the coroutine is cancelled) or what the coroutine raised.
    """
    future = asyncio.run_coroutine_threadsafe(coroutine, loop())
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError from None

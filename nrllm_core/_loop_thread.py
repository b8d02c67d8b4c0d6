"""A private event loop on a daemon thread, where sync code runs ``async def`` tools."""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable
from typing import TypeVar, final

__all__ = ["LoopThread", "TimedOut", "loop_thread"]

T = TypeVar("T")


class TimedOut(Exception):
    """The awaited work ran past its time and was cancelled."""


@final
class LoopThread:
    """An asyncio loop running forever on its own thread; started on first use."""

    __slots__ = ("_loop", "_thread")

    def __init__(self) -> None:
        # Imported here: asyncio is not loaded until an async tool runs in sync code.
        import asyncio

        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="nrllm-async-tools", daemon=True
        )
        self._thread.start()

    def run(self, awaitable: Awaitable[T], timeout: float | None = None) -> T:
        """Wait here for ``awaitable`` run on the loop; past ``timeout`` it is cancelled and
        :class:`TimedOut` raised."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("an async tool cannot be waited for from its own event loop")
        import asyncio
        import concurrent.futures

        future = asyncio.run_coroutine_threadsafe(_awaited(awaitable), self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimedOut from None


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


@functools.cache
def loop_thread() -> LoopThread:
    """The process's one private loop thread (it holds no state between calls)."""
    return LoopThread()

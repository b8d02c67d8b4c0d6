"""Where sync code runs tools: kept daemon worker threads, and a private event loop on a
daemon thread for ``async def`` tools."""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar, final

if TYPE_CHECKING:
    import concurrent.futures

__all__ = ["LoopThread", "TimedOut", "Workers", "loop_thread", "workers"]

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


@final
class Workers:
    """Daemon threads kept for sync code's tool calls (a hung tool cannot keep the process
    from exiting). A call goes to an idle thread, else to a new one: a call that never
    returns holds its own thread, never another call. A thread that is done waits for the
    next call unless ``keep`` threads wait already; then it ends.

    Not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined at exit, and its
    ``max_workers`` would let hung calls starve the others."""

    __slots__ = ("_calls", "_idle", "_lock")

    def __init__(self) -> None:
        import queue

        self._lock = threading.Lock()
        self._idle = 0
        self._calls: queue.SimpleQueue[tuple[Callable[[], None], int]] = queue.SimpleQueue()

    def submit(self, function: Callable[[], T], *, keep: int) -> concurrent.futures.Future[T]:
        """``function()`` on a worker thread; its future can be cancelled until it starts.
        Once done, the thread waits for the next call if fewer than ``keep`` do."""
        import concurrent.futures

        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            # An idle thread is counted out for this call, or a new one started for it:
            # each thread takes one call off the queue, so no call waits for a busy thread.
            idle = self._idle > 0
            if idle:
                self._idle -= 1
        if not idle:
            threading.Thread(target=self._serve, name="nrllm-tool", daemon=True).start()
        self._calls.put((functools.partial(_answer, future, function), keep))
        return future

    def _serve(self) -> None:
        while True:
            call, keep = self._calls.get()
            call()
            # Not kept while the thread waits: the call holds its host's manager, and with it
            # what the host's plugins let go when the host goes (MCP sessions, say).
            del call
            with self._lock:
                if self._idle >= keep:
                    return
                self._idle += 1


def _answer(future: concurrent.futures.Future[T], function: Callable[[], T]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        future.set_result(function())
    except BaseException as exc:
        # Handed to whoever waits for the call; the thread goes on serving.
        future.set_exception(exc)


@functools.cache
def workers() -> Workers:
    """The process's one set of tool worker threads."""
    return Workers()

"""The loop's two drivers: they do what the sans-IO core (``_loop``) asks, sync or async.

Neither makes a decision of the loop: each asks the model, runs a turn's admitted calls at
once (threads, or a task group) and records steps, and sends the answers back.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, final

import attrs

from nrllm_core._config import RunConfig
from nrllm_core._invoke import (
    Admitted,
    Executed,
    aexecute,
    cancelled,
    execute,
    timed_out,
    watched,
)
from nrllm_core._loop import Ask, Effect, Record, Run, RunCancelled
from nrllm_core._loop_thread import workers
from nrllm_core._manager import PluginManager
from nrllm_core._messages import Delta
from nrllm_core._payloads import WirePayload
from nrllm_core._providers import Provider, acomplete, astream, complete, stream
from nrllm_core.log import logger

if TYPE_CHECKING:
    import concurrent.futures

    from anyio import CancelScope, CapacityLimiter

__all__ = [
    "NOBODY",
    "Cancellation",
    "Core",
    "Driver",
    "Watchers",
    "adrive",
    "advance",
    "drive",
    "in_thread",
]

T = TypeVar("T")
E = TypeVar("E")
R = TypeVar("R")


@final
@attrs.frozen(kw_only=True)
class Watchers:
    """Who watches a run live: the model's text as it streams, each call as it starts, each
    answer as it goes back to the model. ``on_delta`` set means the model is asked to stream."""

    on_delta: Callable[[Delta], None] | None = None
    on_call: Callable[[Admitted], None] | None = None
    on_wire: Callable[[WirePayload], None] | None = None
    # A running call's progress (``ToolContext.report_progress``): the call, then what it said.
    on_progress: Callable[[Admitted, float, float | None, str | None], None] | None = None


# Nobody watches the run live: the model is not asked to stream.
NOBODY: Final = Watchers()


@final
class Cancellation:
    """A run's cancellation, asked from any thread: pending calls never start, the model is
    not asked again, and an async run's scope is cancelled."""

    __slots__ = ("_event", "_lock", "_loop_call", "_scope")

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._scope: CancelScope | None = None
        self._loop_call: Callable[[Callable[[], object]], None] | None = None

    @property
    def requested(self) -> bool:
        return self._event.is_set()

    def cancel(self) -> None:
        with self._lock:
            self._event.set()
            scope, call = self._scope, self._loop_call
        if scope is not None and call is not None:
            call(scope.cancel)

    def attach(self, scope: CancelScope, on_loop: Callable[[Callable[[], object]], None]) -> None:
        """An async run's scope, and how any thread has its event loop cancel it."""
        with self._lock:
            self._scope, self._loop_call = scope, on_loop
            late = self._event.is_set()
        if late:
            scope.cancel()


@final
class Driver(Generic[E, T]):
    """Walks a generator of effects: the effect it asks for now, the answer (or exception)
    it gets, and at its end what it returned."""

    __slots__ = ("_done", "_error", "_generator", "_outcome", "_value", "awaiting")

    def __init__(self, generator: Generator[E, Any, T]) -> None:
        self._generator = generator
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = False
        self._outcome: T | None = None
        # An effect was handed out and is not answered yet.
        self.awaiting = False

    def next(self) -> E | None:
        """The next effect; ``None`` once the generator has returned."""
        value, error = self._value, self._error
        self._value, self._error, self.awaiting = None, None, False
        try:
            if error is not None:
                effect = self._generator.throw(error)
            else:
                effect = self._generator.send(value)
        except StopIteration as stop:
            self._done, self._outcome = True, stop.value
            return None
        self.awaiting = True
        return effect

    def answer(self, value: Any) -> None:
        self._value, self.awaiting = value, False

    def fail(self, error: BaseException) -> None:
        self._error, self.awaiting = error, False

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        if not self._done:
            raise RuntimeError("the generator has not returned yet")
        return self._outcome  # type: ignore[return-value]


def drive(
    core: Generator[Effect, Any, T],
    *,
    pm: PluginManager,
    provider: Provider | None,
    record: Callable[[Record], bool],
    limits: RunConfig,
    cancellation: Cancellation | None = None,
    watchers: Watchers = NOBODY,
) -> T:
    """Drive ``core`` on this thread; a turn's calls run on kept worker threads."""
    driver: Driver[Effect, T] = Driver(core)
    cancel = cancellation or Cancellation()
    on_wire = functools.partial(_notify, watchers.on_wire)
    while (effect := advance(driver, record, on_wire)) is not None:
        if cancel.requested:
            _cancelled(driver, effect)
        elif isinstance(effect, Ask):
            try:
                driver.answer(_ask(provider, effect, watchers, complete, stream))
            except Exception as exc:
                driver.fail(exc)
        else:
            driver.answer(_run_threads(pm, effect.calls, limits, cancel, watchers))
    return driver.result()


def advance(
    driver: Driver[Effect, Any],
    record: Callable[[Record], bool],
    on_wire: Callable[[WirePayload | None], None],
) -> Ask | Run | None:
    """The core's synchronous work up to its next model request or turn of calls (``None``
    once it has returned): every step it records on the way, written in order, each then
    told to ``on_wire``. Both drivers go through here; the async one in one worker-thread
    hop per stretch."""
    while (effect := driver.next()) is not None and isinstance(effect, Record):
        driver.answer(record(effect))
        on_wire(effect.wire)
    return effect


def _notify(watcher: Callable[[T], None] | None, value: T | None) -> None:
    """Tell a live watcher; one that fails is logged and never stops the run."""
    if watcher is None or value is None:
        return
    try:
        watcher(value)
    except Exception:
        logger().error("nrllm.run.watcher_failed", exc_info=True)


def _cancelled(driver: Driver[Effect, Any], effect: Effect) -> None:
    """Answer ``effect`` as a cancelled run does: no model call, no call started."""
    _interrupted(driver, effect, _Turn())


def _ask(
    provider: Provider | None,
    ask: Ask,
    watchers: Watchers,
    complete: Callable[..., R],
    stream: Callable[..., R],
) -> R:
    """The model request ``ask`` makes, for both drivers: ``stream`` when someone watches the
    text, else ``complete`` (the async driver passes their async forms and awaits what it
    gets)."""
    if provider is None:
        raise RuntimeError("this core has no model to ask")
    messages, specs = list(ask.messages), list(ask.specs)
    if watchers.on_delta is None:
        return complete(provider, messages, specs, tool_choice=ask.tool_choice, turn=ask.turn)
    return stream(
        provider,
        messages,
        specs,
        tool_choice=ask.tool_choice,
        on_delta=watchers.on_delta,
        turn=ask.turn,
    )


def _run_threads(
    pm: PluginManager,
    calls: Sequence[Admitted],
    limits: RunConfig,
    cancel: Cancellation,
    watchers: Watchers,
) -> list[Executed]:
    """The calls on kept worker threads (:func:`workers`), a turn's only call too: this
    thread waits, so that a call past its timeout is answered ``timed out`` and abandoned
    (a sync tool cannot be stopped; run here, it would hold the run). At most
    ``max_parallel_tools`` are waited for at once; an abandoned call gives up its place."""
    import concurrent.futures

    timeout = limits.tool_timeout_seconds
    pool = workers()
    queued = collections.deque(range(len(calls)))
    running: dict[int, tuple[concurrent.futures.Future[Executed], float]] = {}
    results: dict[int, Executed] = {}
    # Set for a call the turn stops waiting for (``ToolContext.abandoned``).
    abandoned: dict[int, threading.Event] = {}
    while True:
        now = time.monotonic()
        for index, (future, began) in list(running.items()):
            if future.done():
                results[index] = future.result()
            elif now - began > timeout:
                results[index] = timed_out(calls[index], timeout, now - began)
                abandoned[index].set()
            else:
                continue
            del running[index]
        if cancel.requested:
            # A call still running is abandoned, as the async driver does: its thread goes
            # on, its answer is that the run was cancelled (refused if it had not started).
            for index, (future, _) in running.items():
                results[index] = cancelled(started=not future.cancel())
                abandoned[index].set()
            results.update((index, cancelled(started=False)) for index in queued)
            break
        while queued and len(running) < limits.max_parallel_tools:
            index = queued.popleft()
            _notify(watchers.on_call, calls[index])
            abandoned[index] = threading.Event()
            admitted = _prepared(calls[index], watchers, abandoned[index])
            call = functools.partial(execute, pm, admitted, timeout)
            running[index] = (pool.submit(call, keep=limits.tool_threads), time.monotonic())
        if not running:
            break
        concurrent.futures.wait(
            [future for future, _ in running.values()],
            timeout=_POLL_SECONDS,
            return_when=concurrent.futures.FIRST_COMPLETED,
        )
    return [results[index] for index in range(len(calls))]


def _prepared(admitted: Admitted, watchers: Watchers, abandoned: threading.Event) -> Admitted:
    """``admitted`` with a context that tells the tool when the turn stops waiting for it
    (``abandoned``) and, when ``watchers`` watch progress, whose ``report_progress`` reaches
    them."""
    on_progress = watchers.on_progress
    reported = None
    if on_progress is not None:

        def reported(progress: float, total: float | None, message: str | None) -> None:
            on_progress(admitted, progress, total, message)

    return watched(admitted, reported, abandoned)


# How often a waiting turn looks at its deadlines and its cancellation.
_POLL_SECONDS = 0.02


@final
class Core(Generic[R]):
    """A loop core as the async driver walks it: each stretch of its synchronous work (every
    step it records up to its next model request or turn of calls) in one worker-thread hop,
    and in the hop where the core returns, ``then`` with its outcome (a callable that returns
    or raises it): what follows the core (a flow's settling), whose value ``adrive`` returns.
    Once the task is ``cancelled`` (seen in the thread as it happens), ``then`` waits for
    the driver: a cancelled task's flow is refused its core's outcome, the run's own
    cancellation (:class:`Cancellation`) is not.
    """

    __slots__ = (
        "_outcome",
        "_record",
        "_then",
        "cancelled",
        "done",
        "driver",
        "effect",
        "settled",
        "started",
        "value",
        "wires",
    )

    def __init__(
        self,
        core: Generator[Effect, Any, Any],
        record: Callable[[Record], bool],
        then: Callable[[Callable[[], Any]], R],
        cancelled: threading.Event | None = None,
    ) -> None:
        self.driver: Driver[Effect, Any] = Driver(core)
        self._record, self._then = record, then
        # The model request or turn of calls the core waits at; the wires of the steps
        # written since the driver last told its watchers.
        self.effect: Ask | Run | None = None
        self.wires: list[WirePayload | None] = []
        # Set once the task that drives the core is cancelled (:func:`in_thread`).
        self.cancelled = cancelled or threading.Event()
        self.started = self.done = self.settled = False
        self._outcome: Callable[[], Any] = self.driver.result
        self.value: R | None = None

    def stretch(self) -> None:
        """Go on to the core's next model request or turn of calls, or through its end."""
        self.started = True
        try:
            self.effect = advance(self.driver, self._record, self.wires.append)
        except Exception as exc:
            self.effect = None
            self._ended(functools.partial(_raise, exc))
            return
        if self.effect is None:
            self._ended(self.driver.result)

    def cancelled_stretch(self, partial: _Turn) -> None:
        """Go on to the end of a cancelled core, as the sync driver answers a cancelled run:
        the effect the cancellation interrupted (its finished calls kept), then every one
        after, each step written, no model request, no call started."""
        if not self.started:
            self.stretch()
        while not self.done:
            if self.driver.awaiting:
                _interrupted(self.driver, self.effect, partial)
            partial = _Turn()
            self.stretch()

    def settle(self) -> None:
        """``then``, unless it ran already."""
        if not self.settled:
            self.settled = True
            self.value = self._then(self._outcome)

    def _ended(self, outcome: Callable[[], Any]) -> None:
        self.done, self._outcome = True, outcome
        if not self.cancelled.is_set():
            self.settle()


def _raise(error: BaseException) -> Any:
    raise error


async def adrive(
    core: Core[R],
    *,
    pm: PluginManager,
    provider: Provider | None,
    limits: RunConfig,
    limiter: CapacityLimiter,
    cancellation: Cancellation | None = None,
    watchers: Watchers = NOBODY,
) -> R:
    """Drive ``core`` on the running event loop (from where it stands: its first stretch may
    be walked already); a turn's calls run in a task group, the core's synchronous work in
    worker threads, a hop per stretch (:func:`in_thread`).

    A cancelled task (or ``cancellation``) stops the calls still running and never starts
    the others; the loop then records what happened, shielded, and ends ``cancelled``. When
    the cancellation came from outside, it is raised again after that.
    """
    import anyio
    import anyio.lowlevel

    cancel = cancellation or Cancellation()
    partial = _Turn()
    with anyio.CancelScope() as scope:
        cancel.attach(scope, _loop_caller())
        try:
            if core.started:
                # The steps of the first stretch, which the caller walked.
                _told(core, watchers)
            else:
                await _stretched(core, core.stretch, watchers)
            while (effect := core.effect) is not None and not core.done:
                partial = _Turn()
                # A cancellation that landed while steps were written stops the run here, as
                # the sync driver's check does: the model is not asked, no call starts.
                await anyio.lowlevel.checkpoint_if_cancelled()
                await _aeffect(
                    core.driver, effect, pm, provider, limits, limiter, watchers, partial
                )
                await _stretched(core, core.stretch, watchers)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await _stretched(core, functools.partial(core.cancelled_stretch, partial), watchers)
            raise
    if not core.settled:
        # The run's own cancellation ended the core: what follows takes its outcome.
        await in_thread(core.settle)
    return core.value  # type: ignore[return-value]


async def _stretched(core: Core[Any], stretch: Callable[[], None], watchers: Watchers) -> None:
    """``stretch`` in a worker thread, then the watchers told of the steps it wrote, as the
    sync driver tells them of every step (a cancelled run's included)."""
    try:
        await in_thread(stretch, cancelled=core.cancelled)
    finally:
        _told(core, watchers)


def _told(core: Core[Any], watchers: Watchers) -> None:
    wires, core.wires = core.wires, []
    for wire in wires:
        _notify(watchers.on_wire, wire)


def _loop_caller() -> Callable[[Callable[[], object]], None]:
    """How any thread has the running event loop call a function, whatever its anyio backend:
    its own thread calls it there and then, another waits until the loop has called it."""
    import anyio
    import anyio.from_thread
    import anyio.lowlevel

    token = anyio.lowlevel.current_token()
    loop_thread = threading.get_ident()

    def call(function: Callable[[], object]) -> None:
        if threading.get_ident() == loop_thread:
            function()
            return
        # A loop that ended has no run left to cancel.
        with contextlib.suppress(anyio.RunFinishedError):
            anyio.from_thread.run_sync(function, token=token)

    return call


def _interrupted(driver: Driver[Effect, Any], effect: Effect | None, partial: _Turn) -> None:
    """Answer the effect a cancellation interrupted: the calls that finished keep their
    results, the others are answered as cancelled."""
    if isinstance(effect, Ask):
        driver.fail(RunCancelled())
    elif isinstance(effect, Run):
        driver.answer(partial.answers(len(effect.calls)))


async def _aeffect(
    driver: Driver[Effect, Any],
    effect: Ask | Run,
    pm: PluginManager,
    provider: Provider | None,
    limits: RunConfig,
    limiter: CapacityLimiter,
    watchers: Watchers,
    partial: _Turn,
) -> None:
    if isinstance(effect, Ask):
        try:
            driver.answer(await _ask(provider, effect, watchers, acomplete, astream))
        except Exception as exc:
            driver.fail(exc)
    else:
        await _run_tasks(pm, effect.calls, limits, limiter, watchers, partial)
        driver.answer(partial.answers(len(effect.calls)))


async def in_thread(function: Callable[[], T], *, cancelled: threading.Event | None = None) -> T:
    """``function()`` in a worker thread that no cancellation abandons; ``cancelled`` is set
    as soon as one arrives, for a ``function`` that stops early then.

    A cancellation (an anyio scope, or asyncio's own ``Task.cancel``, which goes through any
    shield) keeps a ``function`` that has not started from starting, and waits, shielded, for
    one that has to return before it goes on: what the thread holds (the flow, a step's
    write) is never driven again while the thread is still inside it.
    """
    import anyio
    import anyio.to_thread

    entry = _Entry()
    try:
        return await anyio.to_thread.run_sync(entry.run, function, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        entry.refused = True
        if cancelled is not None:
            cancelled.set()
        with anyio.CancelScope(shield=True):
            while True:
                try:
                    await anyio.to_thread.run_sync(entry.wait)
                    break
                except anyio.get_cancelled_exc_class():
                    # Task.cancel again: the thread is still inside.
                    continue
        raise


@final
class _Entry:
    """One call into a worker thread: it starts unless refused first, and holds ``_inside``
    while it runs, so that whoever refused it can wait for it to leave."""

    __slots__ = ("_inside", "refused")

    def __init__(self) -> None:
        self._inside = threading.Lock()
        self.refused = False

    def run(self, function: Callable[[], T]) -> T:
        with self._inside:
            if self.refused:
                # The task that asked is gone; nothing reads this.
                raise RunCancelled
            return function()

    def wait(self) -> None:
        """Return once no call is inside (one refused first never enters)."""
        with self._inside:
            pass


@attrs.define
class _Turn:
    """What an async turn's calls did so far: a cancellation reads it."""

    results: dict[int, Executed] = attrs.field(factory=dict)
    started: set[int] = attrs.field(factory=set)

    def answers(self, count: int) -> list[Executed]:
        """One answer per call: its result, else cancelled (while it ran, or before)."""
        return [
            self.results.get(index) or cancelled(started=index in self.started)
            for index in range(count)
        ]


async def _run_tasks(
    pm: PluginManager,
    calls: Sequence[Admitted],
    limits: RunConfig,
    limiter: CapacityLimiter,
    watchers: Watchers,
    turn: _Turn,
) -> None:
    """Every call in one task group, at most ``max_parallel_tools`` at once, each within its
    timeout; ``turn`` learns each call's start and result as they happen."""
    import anyio

    results = turn.results
    slots = anyio.CapacityLimiter(limits.max_parallel_tools)
    timeout = limits.tool_timeout_seconds

    async def one(index: int, admitted: Admitted) -> None:
        async with slots:
            turn.started.add(index)
            _notify(watchers.on_call, admitted)
            began = time.perf_counter()
            abandoned = threading.Event()
            try:
                with anyio.move_on_after(timeout) as deadline:
                    prepared = _prepared(admitted, watchers, abandoned)
                    results[index] = await aexecute(pm, prepared, limiter)
                if deadline.cancelled_caught:
                    results[index] = timed_out(admitted, timeout, time.perf_counter() - began)
            finally:
                # Answered, timed out or cancelled: nothing waits for the call any more (a
                # sync tool's thread may still run).
                abandoned.set()

    async with anyio.create_task_group() as group:
        for index, admitted in enumerate(calls):
            group.start_soon(one, index, admitted)

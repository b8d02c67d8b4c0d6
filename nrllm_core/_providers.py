"""Model provider kinds, registered by plugins through ``nrllm_register_providers``."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, final, runtime_checkable

import attrs

from nrllm_core._messages import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    RunTurn,
    TextDelta,
    ToolChoice,
    ToolSpec,
)
from nrllm_core.log import logger

__all__ = [
    "Provider",
    "ProviderCheck",
    "ProviderConfigError",
    "ProviderEndpoint",
    "ProviderFactory",
    "ProviderKind",
    "ProviderRegistry",
    "ToolCheck",
    "aclosed",
    "acomplete",
    "astream",
    "build_provider",
    "closed",
    "complete",
    "stream",
]


@runtime_checkable
class Provider(Protocol):
    """A model endpoint the loop talks to.

    Only ``complete`` is required. A provider may also offer, each taking ``tool_choice``
    as a keyword and raising :class:`ProviderError` as ``complete`` does:

    - ``async def acomplete(messages, tools, *, tool_choice="auto") -> ProviderAnswer``, the
      same call on the running event loop;
    - ``def stream(messages, tools, *, tool_choice="auto", on_delta) -> ProviderAnswer``, which
      calls ``on_delta`` with each :class:`TextDelta` and :class:`ThinkingDelta` as the text
      arrives (and :class:`StreamRestarted` before a broken stream is asked for again), then
      returns the whole answer, the same as ``complete`` would for that response;
    - ``async def astream(messages, tools, *, tool_choice="auto", on_delta)``, the same on the
      event loop.

    :func:`acomplete`, :func:`stream` and :func:`astream` call them, or stand in for a provider
    that lacks them.

    A provider that holds connections may also have ``close()`` and ``async def aclose()``:
    the host builds a provider for each run (each segment of a suspended one) and closes it
    when that ends (:func:`closing`, :func:`aclosing`).
    """

    def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]
    ) -> ProviderAnswer:
        """One model call. An empty ``tools`` asks for a plain completion: no tools field is
        sent at all. Raises :class:`ProviderError` with a message that is safe to show.

        A provider may also take a keyword ``tool_choice`` (``"auto"`` by default): the loop
        passes ``tool_choice="none"`` on the last round, with the tools still declared, and
        the provider then asks its model for text only. See :func:`complete`.
        """
        ...


def complete(
    provider: Provider,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    tool_choice: ToolChoice = "auto",
    turn: RunTurn | None = None,
) -> ProviderAnswer:
    """One call of ``provider.complete`` with ``tool_choice``, and ``turn`` when its
    ``complete`` takes that keyword.

    ``auto`` is never passed, so every provider is called as the protocol always allowed. A
    provider whose ``complete`` takes no ``tool_choice`` keyword is asked for text only the
    way it understands: with no tools.
    """
    told = _told(provider.complete, turn)
    if tool_choice == "auto":
        return provider.complete(messages, tools, **told)
    if _takes(provider.complete, "tool_choice"):
        answer: ProviderAnswer = provider.complete(  # type: ignore[call-arg]
            messages, tools, tool_choice=tool_choice, **told
        )
        return answer
    return provider.complete(messages, [], **told)


async def acomplete(
    provider: Provider,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    tool_choice: ToolChoice = "auto",
    turn: RunTurn | None = None,
) -> ProviderAnswer:
    """``await provider.acomplete(...)``, or :func:`complete` in a worker thread for a provider
    that has no ``acomplete``."""
    method = getattr(provider, "acomplete", None)
    if callable(method):
        told = _told(method, turn)
        answer: ProviderAnswer = await method(messages, tools, tool_choice=tool_choice, **told)
        return answer
    import anyio.to_thread

    call = functools.partial(
        complete, provider, messages, tools, tool_choice=tool_choice, turn=turn
    )
    # A cancelled run does not wait for the answer: the thread (which holds nothing of the
    # run) goes on by itself and what it returns is dropped, as an async request is cancelled.
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)


def stream(
    provider: Provider,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    tool_choice: ToolChoice = "auto",
    on_delta: Callable[[Delta], None],
    turn: RunTurn | None = None,
) -> ProviderAnswer:
    """``provider.stream(...)``, or for a provider that does not stream, :func:`complete` and
    then its whole text as one :class:`TextDelta`."""
    method = getattr(provider, "stream", None)
    if callable(method):
        told = _told(method, turn)
        answer: ProviderAnswer = method(
            messages, tools, tool_choice=tool_choice, on_delta=on_delta, **told
        )
        return answer
    whole = complete(provider, messages, tools, tool_choice=tool_choice, turn=turn)
    return _whole(whole, on_delta)


async def astream(
    provider: Provider,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    tool_choice: ToolChoice = "auto",
    on_delta: Callable[[Delta], None],
    turn: RunTurn | None = None,
) -> ProviderAnswer:
    """``await provider.astream(...)``; else the provider's sync ``stream`` in a worker thread,
    its deltas handed to ``on_delta`` on the event loop's thread; else :func:`acomplete` and
    then the whole text as one :class:`TextDelta`."""
    method = getattr(provider, "astream", None)
    if callable(method):
        answer: ProviderAnswer = await method(
            messages, tools, tool_choice=tool_choice, on_delta=on_delta, **_told(method, turn)
        )
        return answer
    sync = getattr(provider, "stream", None)
    if not callable(sync):
        whole = await acomplete(provider, messages, tools, tool_choice=tool_choice, turn=turn)
        return _whole(whole, on_delta)
    import anyio.from_thread
    import anyio.to_thread

    def relay(delta: Delta) -> None:
        anyio.from_thread.run_sync(on_delta, delta)

    call = functools.partial(
        sync, messages, tools, tool_choice=tool_choice, on_delta=relay, **_told(sync, turn)
    )
    streamed: ProviderAnswer = await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    return streamed


def closed(provider: Provider | None) -> None:
    """``provider.close()`` when the provider has one."""
    close = getattr(provider, "close", None)
    if callable(close):
        _closed(close)


async def aclosed(provider: Provider | None) -> None:
    """``await provider.aclose()``, else ``provider.close()`` in a worker thread, when the
    provider has one; shielded, so that a cancelled run closes it too."""
    import anyio
    import anyio.to_thread

    aclose = getattr(provider, "aclose", None)
    close = getattr(provider, "close", None)
    with anyio.CancelScope(shield=True):
        if callable(aclose):
            await _aclosed(aclose)
        elif callable(close):
            await anyio.to_thread.run_sync(_closed, close)


def _closed(close: Callable[[], object]) -> None:
    # The run is over whatever a plugin's close raises; its text may quote its settings.
    try:
        close()
    except Exception as exc:
        logger().warning("nrllm.provider.close_failed", error=type(exc).__name__)


async def _aclosed(aclose: Callable[[], Any]) -> None:
    try:
        await aclose()
    except Exception as exc:
        logger().warning("nrllm.provider.close_failed", error=type(exc).__name__)


def _whole(answer: ProviderAnswer, on_delta: Callable[[Delta], None]) -> ProviderAnswer:
    if answer.content:
        on_delta(TextDelta(text=answer.content))
    return answer


def _told(method: Callable[..., Any], turn: RunTurn | None) -> dict[str, RunTurn]:
    """``turn`` as a keyword for ``method``, when there is one and the method takes it."""
    return {} if turn is None or not _takes(method, "turn") else {"turn": turn}


def _takes(method: Callable[..., Any], keyword: str) -> bool:
    """Whether ``method`` (a provider's) takes ``keyword``; read once per function."""
    return _function_takes(getattr(method, "__func__", method), keyword)


@functools.lru_cache(maxsize=512)
def _function_takes(function: Callable[..., Any], keyword: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is p.VAR_KEYWORD or (p.name == keyword and p.kind is not p.POSITIONAL_ONLY)
        for p in parameters
    )


class ProviderFactory(Protocol):
    """Builds a provider from its ``[providers.NAME]`` section."""

    def __call__(
        self,
        name: str,
        settings: Mapping[str, Any],
        *,
        config_dir: Path | None,
        environ: Mapping[str, str],
    ) -> Provider: ...


class ProviderCheck(Protocol):
    """What a kind refuses in a section of its own before any request, at every load of the
    configuration (so at ``nrllm config check`` too): ``(key, problem)`` pairs, ``key`` the
    setting's path inside the section (``"params.thinking.budget_tokens"``, ``""`` for the
    section as a whole). ``settings`` is the section as the factory gets it. It must not read
    the environment or reach the network; one that raises refuses the section."""

    def __call__(
        self, name: str, settings: Mapping[str, Any], *, config_dir: Path | None
    ) -> Iterable[tuple[str, str]]: ...


class ToolCheck(Protocol):
    """What a kind's API cannot take of a tool it would be offered (a keyword of its schema
    the API does not express, a name it refuses), said as a short phrase naming the keyword
    and its path; ``None`` when it can take the tool. The gate withholds such a tool from the
    kind's runs (``schemaUnsupported``) instead of sending it changed. It must not raise."""

    def __call__(self, tool: ToolSpec) -> str | None: ...


class ProviderEndpoint(Protocol):
    """Where a kind's section sends its requests and what it reads from the environment, for
    ``nrllm config check`` to print: the URL, and each environment variable's name with what
    its value is sent as (a header's name). It must not read the environment or reach the
    network."""

    def __call__(
        self, name: str, settings: Mapping[str, Any]
    ) -> tuple[str, tuple[tuple[str, str], ...]]: ...


class ProviderConfigError(ProviderError):
    """A provider section cannot be turned into a provider."""


@final
@attrs.frozen(kw_only=True)
class ProviderKind:
    """A registered kind: its factory, the :class:`ProviderCheck` of its sections, the
    attrs class of the settings of its own (the keys a ``[providers.NAME]`` section of this
    kind takes beyond core's), its :class:`ToolCheck` and its :class:`ProviderEndpoint`."""

    factory: ProviderFactory
    check: ProviderCheck | None = None
    settings: type[Any] | None = None
    tools: ToolCheck | None = None
    endpoint: ProviderEndpoint | None = None


@final
class ProviderRegistry:
    """Collects provider kinds by name: each one's factory, check and settings class."""

    __slots__ = ("_kinds",)

    def __init__(self) -> None:
        self._kinds: dict[str, ProviderKind] = {}

    def register(
        self,
        kind: str,
        factory: ProviderFactory,
        *,
        check: ProviderCheck | None = None,
        settings: type[Any] | None = None,
        tools: ToolCheck | None = None,
        endpoint: ProviderEndpoint | None = None,
    ) -> None:
        """Register ``factory`` for ``kind = "<kind>"`` in a provider section, once per kind,
        with the :class:`ProviderCheck` its sections must pass, the attrs class of the
        settings of its own (``region``, say): a section of this kind takes those keys beyond
        core's, checked and structured into an instance of the class (the factory gets it as
        ``settings["options"]``), the :class:`ToolCheck` of the tools its runs are
        offered, and the :class:`ProviderEndpoint` that ``nrllm config check`` prints."""
        if not isinstance(kind, str) or not kind:
            raise ValueError("a provider kind is a non-empty string")
        if not callable(factory):
            raise TypeError(f"the factory for provider kind {kind!r} is not callable")
        if check is not None and not callable(check):
            raise TypeError(f"the check for provider kind {kind!r} is not callable")
        if settings is not None and not (isinstance(settings, type) and attrs.has(settings)):
            raise TypeError(f"the settings of provider kind {kind!r} are not an attrs class")
        if tools is not None and not callable(tools):
            raise TypeError(f"the tool check for provider kind {kind!r} is not callable")
        if endpoint is not None and not callable(endpoint):
            raise TypeError(f"the endpoint of provider kind {kind!r} is not callable")
        if kind in self._kinds:
            raise ValueError(f"provider kind {kind!r} is already registered")
        self._kinds[kind] = ProviderKind(
            factory=factory, check=check, settings=settings, tools=tools, endpoint=endpoint
        )

    def get(self, kind: str) -> ProviderFactory | None:
        found = self._kinds.get(kind)
        return None if found is None else found.factory

    def kind(self, kind: str) -> ProviderKind | None:
        """All that ``kind`` registered, if it did."""
        return self._kinds.get(kind)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted(self._kinds))

    @property
    def registered(self) -> Mapping[str, ProviderKind]:
        """Each kind with what it registered: what the configuration's load is given."""
        return {name: self._kinds[name] for name in self.kinds}


def build_provider(
    registry: ProviderRegistry,
    name: str,
    settings: Mapping[str, Any],
    *,
    config_dir: Path | None,
    environ: Mapping[str, str],
) -> Provider:
    """The provider that ``settings["kind"]``'s factory builds for the section ``name``."""
    known = ", ".join(registry.kinds) or "none"
    kind = settings.get("kind")
    if not isinstance(kind, str) or not kind:
        raise ProviderConfigError(f'provider "{name}" has no kind; known kinds: {known}')
    factory = registry.get(kind)
    if factory is None:
        raise ProviderConfigError(
            f'provider "{name}" has the unknown kind "{kind}"; known kinds: {known}'
        )
    try:
        provider = factory(name, settings, config_dir=config_dir, environ=environ)
    except ProviderError:
        raise
    except Exception as exc:
        # A plugin's exception text may quote its settings, keys included: only the type shows.
        logger().error(
            "nrllm.provider.build_failed", provider=name, kind=kind, error=type(exc).__name__
        )
        raise ProviderConfigError(
            f'provider "{name}" (kind "{kind}") could not be built: {type(exc).__name__}'
        ) from exc
    if not isinstance(provider, Provider):
        raise ProviderConfigError(
            f'provider "{name}" (kind "{kind}"): the factory returned no provider'
        )
    return provider

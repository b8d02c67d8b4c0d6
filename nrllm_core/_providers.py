"""Model provider kinds, registered by plugins through ``nrllm_register_providers``."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, final, runtime_checkable

from nrllm_core._messages import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    TextDelta,
    ToolChoice,
    ToolSpec,
)
from nrllm_core.log import logger

__all__ = [
    "Provider",
    "ProviderConfigError",
    "ProviderFactory",
    "ProviderRegistry",
    "acomplete",
    "astream",
    "build_provider",
    "complete",
    "stream",
]


@runtime_checkable
class Provider(Protocol):
    """A model endpoint the loop talks to."""

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
) -> ProviderAnswer:
    """One call of ``provider.complete`` with ``tool_choice``.

    ``auto`` is never passed, so every provider is called as the protocol always allowed. A
    provider whose ``complete`` takes no ``tool_choice`` keyword is asked for text only the
    way it understands: with no tools.
    """
    if tool_choice == "auto":
        return provider.complete(messages, tools)
    if _takes_tool_choice(provider):
        answer: ProviderAnswer = provider.complete(  # type: ignore[call-arg]
            messages, tools, tool_choice=tool_choice
        )
        return answer
    return provider.complete(messages, [])


async def acomplete(
    provider: Provider,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    tool_choice: ToolChoice = "auto",
) -> ProviderAnswer:
    """The provider's own ``acomplete``, else its ``complete`` in a worker thread."""
    own = getattr(provider, "acomplete", None)
    if own is not None:
        answer: ProviderAnswer = await own(messages, tools, tool_choice=tool_choice)
        return answer
    import anyio.to_thread

    return await anyio.to_thread.run_sync(
        lambda: complete(provider, messages, tools, tool_choice=tool_choice)
    )


def stream(
    provider: Provider,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    tool_choice: ToolChoice = "auto",
    on_delta: Callable[[Delta], None],
) -> ProviderAnswer:
    """The provider's own ``stream``, else ``complete`` and its text as one delta."""
    own = getattr(provider, "stream", None)
    if own is not None:
        answer: ProviderAnswer = own(messages, tools, tool_choice=tool_choice, on_delta=on_delta)
        return answer
    answer = complete(provider, messages, tools, tool_choice=tool_choice)
    if answer.content:
        on_delta(TextDelta(text=answer.content))
    return answer


async def astream(
    provider: Provider,
    messages: Sequence[ChatMessage],
    tools: Sequence[ToolSpec],
    *,
    tool_choice: ToolChoice = "auto",
    on_delta: Callable[[Delta], None],
) -> ProviderAnswer:
    """The provider's own ``astream``, else ``acomplete`` and its text as one delta."""
    own = getattr(provider, "astream", None)
    if own is not None:
        answer: ProviderAnswer = await own(
            messages, tools, tool_choice=tool_choice, on_delta=on_delta
        )
        return answer
    answer = await acomplete(provider, messages, tools, tool_choice=tool_choice)
    if answer.content:
        on_delta(TextDelta(text=answer.content))
    return answer


def _takes_tool_choice(provider: Provider) -> bool:
    try:
        parameters = inspect.signature(provider.complete).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(
        p.kind is p.VAR_KEYWORD or (p.name == "tool_choice" and p.kind is not p.POSITIONAL_ONLY)
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


class ProviderConfigError(ProviderError):
    """A provider section cannot be turned into a provider."""


@final
class ProviderRegistry:
    """Collects provider factories by kind name."""

    __slots__ = ("_factories",)

    def __init__(self) -> None:
        self._factories: dict[str, ProviderFactory] = {}

    def register(self, kind: str, factory: ProviderFactory) -> None:
        """Register ``factory`` for ``kind = "<kind>"`` in a provider section, once per kind."""
        if not isinstance(kind, str) or not kind:
            raise ValueError("a provider kind is a non-empty string")
        if not callable(factory):
            raise TypeError(f"the factory for provider kind {kind!r} is not callable")
        if kind in self._factories:
            raise ValueError(f"provider kind {kind!r} is already registered")
        self._factories[kind] = factory

    def get(self, kind: str) -> ProviderFactory | None:
        return self._factories.get(kind)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(sorted(self._factories))


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

"""What the HTTP provider kinds share: one JSON model API called whole or streamed, sync or
async, every answer parsed by one function, over clients kept for the provider's life."""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from functools import partial as partial
from pathlib import Path
from typing import Any, ClassVar

from nrllm_core._messages import (
    ChatMessage,
    Delta,
    ProviderAnswer,
    ProviderError,
    ToolChoice,
    ToolSpec,
)
from nrllm_core.providers._http import (
    Clients,
    Framing,
    HttpSettings,
    StreamAssembler,
    apost_json,
    apost_stream,
    post_json,
    post_stream,
)
from nrllm_core.providers._sse import SseParser

__all__ = ["HttpProvider"]


class HttpProvider(abc.ABC):
    """A provider kind over HTTP: its ``request_body``, sent as it is or with
    ``STREAM_FIELDS`` added, and ``_parse`` of the answer, whole or as its ``_assembler``
    builds it from the stream, so that both mean the same.

    Its requests go through one sync and one async client (:class:`Clients`), kept until
    ``close`` or ``aclose``: the host that built the provider for a run calls them when the run
    ends."""

    __slots__ = ("_clients", "_http", "_stream_http", "model", "name")

    # The kind's name, which tags what its answers ask to have replayed (see ``origin``).
    KIND: ClassVar[str]

    def __init__(
        self,
        *,
        name: str,
        model: str,
        http: HttpSettings,
        stream_http: HttpSettings | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self._http = http
        # An API that streams on a URL of its own (Gemini's :streamGenerateContent) says so.
        self._stream_http = http if stream_http is None else stream_http
        self._clients = Clients(timeout=http.timeout)

    @classmethod
    @abc.abstractmethod
    def from_settings(
        cls, name: str, settings: Mapping[str, Any], *, environ: Mapping[str, str]
    ) -> HttpProvider:
        """The provider of the section ``settings`` (named ``name``), its key read from the
        variable the section names in ``environ``."""

    @classmethod
    def factory(
        cls,
        name: str,
        settings: Mapping[str, Any],
        *,
        config_dir: Path | None,
        environ: Mapping[str, str],
    ) -> HttpProvider:
        """The kind's factory, as ``ProviderRegistry.register`` takes it."""
        return cls.from_settings(name, settings, environ=environ)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, model={self.model!r})"

    @property
    def origin(self) -> str:
        """Who may be sent this adapter's replayed blocks: itself, with the same model."""
        return f"{self.KIND}:{self.name}:{self.model}"

    # What a request adds to ask for a stream.
    STREAM_FIELDS: ClassVar[Mapping[str, Any]]
    # How a streamed answer's body is cut into events: server-sent events unless the API
    # frames its stream otherwise (AWS event streams).
    FRAMING: ClassVar[type[Framing]] = SseParser

    @abc.abstractmethod
    def request_body(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> dict[str, Any]:
        """The JSON request."""

    @abc.abstractmethod
    def _parse(self, data: Any) -> ProviderAnswer: ...

    @abc.abstractmethod
    def _assembler(self, on_delta: Callable[[Delta], None]) -> StreamAssembler: ...

    def _parsed(self, data: Any) -> ProviderAnswer:
        """``_parse``, failing only as the provider does: an answer is hostile, and whatever
        an adapter's reading of it trips over (a list where a name was, nesting no encoder
        takes) fails the call with a ``ProviderError``, never the run with another error."""
        try:
            return self._parse(data)
        except ProviderError:
            raise
        except (TypeError, ValueError, LookupError, AttributeError, RecursionError) as exc:
            raise ProviderError(
                f'provider "{self.name}" sent an answer it cannot read ({type(exc).__name__})'
            ) from None

    def complete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> ProviderAnswer:
        body = self.request_body(messages, tools, tool_choice=tool_choice)
        return self._parsed(post_json(self._clients, self._http, body))

    async def acomplete(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
    ) -> ProviderAnswer:
        body = self.request_body(messages, tools, tool_choice=tool_choice)
        return self._parsed(await apost_json(self._clients, self._http, body))

    def stream(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
        on_delta: Callable[[Delta], None],
    ) -> ProviderAnswer:
        body = {**self.request_body(messages, tools, tool_choice=tool_choice), **self.STREAM_FIELDS}
        assembler = partial(self._assembler, on_delta)
        answer = post_stream(
            self._clients,
            self._stream_http,
            body,
            assembler,
            on_delta=on_delta,
            framing=self.FRAMING,
        )
        return self._parsed(answer)

    async def astream(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice = "auto",
        on_delta: Callable[[Delta], None],
    ) -> ProviderAnswer:
        body = {**self.request_body(messages, tools, tool_choice=tool_choice), **self.STREAM_FIELDS}
        assembler = partial(self._assembler, on_delta)
        return self._parsed(
            await apost_stream(
                self._clients,
                self._stream_http,
                body,
                assembler,
                on_delta=on_delta,
                framing=self.FRAMING,
            )
        )

    def close(self) -> None:
        """Close the sync client's connections."""
        self._clients.close()

    async def aclose(self) -> None:
        """Close the connections of both clients (on the event loop of the async one)."""
        await self._clients.aclose()

"""The default transport of :func:`nrllm_core.net.fetch_public`: httpcore under one deadline.

httpx's timeouts bound each connect, read and write on its own, so a server that drips one byte
just inside the read timeout could hold a fetch open for ever. This transport hands httpcore a
network backend whose streams give every socket operation only what is left of one total
deadline. It is imported by ``fetch_public`` only, so ``import nrllm_core`` never loads httpx.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from typing import Any, final

import httpcore
import httpx

__all__ = ["DeadlineTransport"]


def _budget(deadline: float, timeout: float | None) -> float:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise httpcore.ReadTimeout("deadline passed")
    return remaining if timeout is None else min(timeout, remaining)


@final
class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _budget(self._deadline, timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _budget(self._deadline, timeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: Any,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        tls = self._inner.start_tls(ssl_context, server_hostname, _budget(self._deadline, timeout))
        return _DeadlineStream(tls, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


@final
class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, deadline: float) -> None:
        self._inner = httpcore.SyncBackend()
        self._deadline = deadline

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(
            host, port, _budget(self._deadline, timeout), local_address, socket_options
        )
        return _DeadlineStream(stream, self._deadline)


def _translate(error: Exception, request: httpx.Request) -> httpx.TransportError:
    # The message stays generic: httpcore's text can name the host or the address.
    if isinstance(error, httpcore.TimeoutException):
        return httpx.TimeoutException("timed out", request=request)
    return httpx.TransportError("transport failed", request=request)


_CORE_ERRORS = (
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.UnsupportedProtocol,
    httpcore.ConnectionNotAvailable,
)


@final
class _Body(httpx.SyncByteStream):
    def __init__(self, chunks: Iterable[bytes], request: httpx.Request) -> None:
        self._chunks = chunks
        self._request = request

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._chunks
        except _CORE_ERRORS as error:
            raise _translate(error, self._request) from None

    def close(self) -> None:
        close = getattr(self._chunks, "close", None)
        if close is not None:
            close()


@final
class DeadlineTransport(httpx.BaseTransport):
    """HTTP/1.1 over httpcore, certificates verified, every socket operation within ``deadline``
    (a ``time.monotonic()`` value); no proxy and no environment settings are ever consulted."""

    def __init__(self, *, deadline: float) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=1,
            retries=0,
            network_backend=_DeadlineBackend(deadline),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request.stream, httpx.SyncByteStream):
            raise TypeError("DeadlineTransport sends synchronous requests only")
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        try:
            response = self._pool.handle_request(core_request)
        except _CORE_ERRORS as error:
            raise _translate(error, request) from None
        if not isinstance(response.stream, Iterable):
            raise TypeError("httpcore answered with an asynchronous body")
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream, request),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()

"""POSTs to a model API, answered whole or streamed, sync or async, with bounded retries; every
failure a safe ``ProviderError``.

What to do after a failed attempt (``_Attempts``) and how an answer's bytes are read
(``_JsonReader``, ``_StreamReader``) are decided without I/O; a sync driver (httpx.Client and
``HttpSettings.sleep``) and an async one (httpx.AsyncClient and ``HttpSettings.asleep``) only
move the bytes and wait, through the clients a provider keeps (``Clients``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from nrllm_core import _json
from nrllm_core._messages import TOKENS_MAX, Delta, ProviderError, StreamRestarted
from nrllm_core.log import logger
from nrllm_core.providers._excerpt import SCAN_MAX_CHARS, excerpt
from nrllm_core.providers._retry import RETRY_AFTER_CAP_SECONDS, retried, retry_after
from nrllm_core.providers._settings import Settings
from nrllm_core.providers._sse import SseParser

if TYPE_CHECKING:
    import httpx

__all__ = [
    "ANSWER_MAX_BYTES",
    "BACKOFF_CAP_SECONDS",
    "RETRY_AFTER_CAP_SECONDS",
    "Clients",
    "Framing",
    "HttpSettings",
    "StreamAssembler",
    "StreamBroken",
    "StreamFailed",
    "apost_json",
    "apost_stream",
    "post_json",
    "post_stream",
    "response_id",
    "response_model",
]

BACKOFF_BASE_SECONDS: Final = 0.5
BACKOFF_CAP_SECONDS: Final = 8.0
# An answer, whole or streamed, is read up to this size and refused beyond it.
ANSWER_MAX_BYTES: Final = 16 * 1024 * 1024
# Only this much of an error body is ever read (see ``_excerpt``).
_ERROR_READ_BYTES: Final = SCAN_MAX_CHARS * 4
# What a stream may send after its final event and still have its connection kept.
_TRAILER_MAX_BYTES: Final = 4096


@final
class HttpSettings:
    """Where and how to POST; the key is held here and never shown.

    ``sleep`` waits between attempts of the sync calls, ``asleep`` of the async ones
    (``anyio.sleep`` when not given). ``sign``, when given, adds headers computed from each
    attempt's URL and body (AWS SigV4 signs both, and its signature carries the time, so it
    is made again for every attempt).
    """

    __slots__ = (
        "asleep",
        "headers",
        "max_retries",
        "provider",
        "secrets",
        "sign",
        "sleep",
        "timeout",
        "url",
    )

    def __init__(
        self,
        *,
        provider: str,
        url: str,
        headers: Mapping[str, str],
        secrets: tuple[str, ...],
        timeout: float,
        max_retries: int,
        sleep: Callable[[float], None] = time.sleep,
        asleep: Callable[[float], Awaitable[None]] | None = None,
        sign: Callable[[str, bytes], Mapping[str, str]] | None = None,
    ) -> None:
        self.provider = provider
        self.url = url
        self.headers = dict(headers)
        self.secrets = secrets
        self.timeout = timeout
        self.max_retries = max_retries
        self.sleep = sleep
        self.asleep = asleep
        self.sign = sign

    def __repr__(self) -> str:
        from nrllm_core.net import redact_url

        # A base URL may hold a password (``user:pass@``) or a key in its query.
        shown = redact_url(self.url) or "(URL not shown)"
        return f"HttpSettings(provider={self.provider!r}, url={shown!r})"


def request_url(
    read: Settings, *, path: str, default_base_url: str, query: Mapping[str, str] | None = None
) -> str:
    """``{base_url}{path}``, with ``query`` URL-encoded after a ``?`` when there is one."""
    url = read.text("base_url", default_base_url).rstrip("/") + path
    if not query:
        return url
    from urllib.parse import quote, urlencode

    return f"{url}?{urlencode(query, quote_via=quote)}"


def http_settings(
    read: Settings,
    *,
    path: str,
    default_base_url: str,
    headers: Mapping[str, str],
    secrets: tuple[str, ...],
    sleep: Callable[[float], None],
    asleep: Callable[[float], Awaitable[None]] | None,
    query: Mapping[str, str] | None = None,
) -> HttpSettings:
    """The POST target and limits every HTTP provider kind reads the same way from its section:
    ``base_url`` (+ ``path`` and ``query``, see :func:`request_url`), ``timeout_seconds`` (60)
    and ``max_retries`` (2)."""
    return HttpSettings(
        provider=read.name,
        url=request_url(read, path=path, default_base_url=default_base_url, query=query),
        headers=headers,
        secrets=secrets,
        timeout=read.seconds("timeout_seconds", 60.0),
        max_retries=read.count("max_retries", 2),
        sleep=sleep,
        asleep=asleep,
    )


@final
class Clients:
    """The httpx clients one provider sends through, each made on its first request and kept
    for the provider's life, so that its requests reuse their connections (no new TCP and TLS
    handshake per model turn).

    One ``httpx.Client`` serves every thread (httpx's clients are safe to share between
    threads). An ``httpx.AsyncClient``'s connections belong to the event loop that opened them,
    so the async client is kept for one loop: a request on another loop (a second
    ``anyio.run``) gets a new client and never touches the old one's connections. Each async
    client is closed on its own loop when that loop ends, however its provider was left (see
    :func:`_closed_with_its_loop`).

    ``close`` closes the sync client and ``aclose``, on the async client's loop, both;
    a client still open when its ``Clients`` is collected is closed then if it is the sync one
    (closing needs no event loop). A request after closing opens a new client.
    """

    __slots__ = ("__weakref__", "_async", "_lock", "_sync", "_timeout")

    def __init__(self, *, timeout: float) -> None:
        self._timeout = timeout
        self._lock = threading.Lock()
        # A one-item list the finalizer holds, so that it closes whichever client is open.
        self._sync: list[httpx.Client] = []
        # The loop, its client, and what closes that client when the loop ends.
        self._async: tuple[object, httpx.AsyncClient, AsyncGenerator[None, None]] | None = None
        weakref.finalize(self, _close_all, self._sync)

    def client(self) -> httpx.Client:
        """The sync client, opened on first use."""
        import httpx

        with self._lock:
            if not self._sync:
                self._sync.append(httpx.Client(timeout=self._timeout))
            return self._sync[0]

    async def aclient(self) -> httpx.AsyncClient:
        """The async client of the running event loop, opened on its first use there."""
        import anyio.lowlevel
        import httpx

        loop = anyio.lowlevel.current_token().native_token
        with self._lock:
            kept = self._async
        if kept is not None and kept[0] is loop:
            return kept[1]
        client = httpx.AsyncClient(timeout=self._timeout)
        closer = _closed_with_its_loop(client)
        # Runs to its yield without giving the loop a turn: no second client between check and set.
        await anext(closer)
        with self._lock:
            self._async = (loop, client, closer)
        return client

    def close(self) -> None:
        """Close the sync client (the async one needs its event loop: :meth:`aclose`)."""
        with self._lock:
            _close_all(self._sync)

    async def aclose(self) -> None:
        """Close the async client, when it belongs to the running event loop, and the sync one."""
        import anyio.lowlevel

        loop = anyio.lowlevel.current_token().native_token
        with self._lock:
            kept, self._async = self._async, None
        if kept is not None and kept[0] is loop:
            await kept[2].aclose()
        self.close()


async def _closed_with_its_loop(client: httpx.AsyncClient) -> AsyncGenerator[None, None]:
    """Started on the loop ``client`` belongs to, it closes the client when finalized: by
    :meth:`Clients.aclose`, or by the loop itself, which finalizes the async generators still
    alive when it ends (``asyncio.run``, ``anyio.run``, ``trio.run``) or unreferenced: so a
    client is closed on its own loop with its connections, which no other loop could do."""
    try:
        yield
    finally:
        await client.aclose()


def _close_all(clients: list[httpx.Client]) -> None:
    while clients:
        clients.pop().close()


class StreamBroken(Exception):
    """A streamed answer went wrong before its final event; the message is a fixed text that
    says how, never the stream's content. The answer is asked for again as a whole."""


class StreamFailed(Exception):
    """The stream carried the API's error event; ``error`` is its error object."""

    def __init__(self, error: object) -> None:
        super().__init__("the stream carried an error event")
        self.error = error


class Framing(Protocol):
    """Cuts a streamed body into its events, sans I/O: :class:`SseParser` for server-sent
    events, or an API's own framing (AWS event streams). ``feed`` may raise
    :class:`StreamBroken` for bytes that frame nothing."""

    def feed(self, chunk: bytes) -> list[Any]:
        """The events that ``chunk`` completes, in order."""
        ...

    def close(self) -> list[Any]:
        """The events the end of the body completes."""
        ...


class StreamAssembler(Protocol):
    """Builds one streamed answer from its events, passing its text on as it arrives."""

    def feed(self, event: Any) -> bool:
        """Take the next event; ``True`` when it was the answer's final one. Raises
        :class:`StreamBroken` for an event that makes no sense, :class:`StreamFailed` for an
        error event."""
        ...

    def may_end(self) -> bool:
        """Whether the events so far are a whole answer, should the stream end here without
        its final event."""
        ...

    def answer(self) -> Any:
        """The whole answer, in the shape the API sends when it does not stream."""
        ...


def post_json(clients: Clients, http: HttpSettings, body: Mapping[str, Any]) -> Any:
    """The decoded JSON answer to POSTing ``body``.

    408, 409, 429, 5xx and transport failures (timeouts included) are retried ``max_retries``
    times with exponential backoff, or after the wait the server asks for up to a cap
    (``retry-after-ms``, ``Retry-After``, or Google's ``RetryInfo``: see ``_retry``);
    ``x-should-retry: true|false`` overrides the status, and a 429 whose error code is
    ``insufficient_quota`` is not retried. Any other status fails at once, and so does a
    2xx answer whose body is an error object or exceeds ``ANSWER_MAX_BYTES``.
    """
    return _post(clients.client(), http, body, lambda content_type: _JsonReader(http))


async def apost_json(clients: Clients, http: HttpSettings, body: Mapping[str, Any]) -> Any:
    """:func:`post_json` on the running event loop."""
    return await _apost(await clients.aclient(), http, body, lambda content_type: _JsonReader(http))


def post_stream(
    clients: Clients,
    http: HttpSettings,
    body: Mapping[str, Any],
    assembler: Callable[[], StreamAssembler],
    *,
    on_delta: Callable[[Delta], None],
    framing: Callable[[], Framing] = SseParser,
) -> Any:
    """The answer that a fresh ``assembler()`` builds from the events of POSTing ``body``
    (which asks for a stream), cut from the body by a fresh ``framing()``: server-sent
    events unless told otherwise.

    Statuses and transport failures are retried as by :func:`post_json`. A stream that breaks
    before its final event (cut, malformed, or ended before its assembler ``may_end``) is
    retried as a whole within the same ``max_retries``, after
    ``on_delta(StreamRestarted())``; an error event fails at once. A server that answers
    ``application/json`` instead is read as :func:`post_json` reads it.
    """
    readers = _stream_readers(http, assembler, on_delta, framing)
    return _post(clients.client(), http, body, readers)


async def apost_stream(
    clients: Clients,
    http: HttpSettings,
    body: Mapping[str, Any],
    assembler: Callable[[], StreamAssembler],
    *,
    on_delta: Callable[[Delta], None],
    framing: Callable[[], Framing] = SseParser,
) -> Any:
    """:func:`post_stream` on the running event loop; ``on_delta`` is called on its thread."""
    readers = _stream_readers(http, assembler, on_delta, framing)
    return await _apost(await clients.aclient(), http, body, readers)


# -- the sans-IO pieces ------------------------------------------------------------------------


class _Reader(Protocol):
    def feed(self, chunk: bytes) -> bool:
        """Take the next bytes of an answer; ``True`` once the rest need not be read (it is
        then left unread, and its connection closed)."""
        ...

    def finish(self) -> Any:
        """The answer, once the body ended or :meth:`feed` said it is whole."""
        ...

    @property
    def whole(self) -> bool:
        """Whether the answer is complete whatever the rest of the body does (a stream after
        its final event, whose rest is read only so that its connection can be reused)."""
        ...

    def retried(self) -> None:
        """This reader's attempt failed and another follows."""
        ...


@final
class _Refused(Exception):
    """A non-2xx answer that is retried after ``delay`` seconds."""

    def __init__(self, delay: float) -> None:
        super().__init__(delay)
        self.delay = delay


@final
class _Attempts:
    """One request's attempts: which reader takes an answer's bytes, what the answer is, and
    after each failed attempt the seconds to wait before the next one, or the
    ``ProviderError`` to give up with. The two drivers only move the bytes and wait."""

    __slots__ = ("_done", "_http", "_read", "_reader")

    def __init__(self, http: HttpSettings, reader: Callable[[str], _Reader]) -> None:
        self._http = http
        self._reader = reader
        self._read: _Reader | None = None
        self._done = 0

    def reading(self, response: httpx.Response) -> _Reader:
        """The reader for this attempt's ``response``."""
        if not 200 <= response.status_code < 300:
            self._read = _ErrorReader()
        else:
            content_type: str = response.headers.get("content-type", "")
            self._read = self._reader(content_type.lower())
        return self._read

    def answer(self, read: _Reader, response: httpx.Response) -> Any:
        """The answer once ``read`` took the body; a non-2xx answer raises ``_Refused``, or
        gives up."""
        if not isinstance(read, _ErrorReader):
            return read.finish()
        raise _Refused(self.refused(response.status_code, response.headers, read.finish()))

    def after(self, failure: Exception) -> float:
        """The seconds to wait after this attempt failed with ``failure`` (``_Refused``,
        ``StreamBroken`` or an httpx transport error)."""
        if isinstance(failure, _Refused):
            delay = failure.delay
        elif isinstance(failure, StreamBroken):
            delay = self.failed(f"the stream broke: {failure}")
        else:
            answering = self._read is not None and not isinstance(self._read, _ErrorReader)
            delay = self.transport_failed(failure, answering=answering)
        if self._read is not None:
            self._read.retried()
            self._read = None
        return delay

    def refused(self, status: int, headers: Mapping[str, str], content: bytes) -> float:
        """After an answer with a non-2xx ``status``."""
        failure = f"HTTP {status}: {excerpt(content, self._http.secrets)}"
        # AWS names the error's type in a header, its body holding only the message.
        aws_type = headers.get("x-amzn-errortype", "").partition(":")[0]
        if aws_type:
            failure = f"HTTP {status} {excerpt(aws_type.encode(), self._http.secrets)}: " + (
                excerpt(content, self._http.secrets)
            )
        if not retried(status, headers, content):
            raise ProviderError(f'provider "{self._http.provider}": {failure}', status_code=status)
        return self.failed(failure, status=status, asked=retry_after(headers, content))

    def failed(
        self, failure: str, *, status: int | None = None, asked: float | None = None
    ) -> float:
        """After an attempt that failed with ``failure`` (safe text) and may be retried:
        ``asked`` seconds later when the server asked for that, else after a backoff."""
        http = self._http
        attempts = http.max_retries + 1
        delay = min(BACKOFF_BASE_SECONDS * 2.0**self._done, BACKOFF_CAP_SECONDS)
        if asked is not None:
            delay = asked
        self._done += 1
        if self._done < attempts:
            logger().warning(
                "nrllm.provider.retry",
                provider=http.provider,
                attempt=self._done,
                status=status,
                delay_seconds=delay,
            )
            return delay
        logger().error(
            "nrllm.provider.failed", provider=http.provider, attempts=attempts, status=status
        )
        raise ProviderError(
            f'provider "{http.provider}": {failure} '
            f"(after {attempts} attempt{'s' if attempts > 1 else ''})",
            status_code=status,
        )

    def transport_failed(self, exc: Exception, *, answering: bool) -> float:
        """After httpx raised ``exc``, a transport failure whose text is never shown;
        ``answering`` when it came while a 2xx answer was being read."""
        import httpx

        if isinstance(exc, httpx.TimeoutException):
            return self.failed(f"timed out after {self._http.timeout:g} s")
        if answering:
            return self.failed(f"the connection broke mid-answer ({type(exc).__name__})")
        return self.failed(f"could not reach the server ({type(exc).__name__})")


@final
class _ErrorReader:
    """The start of a non-2xx answer's body, all that an error excerpt reads."""

    __slots__ = ("_body",)

    def __init__(self) -> None:
        self._body = bytearray()

    def feed(self, chunk: bytes) -> bool:
        self._body += chunk
        return len(self._body) >= _ERROR_READ_BYTES

    def finish(self) -> bytes:
        return bytes(self._body[:_ERROR_READ_BYTES])

    def retried(self) -> None:
        pass

    whole: Final = False


@final
class _JsonReader:
    __slots__ = ("_body", "_http")

    def __init__(self, http: HttpSettings) -> None:
        self._http = http
        self._body = bytearray()

    def feed(self, chunk: bytes) -> bool:
        self._body += chunk
        _check_size(self._http, len(self._body))
        return False

    def finish(self) -> Any:
        return _decode(self._http, bytes(self._body))

    def retried(self) -> None:
        pass

    whole: Final = False


@final
class _StreamReader:
    __slots__ = ("_assembler", "_done", "_http", "_on_delta", "_parser", "_size", "_whole_at")

    def __init__(
        self,
        http: HttpSettings,
        assembler: StreamAssembler,
        on_delta: Callable[[Delta], None],
        parser: Framing,
    ) -> None:
        self._http = http
        self._assembler = assembler
        self._on_delta = on_delta
        self._parser = parser
        self._size = 0
        self._whole_at = 0
        self._done = False

    def feed(self, chunk: bytes) -> bool:
        self._size += len(chunk)
        if self._done:
            # The body's end after the final event is read, so that its connection carries
            # the next request; a server that sends more than a trailer is not waited for.
            return self._size - self._whole_at > _TRAILER_MAX_BYTES
        _check_size(self._http, self._size)
        if self._take(self._parser.feed(chunk)):
            self._whole_at = self._size
        return False

    def finish(self) -> Any:
        ended = self._done or self._take(self._parser.close()) or self._assembler.may_end()
        if not ended:
            raise StreamBroken("the stream ended before its final event")
        return self._assembler.answer()

    def _take(self, events: list[Any]) -> bool:
        for event in events:
            try:
                self._done = self._assembler.feed(event)
            except StreamFailed as failed:
                raise _answered_error(self._http, failed.error) from None
            if self._done:
                return True
        return False

    def retried(self) -> None:
        self._on_delta(StreamRestarted())

    @property
    def whole(self) -> bool:
        return self._done


def _stream_readers(
    http: HttpSettings,
    assembler: Callable[[], StreamAssembler],
    on_delta: Callable[[Delta], None],
    framing: Callable[[], Framing],
) -> Callable[[str], _Reader]:
    def reader(content_type: str) -> _Reader:
        # A gateway's error object, or a server that ignores "stream", comes as one JSON body.
        if content_type.startswith("application/json"):
            return _JsonReader(http)
        return _StreamReader(http, assembler(), on_delta, framing())

    return reader


def _check_size(http: HttpSettings, size: int) -> None:
    if size > ANSWER_MAX_BYTES:
        raise ProviderError(
            f'provider "{http.provider}" answered with more than {ANSWER_MAX_BYTES} bytes'
        )


def _request(http: HttpSettings, content: bytes) -> dict[str, Any]:
    """One attempt's request; signed anew, when the kind signs, for its own time."""
    headers = {**http.headers, "content-type": "application/json"}
    if http.sign is not None:
        headers.update(http.sign(http.url, content))
    return {"method": "POST", "url": http.url, "content": content, "headers": headers}


# -- the two drivers ---------------------------------------------------------------------------


def _post(
    client: httpx.Client,
    http: HttpSettings,
    body: Mapping[str, Any],
    reader: Callable[[str], _Reader],
) -> Any:
    import httpx

    content = _json.dumps(body)
    attempts = _Attempts(http, reader)
    while True:
        try:
            with client.stream(**_request(http, content)) as response:
                read = attempts.reading(response)
                try:
                    for chunk in response.iter_bytes():
                        if read.feed(chunk):
                            break
                except httpx.DecodingError:
                    raise StreamBroken("a body that does not decode") from None
                except httpx.TransportError:
                    # Only the body's rest was lost, not the answer: it is not asked again.
                    if not read.whole:
                        raise
                return attempts.answer(read, response)
        except (httpx.TransportError, StreamBroken, _Refused) as failure:
            delay = attempts.after(failure)
        http.sleep(delay)


async def _apost(
    client: httpx.AsyncClient,
    http: HttpSettings,
    body: Mapping[str, Any],
    reader: Callable[[str], _Reader],
) -> Any:
    import anyio
    import httpx

    content = _json.dumps(body)
    attempts = _Attempts(http, reader)
    sleep = anyio.sleep if http.asleep is None else http.asleep
    while True:
        try:
            async with client.stream(**_request(http, content)) as response:
                read = attempts.reading(response)
                try:
                    async for chunk in response.aiter_bytes():
                        if read.feed(chunk):
                            break
                except httpx.DecodingError:
                    raise StreamBroken("a body that does not decode") from None
                except httpx.TransportError:
                    # Only the body's rest was lost, not the answer: it is not asked again.
                    if not read.whole:
                        raise
                return attempts.answer(read, response)
        except (httpx.TransportError, StreamBroken, _Refused) as failure:
            delay = attempts.after(failure)
        await sleep(delay)


def _answered_error(http: HttpSettings, error: object) -> ProviderError:
    # Some OpenAI-compatible gateways report a failure in a 200 answer, and a stream in an event.
    return ProviderError(
        f'provider "{http.provider}" answered with an error: {_error_text(http, error)}'
    )


def _decode(http: HttpSettings, content: bytes) -> Any:
    try:
        data = _json.loads(content)
    except ValueError:
        raise ProviderError(f'provider "{http.provider}" answered with malformed JSON') from None
    error = data.get("error") if isinstance(data, dict) else None
    if error is not None:
        raise _answered_error(http, error)
    return data


def _error_text(http: HttpSettings, error: object) -> str:
    """An error object's message and code, redacted like any excerpt of an error body."""
    if not isinstance(error, dict):
        return excerpt(_json.dumps(error), http.secrets)
    message = error.get("message")
    code = _error_code(error)
    text = message if isinstance(message, str) and message else "(no message)"
    if code is not None:
        text = f"{text} (code {code})"
    return excerpt(text.encode(), http.secrets)


def _error_code(error: dict[str, Any]) -> str | None:
    for key in ("code", "type"):
        value = error.get(key)
        if isinstance(value, str | int) and not isinstance(value, bool):
            return str(value)
    return None


def token_count(usage: object, key: str) -> int:
    """A token count from a provider's usage object; anything but a count is 0, and a count
    past ``TOKENS_MAX`` is held at it."""
    value = usage.get(key) if isinstance(usage, dict) else None
    return min(value, TOKENS_MAX) if type(value) is int and value >= 0 else 0


def response_id(data: object) -> str | None:
    """The answer's ``id`` (both APIs put it at the top level), when it is a string."""
    return _top_level_text(data, "id")


def response_model(data: object) -> str | None:
    """The answer's ``model`` (both APIs put it at the top level), when it is a string."""
    return _top_level_text(data, "model")


def _top_level_text(data: object, key: str) -> str | None:
    value = data.get(key) if isinstance(data, Mapping) else None
    return value if isinstance(value, str) and value else None

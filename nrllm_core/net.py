"""The SSRF guard: fetch a public http(s) URL without ever reaching the host's own networks.

A URL is vetted before anything is sent: http or https only, a host, no user info, no IPv6 zone
id. Numeric IPv4 spellings are read the way ``inet_aton`` reads them (``2130706433``,
``0177.0.0.1``, ``0x7f.1``, ``127.1``) and the host is resolved once; every address it resolves
to must be public, IPv6 forms that carry an IPv4 address (mapped, compatible, NAT64, 6to4,
Teredo) judged by that IPv4 address. The request then goes to the first vetted address itself:
the URL names the IP, the ``Host`` header and TLS (SNI and certificate verification, through
httpx's ``sni_hostname`` request extension) name the original host, so a DNS answer that
changes between the check and the connection (DNS rebinding) is never consulted. No redirect is
followed, an encoded (compressed) body is refused rather than decoded, the body is streamed
under a byte cap and everything, resolution included, runs under one total deadline.

Every refusal is a :class:`FetchRefused` whose message is safe to show a model: it names the
redacted URL (:func:`redact_url`) and a fixed reason, never the full URL, an address or an
exception's text.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
import time
from collections.abc import Collection
from typing import TYPE_CHECKING, Final, final
from urllib.parse import SplitResult, urlsplit

import attrs

from nrllm_core.log import logger

if TYPE_CHECKING:
    import httpx

__all__ = ["FetchRefused", "FetchResult", "check_address", "fetch_public", "redact_url"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NOT_SHOWN: Final = "(URL not shown)"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
# What inet_aton may be handed: it stops at whitespace and ignores the rest, so nothing else.
_NUMERIC_V4: Final = re.compile(r"[0-9a-fx.]+")
_HOST_NAME: Final = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*\.?")

# Order matters: the first network that holds an address names the reason.
_V4_REFUSED: Final = tuple(
    (ipaddress.IPv4Network(network), reason)
    for network, reason in (
        ("0.0.0.0/8", "unspecified"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "reserved"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "reserved"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
    )
)
_V6_REFUSED: Final = tuple(
    (ipaddress.IPv6Network(network), reason)
    for network, reason in (
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0:0/96", "reserved"),
        ("64:ff9b:1::/48", "reserved"),
        ("100::/64", "reserved"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "reserved"),
        ("fc00::/7", "private"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)
_IPV4_COMPATIBLE: Final = ipaddress.IPv6Network("::/96")
_NAT64: Final = ipaddress.IPv6Network("64:ff9b::/96")


class FetchRefused(Exception):
    """The URL or an address it resolves to is not allowed, or a limit was hit.

    The message is safe to show a model: the redacted URL and a fixed reason."""


@final
@attrs.frozen(kw_only=True)
class FetchResult:
    """What a public URL answered: ``url`` redacted, the whole body (never a part of it)."""

    url: str
    status: int
    content_type: str | None
    body: bytes


def redact_url(url: str) -> str | None:
    """``scheme://host[:port]/path`` of ``url``: user info, path parameters (``;jsessionid=``),
    query and fragment dropped, scheme and host as written, a bracketed IPv6 host in its
    brackets. ``None`` without a scheme or a host, or when ``url`` cannot be parsed."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    host = _raw_host(parts)
    if not parts.scheme or not host:
        return None
    # urlsplit lowercases the scheme; take it as written when the input spells it plainly.
    written = url.strip()[: len(parts.scheme)]
    scheme = written if written.lower() == parts.scheme else parts.scheme
    authority = host if port is None else f"{host}:{port}"
    # Path parameters carry session ids as often as a query does; every segment may have them.
    path = "/".join(segment.partition(";")[0] for segment in parts.path.split("/"))
    return f"{scheme}://{authority}{path}"


def check_address(address: str) -> None:
    """Raise :class:`FetchRefused` unless ``address`` (an IP address in any ``inet_aton`` or
    IPv6 spelling) is a public unicast address; the message names the address and why."""
    parsed = _ip_literal(address.strip().lower())
    if parsed is None:
        raise FetchRefused(f"Not an IP address: {address}")
    problem = _problem(parsed)
    if problem is not None:
        raise FetchRefused(f"Address is not public ({problem}): {address}")


def fetch_public(
    url: str,
    *,
    max_bytes: int = 5 * 1024 * 1024,
    timeout: float = 10.0,
    allow_hosts: Collection[str] = (),
    accept: str | None = None,
    transport: object | None = None,
) -> FetchResult:
    """GET ``url`` from the public internet, or raise :class:`FetchRefused`.

    ``max_bytes`` caps the body (a larger one is refused, nothing partial is returned); a body
    with a ``Content-Encoding`` other than ``identity`` is refused, never decoded. ``timeout``
    bounds the whole fetch, resolution, connection and reading together. A 3xx
    answer is returned as it is, its ``Location`` never followed. ``accept`` is sent as the
    ``Accept`` header. ``allow_hosts`` lists exact host names or IP addresses (no ranges, no
    wildcards) whose addresses are not checked: that is unsafe outside tests. ``transport`` is
    an ``httpx.BaseTransport`` to send through instead of the default one (tests); the request
    it receives already names the vetted address.
    """
    deadline = time.monotonic() + timeout
    shown = redact_url(url) or _NOT_SHOWN
    timed_out = f"URL did not answer within {timeout:g} seconds: {shown}"
    target = _vet(url, shown, allow_hosts, deadline, timed_out)
    if time.monotonic() >= deadline:
        raise FetchRefused(timed_out)
    return _fetch(target, shown, max_bytes, deadline, timed_out, accept, transport)


@final
@attrs.frozen(kw_only=True)
class _Target:
    scheme: str
    host: str
    port: int
    explicit_port: bool
    address: IPAddress
    target: str

    def request_url(self) -> str:
        address = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return f"{self.scheme}://{address}:{self.port}{self.target}"

    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}" if self.explicit_port else host


def _raw_host(parts: SplitResult) -> str:
    hostport = parts.netloc.rpartition("@")[2]
    if hostport.startswith("["):
        return hostport.partition("]")[0] + "]"
    return hostport.partition(":")[0]


def _vet(
    url: str, shown: str, allow_hosts: Collection[str], deadline: float, timed_out: str
) -> _Target:
    try:
        parts = urlsplit(url.strip())
        explicit_port = parts.port
    except ValueError:
        raise FetchRefused(f"URL cannot be parsed: {shown}") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise FetchRefused(f"URL scheme is not allowed, only http and https: {shown}")
    if "@" in parts.netloc:
        raise FetchRefused(f"URL must not carry a user name or password: {shown}")
    raw_host = parts.hostname
    if not raw_host:
        raise FetchRefused(f"URL has no host: {shown}")
    if "%" in raw_host:
        raise FetchRefused(f"URL host must not carry an IPv6 zone id: {shown}")
    if explicit_port == 0:
        raise FetchRefused(f"URL port is not allowed: {shown}")
    port = _DEFAULT_PORTS[scheme] if explicit_port is None else explicit_port
    host, literal = _normalise_host(raw_host, shown)
    allowed = host in _normalised_allow_list(allow_hosts)
    addresses = (
        [literal] if literal is not None else _resolve(host, port, shown, deadline, timed_out)
    )
    log = logger().bind(url=shown)
    for address in addresses:
        problem = "zone id" if getattr(address, "scope_id", None) else _problem(address)
        if problem is not None and not allowed:
            log.warning("nrllm.net.refused", address=str(address), reason=problem)
            raise FetchRefused(
                f"URL host resolves to an address that is not public ({problem}): {shown}"
            )
    return _Target(
        scheme=scheme,
        host=str(literal) if literal is not None else host,
        port=port,
        explicit_port=explicit_port is not None,
        address=addresses[0],
        target=(parts.path or "/") + (f"?{parts.query}" if parts.query else ""),
    )


def _normalise_host(host: str, shown: str) -> tuple[str, IPAddress | None]:
    """The host in the form it is compared, sent and resolved in, and its address if literal."""
    literal = _ip_literal(host)
    if literal is not None:
        return str(literal), literal
    if ":" in host:
        raise FetchRefused(f"URL host is not a valid IPv6 address: {shown}")
    try:
        ascii_host = host.encode("idna").decode("ascii")
    except UnicodeError:
        raise FetchRefused(f"URL host is not a valid host name: {shown}") from None
    if not _HOST_NAME.fullmatch(ascii_host):
        raise FetchRefused(f"URL host is not a valid host name: {shown}")
    return ascii_host, None


def _ip_literal(host: str) -> IPAddress | None:
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host)
        except ValueError:
            return None
    if not _NUMERIC_V4.fullmatch(host):
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _normalised_allow_list(allow_hosts: Collection[str]) -> set[str]:
    names = set()
    for entry in allow_hosts:
        lowered = entry.strip().lower().removeprefix("[").removesuffix("]")
        literal = _ip_literal(lowered)
        names.add(lowered if literal is None else str(literal))
    return names


def _resolve(host: str, port: int, shown: str, deadline: float, timed_out: str) -> list[IPAddress]:
    answers = _lookup(host, port, deadline)
    if answers is None:
        logger().bind(url=shown).info("nrllm.net.timed_out", stage="resolve")
        raise FetchRefused(timed_out)
    addresses: list[IPAddress] = []
    for answer in answers:
        try:
            address = ipaddress.ip_address(answer)
        except ValueError:
            # An answer that cannot be judged fails the whole host, as a private one would.
            raise FetchRefused(f"URL host resolves to an unusable address: {shown}") from None
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise FetchRefused(f"URL host does not resolve: {shown}")
    return addresses


def _lookup(host: str, port: int, deadline: float) -> list[str | int] | None:
    """The hosts of ``getaddrinfo``'s socket addresses (none when it fails), or ``None`` when it
    outlasts ``deadline``.

    ``getaddrinfo`` takes no timeout, so it runs on a daemon thread that is left to finish on
    its own: a pool's worker would be joined at interpreter exit, holding the process open
    for as long as the resolver hangs."""
    from concurrent.futures import Future
    from concurrent.futures import TimeoutError as LookupTimedOut

    answer: Future[list[str | int]] = Future()

    def lookup() -> None:
        try:
            answers = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            answer.set_result([sockaddr[0] for *_, sockaddr in answers])
        except (OSError, UnicodeError):
            answer.set_result([])
        except BaseException as error:  # handed to the caller, who raises it
            answer.set_exception(error)

    threading.Thread(target=lookup, name="nrllm-resolve", daemon=True).start()
    try:
        return answer.result(timeout=max(deadline - time.monotonic(), 0.0))
    except LookupTimedOut:
        return None


def _problem(address: IPAddress) -> str | None:
    """Why ``address`` is not a public unicast address, or ``None`` when it is."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded:
            problems = (_problem(inner) for inner in embedded)
            return next((problem for problem in problems if problem is not None), None)
        reason = next((reason for net, reason in _V6_REFUSED if address in net), None)
    else:
        reason = next((reason for net, reason in _V4_REFUSED if address in net), None)
    if reason is None and not address.is_global:
        return "not globally routable"
    return reason


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 address leads to: mapped, compatible, NAT64, 6to4, Teredo."""
    if address.ipv4_mapped is not None:
        return (address.ipv4_mapped,)
    if address.teredo is not None:
        return address.teredo
    if address.sixtofour is not None:
        return (address.sixtofour,)
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _NAT64:
        return (low,)
    # ``::`` and ``::1`` sit in the compatible range too, but are themselves.
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return (low,)
    return ()


def _fetch(
    target: _Target,
    shown: str,
    max_bytes: int,
    deadline: float,
    timed_out: str,
    accept: str | None,
    transport: object | None,
) -> FetchResult:
    import httpx

    from nrllm_core._fetch_transport import DeadlineTransport

    if transport is not None and not isinstance(transport, httpx.BaseTransport):
        raise TypeError("transport must be an httpx.BaseTransport")
    headers = {"Host": target.host_header(), "User-Agent": "nrllm", "Accept-Encoding": "identity"}
    if accept is not None:
        headers["Accept"] = accept
    extensions = {"sni_hostname": target.host} if target.scheme == "https" else {}
    too_large = f"URL body is larger than {max_bytes} bytes: {shown}"
    encoded = f"URL answered with an encoded (compressed) body, which is not accepted: {shown}"
    log = logger().bind(url=shown, address=str(target.address))
    client = httpx.Client(
        transport=transport if transport is not None else DeadlineTransport(deadline=deadline),
        trust_env=False,
        follow_redirects=False,
        timeout=httpx.Timeout(max(deadline - time.monotonic(), 0.001)),
    )
    try:
        with (
            client,
            client.stream(
                "GET", target.request_url(), headers=headers, extensions=extensions
            ) as response,
        ):
            encoding = response.headers.get("content-encoding")
            if encoding is not None and _tokens(encoding) != {"identity"}:
                # A decoder expands a small body without any bound before the cap could
                # count it (a compression bomb): identity was asked for, the rest is refused.
                log.warning("nrllm.net.refused", reason="encoded", encoding=encoding[:64])
                raise FetchRefused(encoded)
            body = _read_body(response, max_bytes, deadline, too_large, timed_out)
    except FetchRefused:
        raise
    except httpx.TimeoutException:
        log.info("nrllm.net.timed_out")
        raise FetchRefused(timed_out) from None
    except Exception as error:
        # Fail closed on anything the transport raises; its text may hold the URL's secrets.
        log.info("nrllm.net.failed", error=type(error).__name__)
        raise FetchRefused(f"URL not reachable: {shown}") from None
    log.info("nrllm.net.fetched", status=response.status_code, size=len(body))
    return FetchResult(
        url=shown,
        status=response.status_code,
        content_type=response.headers.get("content-type"),
        body=body,
    )


def _tokens(header: str) -> set[str]:
    return {part.strip().lower() for part in header.split(",")}


def _read_body(
    response: httpx.Response, max_bytes: int, deadline: float, too_large: str, timed_out: str
) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchRefused(too_large)
    body = bytearray()
    # httpx picks its decoder from Content-Encoding alone, so past the check above this decodes
    # nothing.
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > max_bytes:
            raise FetchRefused(too_large)
        if time.monotonic() > deadline:
            raise FetchRefused(timed_out)
    return bytes(body)

"""The SSRF guard: what it refuses, what it connects to, and the limits it keeps.

Positive paths run against loopback servers let through ``allow_hosts``: this machine has no
public network."""

from __future__ import annotations

import ipaddress
import socket
import ssl
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import trustme
from hypothesis import given
from hypothesis import strategies as st

from nrllm_core.net import FetchRefused, FetchResult, check_address, fetch_public, redact_url

Route = Callable[[BaseHTTPRequestHandler], None]


class Handler(BaseHTTPRequestHandler):
    server: LoopbackServer

    def do_GET(self) -> None:
        self.server.hits.append((self.path, self.headers.get("Host")))
        self.server.routes[self.path.partition("?")[0]](self)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LoopbackServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, routes: dict[str, Route]) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.routes = routes
        self.hits: list[tuple[str, str | None]] = []
        self.stop = threading.Event()

    @property
    def port(self) -> int:
        return int(self.server_address[1])


@pytest.fixture
def serve() -> Iterator[Callable[..., LoopbackServer]]:
    started: list[tuple[LoopbackServer, threading.Thread]] = []

    def start(routes: dict[str, Route], tls: ssl.SSLContext | None = None) -> LoopbackServer:
        server = LoopbackServer(routes)
        if tls is not None:
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        started.append((server, thread))
        return server

    yield start
    for server, thread in started:
        server.stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


def answer(body: bytes, *, status: int = 200, length: bool = True, **headers: str) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", "text/plain")
        for name, value in headers.items():
            handler.send_header(name, value)
        if length:
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return route


class FakeDns:
    """Names mapped to the answers of successive lookups (the last one repeats); other names go
    to the real resolver. Every lookup of a faked name is recorded in ``lookups``."""

    def __init__(self) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.lookups: list[str] = []

    def __setitem__(self, name: str, answers: list[list[str]]) -> None:
        self.answers[name] = answers

    def getaddrinfo(self, host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        if host not in self.answers:
            return REAL_GETADDRINFO(host, port, *args, **kwargs)
        self.lookups.append(host)
        queue = self.answers[host]
        addresses = queue.pop(0) if len(queue) > 1 else queue[0]
        return [
            (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
            for a in addresses
        ]


REAL_GETADDRINFO = socket.getaddrinfo


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> FakeDns:
    dns = FakeDns()
    monkeypatch.setattr(socket, "getaddrinfo", dns.getaddrinfo)
    return dns


# -- addresses ---------------------------------------------------------------------------------

TEREDO_TO_LOOPBACK = (
    "2001:0:4136:e378:8000:63bf:80ff:fffe"  # server 65.54.227.120, client 127.0.0.1
)
TEREDO_PUBLIC = "2001:0:4136:e378:8000:63bf:f7f7:f7f7"  # server 65.54.227.120, client 8.8.8.8

REFUSED = {
    "0.0.0.0": "unspecified",
    "0.1.2.3": "unspecified",
    "10.1.2.3": "private",
    "100.64.0.1": "carrier-grade NAT",
    "100.127.255.254": "carrier-grade NAT",
    "127.0.0.1": "loopback",
    "127.255.255.254": "loopback",
    "169.254.169.254": "link-local",
    "172.16.0.1": "private",
    "172.31.255.255": "private",
    "192.0.0.1": "reserved",
    "192.0.0.255": "reserved",
    "192.0.2.1": "documentation",
    "192.168.1.1": "private",
    "198.18.0.1": "benchmarking",
    "198.19.255.255": "benchmarking",
    "198.51.100.7": "documentation",
    "203.0.113.9": "documentation",
    "224.0.0.1": "multicast",
    "239.255.255.250": "multicast",
    "240.0.0.1": "reserved",
    "255.255.255.255": "broadcast",
    "::": "unspecified",
    "::1": "loopback",
    "fc00::1": "private",
    "fd12:3456::1": "private",
    "fe80::1": "link-local",
    "febf::1": "link-local",
    "fec0::1": "site-local",
    "ff02::1": "multicast",
    "2001:db8::1": "documentation",
    "100::1": "reserved",
    "64:ff9b:1::1": "reserved",
    "::ffff:127.0.0.1": "loopback",
    "::ffff:7f00:1": "loopback",
    "::ffff:10.0.0.1": "private",
    "::ffff:169.254.169.254": "link-local",
    "::127.0.0.1": "loopback",
    "::10.0.0.1": "private",
    "64:ff9b::7f00:1": "loopback",
    "64:ff9b::a9fe:a9fe": "link-local",
    "64:ff9b::192.168.0.1": "private",
    "2002:7f00:1::1": "loopback",
    "2002:a00:1::": "private",
    "2002:c0a8:101::1": "private",
    TEREDO_TO_LOOPBACK: "loopback",
}

PUBLIC = [
    "8.8.8.8",
    "93.184.216.34",
    "11.0.0.1",
    "100.128.0.1",
    "172.32.0.1",
    "198.20.0.1",
    "223.255.255.254",
    "2606:2800:220:1:248:1893:25c8:1946",
    "::ffff:8.8.8.8",
    "::8.8.8.8",
    "64:ff9b::808:808",
    "2002:808:808::1",
    TEREDO_PUBLIC,
]


@pytest.mark.parametrize(("address", "reason"), sorted(REFUSED.items()))
def test_check_address_refuses_every_non_public_range(address, reason):
    with pytest.raises(FetchRefused, match=rf"not public \({reason}\)"):
        check_address(address)


@pytest.mark.parametrize("address", PUBLIC)
def test_check_address_lets_public_addresses_through(address):
    check_address(address)


@pytest.mark.parametrize("address", sorted(REFUSED))
def test_a_literal_url_host_in_a_refused_range_is_refused_before_any_connection(address):
    host = f"[{address}]" if ":" in address else address
    with pytest.raises(FetchRefused, match=r"not public"):
        fetch_public(f"http://{host}/", transport=httpx.MockTransport(unreachable))


def unreachable(request: httpx.Request) -> httpx.Response:
    raise AssertionError(f"a refused URL reached the transport: {request.url}")


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_embedded_ipv4_forms_are_judged_like_the_ipv4_address(value):
    v4 = ipaddress.IPv4Address(value)
    forms = [
        f"::ffff:{v4}",
        f"64:ff9b::{v4}",
        str(ipaddress.IPv6Address((0x2002 << 112) | (value << 80) | 1)),
    ]
    if value > 1:
        forms.append(f"::{v4}")
    expected = refused(str(v4))
    assert {form: refused(form) for form in forms} == dict.fromkeys(forms, expected)


def refused(address: str) -> bool:
    try:
        check_address(address)
    except FetchRefused:
        return True
    return False


@pytest.mark.parametrize(
    "host",
    ["2130706433", "0177.0.0.1", "0x7f.1", "127.1", "0x7f.0x0.0.1", "017700000001", "0xc0a80001"],
)
def test_numeric_ipv4_spellings_are_read_as_inet_aton_reads_them(host):
    with pytest.raises(FetchRefused, match=r"not public \((loopback|private)\)"):
        fetch_public(f"http://{host}/", transport=httpx.MockTransport(unreachable))


def test_check_address_refuses_what_is_not_an_address():
    with pytest.raises(FetchRefused, match="Not an IP address"):
        check_address("example.com")


# -- URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://example.com/file",
        "gopher://example.com:70/_stats",
        "javascript:alert(1)",
        "data:text/plain,hello",
        "dict://example.com:11211/stats",
        "example.com/page",
    ],
)
def test_only_http_and_https_are_fetched(url):
    with pytest.raises(FetchRefused, match="only http and https"):
        fetch_public(url, transport=httpx.MockTransport(unreachable))


@pytest.mark.parametrize(
    "url",
    [
        "http://user:s3cret@example.com/",
        "http://user@example.com/",
        "http://:s3cret@example.com/",
        "https://user:s3cret@127.0.0.1/",
    ],
)
def test_user_info_is_refused_and_never_echoed(url):
    with pytest.raises(FetchRefused, match="user name or password") as refusal:
        fetch_public(url, allow_hosts=["example.com", "127.0.0.1"])
    assert "s3cret" not in str(refusal.value)
    assert "user" not in str(refusal.value).split(": ", 1)[1]


@pytest.mark.parametrize("url", ["http://[fe80::1%25eth0]/", "http://[fe80::1%eth0]:8080/x"])
def test_ipv6_zone_ids_are_refused_even_for_an_allowed_host(url):
    with pytest.raises(FetchRefused, match="must not carry an IPv6 zone id"):
        fetch_public(url, allow_hosts=["fe80::1"], transport=httpx.MockTransport(unreachable))


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http:///path", "no host"),
        ("http://example.com:0/", "port is not allowed"),
        ("http://example.com:99999/", "cannot be parsed"),
        ("http://[::1/", "cannot be parsed"),
        ("http://exa mple.com/", "not a valid host name"),
        ("http://a..b/", "not a valid host name"),
    ],
)
def test_malformed_urls_are_refused(url, reason):
    with pytest.raises(FetchRefused, match=reason):
        fetch_public(url, transport=httpx.MockTransport(unreachable))


def test_a_refusal_names_only_the_redacted_url():
    url = "https://10.0.0.1:8443/admin?token=abc123#frag"
    with pytest.raises(FetchRefused) as refusal:
        fetch_public(url)
    assert str(refusal.value) == (
        "URL host resolves to an address that is not public (private): https://10.0.0.1:8443/admin"
    )


# -- resolution and pinning -------------------------------------------------------------------


def test_a_name_resolving_to_a_private_address_is_refused(fake_dns):
    fake_dns["intranet.test"] = [["192.168.0.10"]]
    with pytest.raises(FetchRefused, match=r"not public \(private\): http://intranet.test/"):
        fetch_public("http://intranet.test/", transport=httpx.MockTransport(unreachable))


def test_a_name_resolving_to_a_public_and_a_private_address_is_refused(fake_dns):
    fake_dns["mixed.test"] = [["93.184.216.34", "127.0.0.1"]]
    with pytest.raises(FetchRefused, match=r"not public \(loopback\)"):
        fetch_public("http://mixed.test/", transport=httpx.MockTransport(unreachable))


def test_a_slow_resolver_times_out_within_the_total_deadline(monkeypatch):
    released = threading.Event()
    looked_up: list[str] = []

    def hanging(host: Any, port: Any, *args: Any, **kwargs: Any) -> list[Any]:
        looked_up.append(host)
        released.wait(10)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port))]

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    started = time.monotonic()
    try:
        with pytest.raises(FetchRefused) as refusal:
            fetch_public(
                "http://slow.test/a?k=s3cret",
                timeout=0.3,
                transport=httpx.MockTransport(unreachable),
            )
        assert time.monotonic() - started < 1.0
    finally:
        released.set()
    assert looked_up == ["slow.test"]
    assert str(refusal.value) == "URL did not answer within 0.3 seconds: http://slow.test/a"


def test_an_error_the_resolver_raises_reaches_the_caller(monkeypatch):
    def broken(*args: Any, **kwargs: Any) -> list[Any]:
        raise RuntimeError("resolver bug")

    monkeypatch.setattr(socket, "getaddrinfo", broken)
    with pytest.raises(RuntimeError, match="resolver bug"):
        fetch_public("http://broken.test/", transport=httpx.MockTransport(unreachable))


def test_a_name_that_does_not_resolve_is_refused(fake_dns):
    fake_dns["nowhere.test"] = [[]]
    with pytest.raises(FetchRefused, match=r"does not resolve: http://nowhere\.test/a$"):
        fetch_public("http://nowhere.test/a?b", transport=httpx.MockTransport(unreachable))


def test_dns_rebinding_the_request_goes_to_the_vetted_address(fake_dns):
    fake_dns["rebind.test"] = [["93.184.216.34"], ["127.0.0.1"]]
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, headers={"Content-Type": "text/html"}, content=b"<p>hi</p>")

    result = fetch_public(
        "https://rebind.test:8443/page?q=1", transport=httpx.MockTransport(record)
    )

    assert result == FetchResult(
        url="https://rebind.test:8443/page", status=200, content_type="text/html", body=b"<p>hi</p>"
    )
    assert fake_dns.lookups == ["rebind.test"]
    [request] = seen
    assert str(request.url) == "https://93.184.216.34:8443/page?q=1"
    assert request.headers["Host"] == "rebind.test:8443"
    assert request.extensions["sni_hostname"] == "rebind.test"


def test_dns_rebinding_against_a_real_server_connects_once_to_the_vetted_address(serve, fake_dns):
    server = serve({"/": answer(b"pinned")})
    # Only 127.0.0.1 listens; a second lookup would send the request to 127.0.0.2 and fail.
    fake_dns["pinned.test"] = [["127.0.0.1"], ["127.0.0.2"]]

    result = fetch_public(f"http://pinned.test:{server.port}/", allow_hosts=["pinned.test"])

    assert (result.status, result.body) == (200, b"pinned")
    assert fake_dns.lookups == ["pinned.test"]
    assert server.hits == [("/", f"pinned.test:{server.port}")]


# -- fetching from loopback servers -----------------------------------------------------------


def test_an_allowed_loopback_server_is_fetched(serve):
    server = serve({"/doc": answer(b"hello", **{"X-Other": "1"})})

    result = fetch_public(
        f"HTTP://127.0.0.1:{server.port}/doc?x=1#top", allow_hosts=["127.0.0.1"], accept="text/*"
    )

    assert result == FetchResult(
        url=f"HTTP://127.0.0.1:{server.port}/doc",
        status=200,
        content_type="text/plain",
        body=b"hello",
    )
    assert server.hits == [("/doc?x=1", f"127.0.0.1:{server.port}")]


def test_a_numeric_spelling_of_an_allowed_address_is_allowed(serve):
    server = serve({"/": answer(b"ok")})
    assert (
        fetch_public(f"http://2130706433:{server.port}/", allow_hosts=["127.0.0.1"]).body == b"ok"
    )


def test_loopback_is_refused_without_allow_hosts(serve):
    server = serve({"/": answer(b"secret")})
    with pytest.raises(FetchRefused, match=r"not public \(loopback\)"):
        fetch_public(f"http://localhost:{server.port}/", allow_hosts=["127.0.0.2"])
    assert server.hits == []


def test_redirects_are_returned_never_followed(serve):
    server = serve(
        {
            "/start": answer(b"", status=302, Location="/target"),
            "/target": answer(b"followed"),
        }
    )

    result = fetch_public(f"http://127.0.0.1:{server.port}/start", allow_hosts=["127.0.0.1"])

    assert (result.status, result.body) == (302, b"")
    assert [path for path, _ in server.hits] == ["/start"]


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "streamed"])
def test_a_body_over_the_cap_is_refused_with_nothing_partial(serve, length):
    server = serve({"/big": answer(b"x" * 1001, length=length), "/fits": answer(b"x" * 1000)})
    base = f"http://127.0.0.1:{server.port}"

    with pytest.raises(FetchRefused) as refusal:
        fetch_public(f"{base}/big", max_bytes=1000, allow_hosts=["127.0.0.1"])

    assert str(refusal.value) == f"URL body is larger than 1000 bytes: {base}/big"
    fits = fetch_public(f"{base}/fits", max_bytes=1000, allow_hosts=["127.0.0.1"])
    assert fits.body == b"x" * 1000


def bomb(wbits: int) -> bytes:
    """128 MiB of zeros compressed to about 130 kB (``wbits`` 31: gzip, 15: zlib deflate)."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(1024 * 1024)
    return b"".join(compressor.compress(zeros) for _ in range(128)) + compressor.flush()


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", 31), ("deflate", 15)])
def test_a_compression_bomb_is_refused_without_being_decoded(serve, encoding, wbits):
    body = bomb(wbits)
    server = serve({"/bomb": answer(body, **{"Content-Encoding": encoding})})
    url = f"http://127.0.0.1:{server.port}/bomb"

    tracemalloc.start()
    try:
        with pytest.raises(FetchRefused) as refusal:
            fetch_public(f"{url}?k=1", allow_hosts=["127.0.0.1"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert str(refusal.value) == (
        f"URL answered with an encoded (compressed) body, which is not accepted: {url}"
    )
    assert peak < 20 * 1024 * 1024


@pytest.mark.parametrize("encoding", ["br", "zstd", "x-custom", "GZIP", "identity, gzip", ""])
def test_any_content_encoding_but_identity_is_refused(serve, encoding):
    server = serve({"/": answer(b"plain", **{"Content-Encoding": encoding})})
    with pytest.raises(FetchRefused, match="encoded"):
        fetch_public(f"http://127.0.0.1:{server.port}/", allow_hosts=["127.0.0.1"])


@pytest.mark.parametrize("encoding", ["identity", "Identity", "identity, identity"])
def test_an_identity_encoding_is_accepted(serve, encoding):
    server = serve({"/": answer(b"plain", **{"Content-Encoding": encoding})})
    result = fetch_public(f"http://127.0.0.1:{server.port}/", allow_hosts=["127.0.0.1"])
    assert result.body == b"plain"


def stall(handler: BaseHTTPRequestHandler) -> None:
    handler.server.stop.wait()  # type: ignore[attr-defined]


def drip_headers(handler: BaseHTTPRequestHandler) -> None:
    # Never idle long enough for any one read to time out; only a total deadline ends it.
    for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
        if handler.server.stop.wait(0.05):  # type: ignore[attr-defined]
            return
        handler.wfile.write(bytes([byte]))
        handler.wfile.flush()


@pytest.mark.parametrize("route", [stall, drip_headers], ids=["silent", "dripping"])
def test_a_slow_server_times_out_within_the_total_deadline(serve, route):
    server = serve({"/slow": route})
    url = f"http://127.0.0.1:{server.port}/slow"
    started = time.monotonic()

    with pytest.raises(FetchRefused) as refusal:
        fetch_public(url, timeout=0.5, allow_hosts=["127.0.0.1"])

    assert time.monotonic() - started < 1.5
    assert str(refusal.value) == f"URL did not answer within 0.5 seconds: {url}"


def test_a_transport_error_is_a_generic_refusal():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x?key=s3cret"

    with pytest.raises(FetchRefused) as refusal:
        fetch_public(url, allow_hosts=["127.0.0.1"])

    assert str(refusal.value) == f"URL not reachable: http://127.0.0.1:{port}/x"


def test_a_transport_that_is_not_an_httpx_transport_is_a_type_error():
    with pytest.raises(TypeError, match=r"httpx\.BaseTransport"):
        fetch_public("http://[2606:2800:220:1:248:1893:25c8:1946]/", transport=object())


# -- TLS: the name is verified while the connection goes to the vetted address ----------------


@pytest.fixture
def authority() -> trustme.CA:
    return trustme.CA()


def tls_server(serve, authority: trustme.CA, name: str, sni: list[str]) -> LoopbackServer:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert(name).configure_cert(context)
    context.sni_callback = lambda _sock, server_name, _ctx: sni.append(server_name)  # type: ignore[func-returns-value]
    return serve({"/": answer(b"over tls")}, tls=context)


def trusting(authority: trustme.CA) -> httpx.HTTPTransport:
    context = ssl.create_default_context()
    authority.configure_trust(context)
    return httpx.HTTPTransport(verify=context)


def test_https_verifies_the_certificate_against_the_host_name(serve, fake_dns, authority):
    sni: list[str] = []
    server = tls_server(serve, authority, "secure.test", sni)
    fake_dns["secure.test"] = [["127.0.0.1"]]

    result = fetch_public(
        f"https://secure.test:{server.port}/",
        allow_hosts=["secure.test"],
        transport=trusting(authority),
    )

    assert (result.status, result.body) == (200, b"over tls")
    assert sni == ["secure.test"]
    assert server.hits == [("/", f"secure.test:{server.port}")]


def test_https_refuses_a_certificate_for_another_name(serve, fake_dns, authority):
    server = tls_server(serve, authority, "other.test", [])
    fake_dns["secure.test"] = [["127.0.0.1"]]
    url = f"https://secure.test:{server.port}/"

    with pytest.raises(FetchRefused) as refusal:
        fetch_public(url, allow_hosts=["secure.test"], transport=trusting(authority))

    assert str(refusal.value) == f"URL not reachable: {url}"
    assert server.hits == []


def test_the_default_transport_verifies_certificates(serve, fake_dns, authority):
    server = tls_server(serve, authority, "secure.test", [])
    fake_dns["secure.test"] = [["127.0.0.1"]]

    with pytest.raises(FetchRefused, match="not reachable"):
        fetch_public(f"https://secure.test:{server.port}/", allow_hosts=["secure.test"])
    assert server.hits == []


# -- redact_url ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://example.com/article?token=s3cret#part", "https://example.com/article"),
        ("https://user:pw@example.com/a", "https://example.com/a"),
        ("https://user@example.com:8443/a/b", "https://example.com:8443/a/b"),
        ("HTTPS://Example.COM/Path", "HTTPS://Example.COM/Path"),
        ("http://[2001:db8::1]:8080/x?y", "http://[2001:db8::1]:8080/x"),
        ("http://[::1]/", "http://[::1]/"),
        ("http://example.com", "http://example.com"),
        ("  http://example.com/x  ", "http://example.com/x"),
        ("ftp://files.example.com/f", "ftp://files.example.com/f"),
        ("https://example.com/a;jsessionid=SECRET?x=1", "https://example.com/a"),
        ("https://example.com/a;p=1/b;q=2/c", "https://example.com/a/b/c"),
        ("https://example.com/;SECRET", "https://example.com/"),
    ],
)
def test_redact_url_keeps_scheme_host_port_and_path(url, shown):
    assert redact_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "",
        "not a url",
        "example.com/path",
        "/relative",
        "javascript:alert(1)",
        "http://[::1/",
        "http://h:x/",
    ],
)
def test_redact_url_gives_none_when_it_cannot_be_built(url):
    assert redact_url(url) is None


@given(
    user=st.text(alphabet="abcxyz019", min_size=1),
    params=st.lists(st.text(alphabet="abc=,;019", max_size=8), min_size=2, max_size=2),
    query=st.text(alphabet="abc=&%019", min_size=1),
    fragment=st.text(alphabet="abc019", min_size=1),
)
def test_redact_url_never_keeps_user_info_params_query_or_fragment(user, params, query, fragment):
    first, second = params
    shown = redact_url(
        f"https://{user}:PW@host.example/p;P{first}/q;P{second}?Q{query}#F{fragment}"
    )
    assert shown == "https://host.example/p/q"


def test_importing_the_guard_loads_no_http_library():
    code = "import sys, nrllm_core.net; print(sorted(m for m in sys.modules if 'http' in m))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]"

"""probe_url through core's SSRF guard, against a loopback server allowed for the test only."""

from __future__ import annotations

import http.server
import threading

import pytest

from nrllm_builtin._probe import page_title

PAGES = {
    "/": (b"<html><head><title>\n  Caf&eacute; &amp; Bar  </title></head></html>", "text/html"),
    "/latin": ("<title>Gr\xfc\xdfe</title>".encode("latin-1"), "text/html; charset=ISO-8859-1"),
    "/json": (b'{"title": "no"}', "application/json"),
    "/leak": (b"<title>key sk-abcdefghijklmnopqrstuvwx</title>", "text/html"),
}


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/moved":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body, kind = PAGES.get(path, (b"missing", "text/plain"))
        self.send_response(200 if path in PAGES else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


# Unsafe outside tests: it lets the guard reach this machine's loopback server.
ALLOW_LOOPBACK = {"probe_allow_hosts": ["127.0.0.1"]}


def test_probe_url_reports_status_type_and_title(call, server):
    answer = call("probe_url", {"url": f"{server}/?token=abc"}, ALLOW_LOOPBACK)

    assert answer.content == (
        f"URL: {server}/\nStatus: 200\nContent type: text/html\nTitle: Café & Bar"
    )


def test_probe_url_decodes_the_declared_charset_and_masks_the_title(call, server):
    latin = call("probe_url", {"url": f"{server}/latin"}, ALLOW_LOOPBACK)
    assert latin.content.endswith("Title: Grüße")
    leak = call("probe_url", {"url": f"{server}/leak"}, ALLOW_LOOPBACK)
    assert leak.content.endswith("Title: key sk-***")
    data = call("probe_url", {"url": f"{server}/json"}, ALLOW_LOOPBACK)
    assert data.content.endswith("Content type: application/json\nTitle: (none)")


def test_probe_url_reports_a_redirect_without_following_it(call, server):
    answer = call("probe_url", {"url": f"{server}/moved"}, ALLOW_LOOPBACK)

    assert "Status: 302" in answer.content


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.0.0.1/",
        "http://169.254.169.254/latest/meta-data/",
        "http://100.64.0.1/",
        "http://224.0.0.1/",
        "file:///etc/passwd",
        "http://user:pw@example.com/",
    ],
)
def test_probe_url_refuses_what_the_guard_refuses(call, url):
    answer = call("probe_url", {"url": url}, {})

    assert not answer.is_error
    assert answer.content.startswith("Refused: ")
    assert "pw@" not in answer.content


def test_the_loopback_server_is_refused_without_the_test_allowance(call, server):
    answer = call("probe_url", {"url": server}, {})

    assert answer.content.startswith("Refused: ")


def test_page_title_is_bounded_and_single_line():
    body = b"<title>" + b"word " * 1000 + b"</title>"
    title = page_title(body, "text/html")
    assert title is not None
    assert len(title) == 201
    assert title.endswith("…")
    assert page_title(b"<title>a</title>", "image/png") is None
    assert page_title(b"<p>no title</p>", None) is None

"""Status, content type and title of a public URL, through core's SSRF guard: ``probe_url``."""

from __future__ import annotations

import codecs
import html
import re
from types import MappingProxyType
from typing import Any, Final

from nrllm_builtin._settings import settings_or_error
from nrllm_core import DataClass, Integrity, Tool, ToolContext, ToolResult
from nrllm_core.redact import mask_secrets

__all__ = ["ProbeUrl", "page_title"]

MAX_TITLE_CHARS: Final = 200
# A title sits in the head: only the start of the body is searched, which bounds the work.
_TITLE_WINDOW_BYTES: Final = 256 * 1024
_TITLE_OPEN: Final = re.compile(r"<title\b[^>]{0,1000}>", re.IGNORECASE)
# A longer title is cut: only this much after the opening tag is read.
_TITLE_RAW_CHARS: Final = 4000
_CHARSET: Final = re.compile(r"charset\s*=\s*[\"']?([A-Za-z0-9_.:-]{1,40})", re.IGNORECASE)
_WHITESPACE: Final = re.compile(r"\s+")


def page_title(body: bytes, content_type: str | None) -> str | None:
    """The HTML ``<title>``, decoded leniently, unescaped, on one line, masked and capped."""
    if content_type is not None and "html" not in content_type.lower():
        return None
    text = body[:_TITLE_WINDOW_BYTES].decode(_encoding(content_type), errors="replace")
    opening = _TITLE_OPEN.search(text)
    if opening is None:
        return None
    raw = text[opening.end() : opening.end() + _TITLE_RAW_CHARS]
    closing = raw.lower().find("</title")
    if closing >= 0:
        raw = raw[:closing]
    title = mask_secrets(_WHITESPACE.sub(" ", html.unescape(raw)).strip())
    if len(title) > MAX_TITLE_CHARS:
        return title[:MAX_TITLE_CHARS] + "…"
    return title


def _encoding(content_type: str | None) -> str:
    declared = _CHARSET.search(content_type or "")
    if declared is not None:
        try:
            return codecs.lookup(declared.group(1)).name
        except LookupError:
            pass
    return "utf-8"


class ProbeUrl(Tool):
    name = "probe_url"
    description = (
        "Fetch a public http(s) URL once and report its status, content type and HTML title. "
        "Private, loopback and other internal addresses are refused; redirects are reported, "
        "not followed."
    )
    group = "rag"
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {"url": {"type": "string", "minLength": 1, "maxLength": 2048}},
            "required": ["url"],
            "additionalProperties": False,
        }
    )
    # A page anyone wrote; and the URL it asks for leaves the host (it can carry data out).
    integrity = Integrity.UNTRUSTED
    egress = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        from nrllm_core.net import FetchRefused, fetch_public

        settings = settings_or_error(context, self.name)
        if isinstance(settings, ToolResult):
            return settings
        url = arguments.get("url")
        if not isinstance(url, str) or not url.strip():
            return ToolResult.text("url: expected an http or https URL.")
        try:
            fetched = fetch_public(
                url, allow_hosts=settings.probe_allow_hosts, accept="text/html,*/*;q=0.5"
            )
        except FetchRefused as refused:
            # The guard's messages name only the redacted URL and a fixed reason.
            return ToolResult.text(f"Refused: {refused}")
        title = page_title(fetched.body, fetched.content_type)
        lines = [
            f"URL: {fetched.url}",
            f"Status: {fetched.status}",
            f"Content type: {mask_secrets(fetched.content_type or '(none)')[:200]}",
            f"Title: {title if title is not None else '(none)'}",
        ]
        return ToolResult.text("\n".join(lines))

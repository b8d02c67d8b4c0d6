"""Fetching a job's source through core's SSRF guard and reading its text.

Every message of :class:`IngestionFailed` is fixed or names the redacted URL only, so it can be
stored on the job and shown to anyone who may see the job.
"""

from __future__ import annotations

import io
from collections.abc import Collection
from typing import Final

from nrllm_core.log import logger
from nrllm_core.net import FetchRefused, fetch_public
from nrllm_repurpose._start import display_url

__all__ = ["MAX_PDF_PAGES", "IngestionFailed", "ingest"]

_MIB: Final = 1024 * 1024
PAGE_BYTES: Final = 5 * _MIB
PAGE_SECONDS: Final = 30.0
PDF_BYTES: Final = 50 * _MIB
PDF_SECONDS: Final = 120.0
MAX_PDF_PAGES: Final = 200


class IngestionFailed(Exception):
    """The source could not be read; the message is safe to store on the job."""


def ingest(url: str, source_type: str, *, allow_hosts: Collection[str] = ()) -> str:
    """The source's main text: a page's article text, or a PDF's text."""
    if source_type == "pdf_url":
        return _pdf(url, allow_hosts)
    if source_type == "url":
        return _page(url, allow_hosts)
    raise IngestionFailed(f"Unknown source type: {source_type}")


def _fetch(url: str, allow_hosts: Collection[str], *, pdf: bool) -> bytes:
    label = "PDF URL" if pdf else "URL"
    shown = display_url(url)
    try:
        result = fetch_public(
            url,
            max_bytes=PDF_BYTES if pdf else PAGE_BYTES,
            timeout=PDF_SECONDS if pdf else PAGE_SECONDS,
            allow_hosts=tuple(allow_hosts),
            accept="application/pdf" if pdf else "text/html,application/xhtml+xml",
        )
    except FetchRefused as exc:
        # The guard's messages name the redacted URL and a fixed reason only.
        raise IngestionFailed(str(exc)) from None
    if not 200 <= result.status < 300:
        raise IngestionFailed(f"{label} returned HTTP {result.status}: {shown}")
    if not result.body.strip():
        raise IngestionFailed(f"{label} returned an empty body: {shown}")
    return result.body


def _page(url: str, allow_hosts: Collection[str]) -> str:
    import trafilatura

    body = _fetch(url, allow_hosts, pdf=False)
    try:
        text = trafilatura.extract(body, include_comments=False, include_tables=True)
    except Exception as exc:
        logger().warning("nrllm.repurpose.extract_failed", error=type(exc).__name__)
        text = None
    if not text or not text.strip():
        raise IngestionFailed(f"No readable content extracted from: {display_url(url)}")
    return str(text).strip()


def _pdf(url: str, allow_hosts: Collection[str]) -> str:
    from pypdf import PdfReader

    body = _fetch(url, allow_hosts, pdf=True)
    shown = display_url(url)
    try:
        reader = PdfReader(io.BytesIO(body))
        if reader.is_encrypted:
            raise ValueError("encrypted")
        pages = reader.pages
        if len(pages) > MAX_PDF_PAGES:
            raise IngestionFailed(f"PDF has more than {MAX_PDF_PAGES} pages: {shown}")
        text = "\n\n".join(page.extract_text() or "" for page in pages)
    except IngestionFailed:
        raise
    except Exception as exc:
        logger().warning("nrllm.repurpose.pdf_failed", error=type(exc).__name__)
        raise IngestionFailed(
            f"PDF could not be parsed (possibly encrypted or damaged): {shown}"
        ) from None
    if not text.strip():
        raise IngestionFailed(f"No readable content extracted from: {shown}")
    return text.strip()

"""Fetching a job's source through core's SSRF guard and reading its text.

Every message of :class:`IngestionFailed` is fixed or names the redacted URL only, so it can be
stored on the job and shown to anyone who may see the job.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from nrllm_core.net import FetchRefused, fetch_public
from nrllm_repurpose._parse import ParseFailed, ParseLimits, Stop, parse
from nrllm_repurpose._parse_child import MAX_PDF_PAGES, MAX_TEXT_BYTES
from nrllm_repurpose._start import display_url

__all__ = ["IngestionFailed", "ingest"]

_MIB: Final = 1024 * 1024
PAGE_BYTES: Final = 5 * _MIB
PAGE_SECONDS: Final = 30.0
PDF_BYTES: Final = 50 * _MIB
PDF_SECONDS: Final = 120.0
_DEFAULT_LIMITS: Final = ParseLimits()


class IngestionFailed(Exception):
    """The source could not be read; the message is safe to store on the job."""


def ingest(
    url: str,
    source_type: str,
    *,
    allow_hosts: Collection[str] = (),
    limits: ParseLimits = _DEFAULT_LIMITS,
) -> str:
    """The source's main text: a page's article text, or a PDF's text.

    The body is fetched here and parsed in a child process within ``limits``."""
    if source_type not in ("url", "pdf_url"):
        raise IngestionFailed(f"Unknown source type: {source_type}")
    pdf = source_type == "pdf_url"
    body = _fetch(url, allow_hosts, pdf=pdf)
    try:
        text = parse(source_type, body, limits)
    except ParseFailed as failed:
        raise IngestionFailed(_failure(failed.stop, limits, url, pdf=pdf)) from None
    if not text:
        raise IngestionFailed(f"No readable content extracted from: {display_url(url)}")
    return text


def _failure(stop: Stop, limits: ParseLimits, url: str, *, pdf: bool) -> str:
    shown = display_url(url)
    messages = {
        Stop.CPU_LIMIT: f"Parsing stopped: CPU time limit of {limits.cpu_seconds} s reached",
        Stop.MEMORY_LIMIT: f"Parsing stopped: memory limit of {limits.memory_mib} MiB reached",
        Stop.TEXT_LIMIT: f"Parsing stopped: text limit of {MAX_TEXT_BYTES // _MIB} MiB reached",
        Stop.TIME_LIMIT: f"Parsing stopped: time limit of {limits.wall_seconds} s reached",
        Stop.TOO_MANY_PAGES: f"PDF has more than {MAX_PDF_PAGES} pages: {shown}",
        Stop.UNREADABLE: (
            f"PDF could not be parsed (possibly encrypted or damaged): {shown}"
            if pdf
            else f"No readable content extracted from: {shown}"
        ),
    }
    return messages[stop]


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

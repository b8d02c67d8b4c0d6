"""The chat tool ``start_repurpose_job``: it queues a job and answers with a fixed text."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from nrllm_core import DataClass, Effect, Integrity, Tool, ToolContext, ToolResult
from nrllm_core.log import logger
from nrllm_core.net import redact_url
from nrllm_repurpose._formats import FORMATS

__all__ = [
    "ARTIFACT_NAMES",
    "MAX_URL_BYTES",
    "REFUSALS",
    "JobRequest",
    "StartRepurposeJob",
    "check_request",
    "display_url",
]

ARTIFACT_NAMES: Final = tuple(FORMATS)
MAX_URL_BYTES: Final = 2000
PERMISSION: Final = "repurpose"
_NAMES: Final = ", ".join(ARTIFACT_NAMES)
_NOT_SHOWN: Final = "(URL not shown)"
# What PHP's trim() strips, which the original measured the URL after.
_TRIM: Final = " \t\n\r\0\x0b"

NOT_PERMITTED: Final = (
    "Not permitted: starting a repurpose job needs a user with the repurpose permission."
)
BAD_URL: Final = "source_url must be an absolute http(s) URL without credentials."
BAD_TYPE: Final = 'source_type must be "url" or "pdf_url".'
BAD_LIST: Final = f"artifacts must be a non-empty list of formats: {_NAMES}."
UNKNOWN_ARTIFACT: Final = f"Unknown artifact. Choose from: {_NAMES}."
NOT_STORED: Final = "The repurpose job could not be stored; nothing was started."
MISCONFIGURED: Final = "Repurpose jobs cannot be started: the [repurpose] settings are invalid."
REFUSALS: Final = (NOT_PERMITTED, BAD_URL, BAD_TYPE, BAD_LIST, UNKNOWN_ARTIFACT)

_DESCRIPTION: Final = (
    "Start ONE repurpose job: turn a web page or a PDF (given by URL) into the chosen formats. "
    "The job is queued and runs in the background; the answer is only the job's number. The "
    "source is sent to an AI provider and generation costs money, so every call is shown to a "
    "person for approval. Choose only the artifacts the user asked for."
)
_PARAMETERS: Final[Mapping[str, Any]] = {
    "type": "object",
    "properties": {
        "source_url": {
            "type": "string",
            "description": "The http(s) URL of the web page or PDF to repurpose.",
        },
        "source_type": {
            "type": "string",
            "enum": ["url", "pdf_url"],
            "description": "url for a web page (default), pdf_url for a PDF document.",
        },
        "artifacts": {
            "type": "array",
            "minItems": 1,
            "uniqueItems": True,
            "items": {"type": "string", "enum": list(ARTIFACT_NAMES)},
            "description": (
                "The formats to generate. podcast (script, audio where configured), schaubild "
                "(Mermaid diagram), story, exec_summary, faq, social_post, newsletter, "
                "slide_deck and handout (also as PDF)."
            ),
        },
    },
    "required": ["source_url", "artifacts"],
}


@final
@attrs.frozen(kw_only=True)
class JobRequest:
    """A call's arguments after the checks: the trimmed URL and the formats, duplicates gone."""

    source_url: str
    source_type: str
    formats: tuple[str, ...]


def display_url(url: str) -> str:
    """``scheme://host[:port]/path``, or ``(URL not shown)`` when that cannot be built."""
    return redact_url(url) or _NOT_SHOWN


def check_request(arguments: Mapping[str, Any]) -> JobRequest | str:
    """Checks 2 to 5 in order: the request, or the first failing check's fixed message."""
    url = arguments.get("source_url")
    if not isinstance(url, str) or not _is_job_url(url.strip(_TRIM)):
        return BAD_URL
    source_type = arguments.get("source_type", "url")
    if not isinstance(source_type, str) or source_type not in ("url", "pdf_url"):
        return BAD_TYPE
    artifacts = arguments.get("artifacts")
    if not isinstance(artifacts, list) or not artifacts:
        return BAD_LIST
    if not all(isinstance(name, str) and name in FORMATS for name in artifacts):
        return UNKNOWN_ARTIFACT
    return JobRequest(
        source_url=url.strip(_TRIM),
        source_type=source_type,
        formats=tuple(dict.fromkeys(artifacts)),
    )


def _is_job_url(url: str) -> bool:
    from urllib.parse import urlsplit

    try:
        # Strict: a lone surrogate cannot be stored, so it is refused here with check 2's text.
        size = len(url.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    if not url or size > MAX_URL_BYTES:
        return False
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - reading it validates the port
    except ValueError:
        return False
    return (
        parts.scheme.lower() in ("http", "https")
        and bool(parts.hostname)
        and parts.username is None
        and parts.password is None
        and "@" not in parts.netloc
    )


def _permitted(context: ToolContext) -> bool:
    actor = context.actor
    return bool(actor.id and actor.id.strip()) and actor.has_permission(PERMISSION)


class StartRepurposeJob(Tool):
    """Queue a repurpose job for the acting user; the worker does the rest, outside the run."""

    name = "start_repurpose_job"
    description = _DESCRIPTION
    group = "nr_repurpose"
    parameters = _PARAMETERS
    # The answer is the job's number, the caller's URL (redacted) and format names: nothing
    # from the source ever comes back into the run, which is what this class rests on.
    data_class = DataClass.EDITOR_CONTENT
    effect = Effect.NON_IDEMPOTENT_WRITE
    # Every call is shown to a person, whatever [policy] approve_writes says of writes: a job
    # costs provider money and publishes what it makes.
    requires_approval = True
    # A job costs provider money: an operator switches the tool on.
    enabled_by_default = False
    checks_own_arguments = True
    # It fetches an article anyone wrote, from a URL that leaves the host.
    integrity = Integrity.UNTRUSTED
    egress = DataClass.PUBLIC_CONTENT

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        if not _permitted(context):
            return ToolResult.error(NOT_PERMITTED)
        request = check_request(arguments)
        if isinstance(request, str):
            return ToolResult.error(request)
        from nrllm_repurpose._settings import SettingsError, load_settings

        try:
            settings = load_settings(context.settings)
        except SettingsError as exc:
            logger().error("nrllm.repurpose.settings_invalid", problem=str(exc))
            return ToolResult.error(MISCONFIGURED)
        uid = _store_job(settings.store_url, context.actor.id, request)
        if uid is None:
            return ToolResult.error(NOT_STORED)
        logger().info(
            "nrllm.repurpose.job_queued",
            job=uid,
            owner=context.actor.id,
            run_id=context.run_id,
            formats=list(request.formats),
        )
        return ToolResult.text(
            f"Started repurpose job #{uid} for {display_url(request.source_url)} "
            f"({', '.join(request.formats)}). It runs in the background; see its progress "
            f"with: nrllm repurpose jobs show {uid}"
        )

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        request = check_request(arguments)
        if isinstance(request, str):
            return [f"This call will be refused: {request}"]
        return [
            f"Source: {display_url(request.source_url)} ({request.source_type})",
            f"Formats: {', '.join(request.formats)}",
            "The source will be fetched and sent to the configured AI provider; "
            "generation costs money.",
        ]


def _store_job(url: str | None, owner: str, request: JobRequest) -> int | None:
    from sqlalchemy.exc import SQLAlchemyError

    from nrllm_core.store import default_data_dir
    from nrllm_repurpose._store import JobStore

    try:
        with JobStore.open(url, data_dir=default_data_dir()) as store:
            return store.create_job(
                owner=owner,
                source_type=request.source_type,
                source_url=request.source_url,
                formats=request.formats,
            )
    except SQLAlchemyError as exc:
        # The driver's text can hold the database URL and its password: the log gets the type.
        logger().error("nrllm.repurpose.store_failed", error=type(exc).__name__)
        return None

"""The inspector's routes: the page, its static modules, and a small JSON and NDJSON API."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from nrllm_core import _json
from nrllm_core._ask_values import PersonAnswer
from nrllm_core._gate import GateReport
from nrllm_core._host import Host
from nrllm_core._outcome import RunOutcome, pending_dict
from nrllm_core._payloads import TraceEvent
from nrllm_core._serde import wire_dict
from nrllm_core._status import RunStatus
from nrllm_core._suspension import ApprovalRefused, Review
from nrllm_core.inspector._approvals import preview_diff
from nrllm_core.inspector._guard import Guard
from nrllm_core.inspector._live import live_text
from nrllm_core.inspector._questions import PageQuestions, UnknownQuestion
from nrllm_core.inspector._runs import (
    BadQuery,
    Cursors,
    chain_verdict,
    parse_runs_query,
    recorded_level,
    run_totals,
)
from nrllm_core.inspector._stream import Emit, ndjson_response, step_event
from nrllm_core.log import logger

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["create_app"]

STATIC: Final = Path(__file__).parent / "static"
_MAX_BODY: Final = 1_000_000
# The waiting runs the inbox shows, newest first: each opens its sealed turn and checks its
# run's audit chain, so a store with thousands waiting must not make one answer of them all.
INBOX_PAGE: Final = 50


class _BadRequest(Exception):
    """A request the API refuses with 400; the message is written for the person at the page."""


def create_app(host: Host, *, token: str, questions: PageQuestions | None = None) -> Starlette:
    """The inspector as an ASGI application; mount it in a host's own app or serve it alone.

    Every request must carry ``token`` once (``?token=``), then the cookie it is swapped for.
    ``questions`` is the host's ``on_elicitation`` handler when the page answers a tool's
    question to a person in a live run; without it the host's own handler answers (or none).
    """
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles

    if questions is not None:
        questions.bind_timeout(lambda: host.config.run.tool_timeout_seconds)
    # Page cursors are signed with a key of this token: they hold for as long as it does.
    cursors = Cursors(hashlib.sha256(b"nrllm inspector page cursors\0" + token.encode()).digest())
    api = _Api(host, questions, cursors)
    routes = [
        Route("/", api.page, methods=["GET"]),
        Route("/api/config", api.config, methods=["GET"]),
        Route("/api/run", api.run, methods=["POST"]),
        Route("/api/invoke", api.invoke, methods=["POST"]),
        Route("/api/runs", api.runs, methods=["GET"]),
        Route("/api/runs/{run_id}", api.run_detail, methods=["GET"]),
        Route("/api/runs/{run_id}/verify", api.run_verify, methods=["GET"]),
        Route("/api/approvals", api.approvals, methods=["GET"]),
        Route("/api/approvals/{run_id}", api.decide, methods=["POST"]),
        Route("/api/questions/{question_id}", api.answer, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(Guard, token=token)])


class _Api:
    __slots__ = ("_cursors", "_host", "_questions")

    def __init__(self, host: Host, questions: PageQuestions | None, cursors: Cursors) -> None:
        self._host = host
        self._questions = questions
        self._cursors = cursors

    async def page(self, request: Request) -> Response:
        from starlette.responses import FileResponse

        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def config(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        def read() -> dict[str, Any]:
            config = self._host.config
            return {
                "providers": sorted(config.providers),
                "default_provider": config.defaults.provider,
                "skills": sorted(config.skills),
                "tools": sorted(self._host.pm.catalog().tools),
                "actor": config.actor().id,
                "privacy_level": config.privacy.level.value,
            }

        return _json_response(await run_in_threadpool(read))

    async def run(self, request: Request) -> Response:
        try:
            body = await _body(request)
            prompt = _required(body, "prompt")
            provider, skill = self._names(body)
            max_rounds = _rounds(body, self._host.config.run.max_rounds_cap)
        except _BadRequest as exc:
            return _refuse(str(exc))
        host = self._host
        questions = self._questions
        watched: list[str] = []

        def job(emit: Emit) -> None:
            def on_event(event: TraceEvent) -> None:
                # The run's first step names it: from then on its questions come to this page.
                if questions is not None and not watched:
                    watched.append(event.run_id)
                    questions.watch(event.run_id, emit)
                emit(step_event(event))

            actor = host.config.actor()
            emit(_context(host.gate(provider=provider, skill=skill, actor=actor)))
            try:
                stream = host.stream(
                    prompt,
                    provider=provider,
                    skill=skill,
                    max_rounds=max_rounds,
                    actor=actor,
                    on_event=on_event,
                )
                emit(_terminal(live_text(stream, emit)))
            finally:
                gone()

        def gone() -> None:
            if questions is not None and watched:
                questions.unwatch(watched[0])

        return ndjson_response(job, what="run", on_gone=gone)

    async def answer(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        if self._questions is None:
            return _json_response({"error": "No question is waiting for this page."}, status=404)
        try:
            body = await _body(request)
            answer = _person_answer(body)
        except _BadRequest as exc:
            return _refuse(str(exc))
        try:
            await run_in_threadpool(
                self._questions.answer, request.path_params["question_id"], answer
            )
        except UnknownQuestion:
            return _json_response({"error": "No question with this id is waiting."}, status=404)
        except ValueError as exc:
            # Fixed text of the check, about the answer's shape only.
            return _refuse(str(exc))
        return _json_response({"action": answer.action.value})

    async def invoke(self, request: Request) -> Response:
        try:
            body = await _body(request)
            tool = _required(body, "tool")
            arguments = body.get("arguments", {})
            if not isinstance(arguments, dict):
                raise _BadRequest("The arguments must be a JSON object.")
            provider = _text(body, "provider")
            if provider is not None and provider not in self._host.config.providers:
                raise _BadRequest(f'No provider named "{provider}" is configured.')
        except _BadRequest as exc:
            return _refuse(str(exc))
        host = self._host

        def job(emit: Emit) -> None:
            actor = host.config.actor()
            if provider is None:
                # A direct call by the person at the keyboard: no provider's gate applies.
                emit(
                    {
                        "event": "context",
                        "provider": None,
                        "zone": None,
                        "ceiling": None,
                        "skill": None,
                        "offered": [tool],
                        "direct": True,
                    }
                )
            else:
                emit(_context(host.gate(provider=provider, skill=None, actor=actor)))
            run_ids: list[str] = []

            def on_event(event: TraceEvent) -> None:
                run_ids.append(event.run_id)
                emit(step_event(event))

            wire = host.invoke(tool, arguments, provider=provider, actor=actor, on_event=on_event)
            emit(
                {
                    "event": "done",
                    "run_id": run_ids[0] if run_ids else None,
                    "status": "completed",
                    "final_content": wire.content,
                    "wire": wire_dict(wire),
                }
            )

        return ndjson_response(job, what="invoke")

    async def runs(self, request: Request) -> Response:
        """A page of runs, newest first, with the cursor of the next page (``null`` on the
        last); the filters and the cursor come in the query string."""
        from starlette.concurrency import run_in_threadpool

        try:
            query = parse_runs_query(request.query_params.multi_items())
            after = None if query.cursor is None else self._cursors.read(query.where, query.cursor)
        except BadQuery as exc:
            return _refuse(str(exc))

        def read() -> dict[str, Any]:
            # One more than the page: whether it exists tells if there is a next page.
            found = self._host.store.list_runs(
                where=query.where, after=after, limit=query.limit + 1
            )
            page = found[: query.limit]
            more = len(found) > query.limit
            return {
                "runs": [{**info.to_dict(), "steps": info.steps} for info in page],
                "next": self._cursors.make(query.where, page[-1]) if more else None,
                "limit": query.limit,
            }

        return _json_response(await run_in_threadpool(read))

    async def run_detail(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        run_id = request.path_params["run_id"]
        detail = await run_in_threadpool(self._host.store.get_run, run_id)
        if detail is None:
            return _json_response({"error": "No run with this id is stored."}, status=404)
        # The stored payload holds the step's own keys, filtered: one renderer reads both.
        # ``recorded_at`` (when the step was written, ISO 8601 UTC) places it in the waterfall.
        steps = [
            {
                "sequence": s.sequence,
                **s.payload,
                "recorded_at": s.recorded_at.isoformat() if s.recorded_at else None,
            }
            for s in detail.steps
        ]
        return _json_response(
            {
                "run": {**detail.run.to_dict(), "steps": detail.run.steps},
                "privacy_level": recorded_level(detail.steps),
                "totals": run_totals(detail.run, steps),
                "steps": steps,
                "decisions": [
                    {"tool": d.tool, "reason": d.reason, "zone": d.zone, "observed": d.observed}
                    for d in detail.decisions
                ],
            }
        )

    async def run_verify(self, request: Request) -> Response:
        """The check of ``nrllm runs verify RUN_ID``: whether the run's stored steps still
        chain, or where they first do not. Its own request: it reads every step's mac, which
        the run's view does not need to show its steps."""
        from starlette.concurrency import run_in_threadpool

        run_id = request.path_params["run_id"]
        try:
            check = await run_in_threadpool(self._host.store.verify, run_id)
        except (ValueError, LookupError) as exc:
            # A malformed key or a database that lost its own: the message names the
            # variable, never its value, as the CLI prints it.
            logger().warning("nrllm.inspector.verify_failed", reason=str(exc))
            return _json_response({"error": f"The chain could not be checked: {exc}"}, status=500)
        return _json_response(chain_verdict(check))

    async def approvals(self, request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        host = self._host

        def read() -> dict[str, Any]:
            config = host.config
            # The inspector decides as the configured actor, so it is that person's rights
            # the inbox shows: read once, as a decision reads it once.
            person = config.actor().id
            suspensions = host.flows.parts.suspensions
            inbox = []
            # One more than a page: whether more runs wait than the page shows.
            waiting = host.store.list_runs(RunStatus.AWAITING_APPROVAL, limit=INBOX_PAGE + 1)
            for info in waiting[:INBOX_PAGE]:
                entry: dict[str, Any] = {"run": info.to_dict()}
                try:
                    review = suspensions.review(
                        config,
                        info.run_id,
                        person=person,
                        content_kept=config.privacy.keeps_content,
                    )
                except ApprovalRefused as exc:
                    entry["error"] = _refusal_text(exc)
                else:
                    if review is None:
                        continue
                    entry.update(_review(review))
                inbox.append(entry)
            return {"approvals": inbox, "more": len(waiting) > INBOX_PAGE}

        return _json_response(await run_in_threadpool(read))

    async def decide(self, request: Request) -> Response:
        run_id = request.path_params["run_id"]
        try:
            body = await _body(request)
            approve = body.get("approve")
            if not isinstance(approve, bool):
                raise _BadRequest('"approve" must be true or false.')
            digest = _required(body, "turn_digest")
        except _BadRequest as exc:
            return _refuse(str(exc))
        host = self._host

        def job(emit: Emit) -> None:
            config = host.config
            actor = config.actor()
            stored = host.store.get_run(run_id)
            if stored is None:
                emit({"event": "error", "run_id": run_id, "error": "No run with this id."})
                return
            emit(
                _context(
                    host.gate(provider=stored.run.provider, skill=stored.run.skill, actor=actor)
                )
            )
            try:
                outcome = host.approve(
                    run_id,
                    approve=approve,
                    approver=actor.id,
                    turn_digest=digest,
                    on_event=_stepper(emit),
                )
            except ApprovalRefused as exc:
                emit({"event": "error", "run_id": run_id, "error": _refusal_text(exc)})
                return
            emit(_terminal(outcome))

        return ndjson_response(job, what="approval")

    def _names(self, body: dict[str, Any]) -> tuple[str | None, str | None]:
        config = self._host.config
        provider = _text(body, "provider") or config.defaults.provider
        if provider is None:
            raise _BadRequest("Choose a provider: none is named and none is the default.")
        if provider not in config.providers:
            raise _BadRequest(f'No provider named "{provider}" is configured.')
        skill = _text(body, "skill")
        if skill is not None and skill not in config.skills:
            raise _BadRequest(f'No skill named "{skill}" is configured.')
        return provider, skill


def _stepper(emit: Emit) -> Any:
    def on_event(event: TraceEvent) -> None:
        emit(step_event(event))

    return on_event


def _context(report: GateReport) -> dict[str, Any]:
    return {
        "event": "context",
        "provider": report.provider,
        "zone": report.zone.value,
        "ceiling": report.ceiling.value,
        "skill": report.skill,
        "offered": list(report.offered_names),
    }


def _review(review: Review) -> dict[str, Any]:
    """An inbox entry's turn: what _pending shows, when it expires, and whether the page's
    person may approve or deny it, with the rule's reason when not."""
    return {
        **_pending(review.outcome),
        "expires_at": review.expires_at.isoformat(),
        "may_approve": review.approve_refused is None,
        "approve_refused": _refused(review.approve_refused),
        "may_deny": review.deny_refused is None,
        "deny_refused": _refused(review.deny_refused),
    }


def _refused(refusal: ApprovalRefused | None) -> str | None:
    return None if refusal is None else _refusal_text(refusal)


def _pending(outcome: RunOutcome) -> dict[str, Any]:
    return {
        "run_id": outcome.run_id,
        "pending": [
            {
                **pending_dict(p),
                "preview_failed": p.preview_failed,
                # An update's before and after, compared here so the page only shows it.
                "preview_diff": preview_diff(p.preview),
            }
            for p in outcome.pending
        ],
        "turn_digest": outcome.turn_digest,
        # What could have steered the turn: excerpts only where the privacy level keeps them.
        "untrusted": outcome.to_dict()["untrusted"],
    }


def _terminal(outcome: RunOutcome) -> dict[str, Any]:
    if outcome.status is RunStatus.AWAITING_APPROVAL:
        return {"event": "awaiting_approval", **_pending(outcome)}
    if outcome.status is RunStatus.COMPLETED:
        return {
            "event": "done",
            "run_id": outcome.run_id,
            "status": outcome.status.value,
            "termination_reason": outcome.termination_reason,
            "final_content": outcome.final_content,
            "truncated": outcome.truncated,
            "usage": outcome.usage.to_dict(),
        }
    # The host's failure text is written to be shown (a provider error is already redacted).
    return {
        "event": "error",
        "run_id": outcome.run_id,
        "termination_reason": outcome.termination_reason,
        "error": outcome.error or "The run failed.",
    }


def _person_answer(body: dict[str, Any]) -> PersonAnswer:
    action = body.get("action")
    if action not in ("accept", "decline", "cancel"):
        raise _BadRequest('"action" must be "accept", "decline" or "cancel".')
    if action == "decline":
        return PersonAnswer.declined()
    if action == "cancel":
        return PersonAnswer.cancelled()
    content = body.get("content", {})
    if not isinstance(content, dict):
        raise _BadRequest('"content" must be a JSON object.')
    return PersonAnswer.accepted(content)


def _refusal_text(exc: ApprovalRefused) -> str:
    return str(exc)


async def _body(request: Request) -> dict[str, Any]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise _BadRequest("Send the request as application/json.")
    raw = bytearray()
    # Read no further than the bound: a body is never held whole before it is measured.
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > _MAX_BODY:
            raise _BadRequest("The request is too large.")
    try:
        body = _json.loads(bytes(raw))
    except ValueError:
        raise _BadRequest("The request is not valid JSON.") from None
    if not isinstance(body, dict):
        raise _BadRequest("The request must be a JSON object.")
    return body


def _text(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _BadRequest(f'"{key}" must be a string.')
    return value


def _required(body: dict[str, Any], key: str) -> str:
    value = _text(body, key)
    if value is None or not value.strip():
        raise _BadRequest(f'"{key}" is required.')
    return value


def _rounds(body: dict[str, Any], cap: int) -> int | None:
    """The rounds a run asks for, up to the host's ``[run] max_rounds_cap``."""
    value = body.get("max_rounds")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= cap:
        raise _BadRequest(f'"max_rounds" must be a whole number from 1 to {cap}.')
    return value


def _refuse(message: str) -> Response:
    logger().info("nrllm.inspector.refused", reason=message)
    return _json_response({"error": message}, status=400)


def _json_response(data: Any, *, status: int = 200) -> Response:
    from starlette.responses import Response

    return Response(
        _json.dumps(data),
        status_code=status,
        media_type="application/json",
        headers={"Cache-Control": "no-store"},
    )

"""A running tool's question to a person, put to the inspector page that runs it live.

The question goes out on the run's own NDJSON stream with an id made for it, random and
never sent anywhere else: only the page that reads that stream can answer (and only through
the guarded POST every state-changing request passes). The call waits on its own thread,
bounded by the run's tool time limit, then is answered ``cancel``; a page that goes away, or a
question of a run no live page watches, is answered ``decline``.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs

from nrllm_core._ask_values import PersonAnswer, PersonAnswered, Question, flat_fields
from nrllm_core.inspector._stream import Emit
from nrllm_core.log import logger

__all__ = ["PageQuestions", "UnknownQuestion"]

# How long a question waits for its run's live page to be known (its first step is read on
# the stream's thread, which may lag the call that asks).
_WATCH_GRACE_SECONDS: Final = 5.0


class UnknownQuestion(Exception):
    """No question with this id waits (never asked, answered already, or over)."""


@final
@attrs.define
class _Open:
    run_id: str
    fields: dict[str, Mapping[str, Any]]
    required: frozenset[str]
    answered: threading.Event = attrs.field(factory=threading.Event)
    answer: PersonAnswer | None = None


@final
class PageQuestions:
    """The inspector's ``on_elicitation`` handler: pass it to the host and to ``create_app``.

    ``timeout`` (seconds; the host's ``[run] tool_timeout_seconds`` when ``None``) bounds how
    long a question waits for the page's answer.
    """

    __slots__ = ("_changed", "_open", "_pages", "_timeout")

    def __init__(self, *, timeout: Callable[[], float] | None = None) -> None:
        self._changed = threading.Condition()
        self._pages: dict[str, Emit] = {}
        self._open: dict[str, _Open] = {}
        self._timeout = timeout

    def bind_timeout(self, timeout: Callable[[], float]) -> None:
        """Bound each wait by ``timeout()`` unless given a bound already."""
        if self._timeout is None:
            self._timeout = timeout

    def watch(self, run_id: str, emit: Emit) -> None:
        """The live page of ``run_id`` reads what ``emit`` sends."""
        with self._changed:
            self._pages[run_id] = emit
            self._changed.notify_all()

    def unwatch(self, run_id: str) -> None:
        """The page of ``run_id`` is gone (or its stream ended): its open questions are
        declined."""
        with self._changed:
            self._pages.pop(run_id, None)
            for question in self._open.values():
                if question.run_id == run_id and question.answer is None:
                    question.answer = PersonAnswer.declined()
                    question.answered.set()

    def answer(self, question_id: str, answer: PersonAnswer) -> None:
        """Hand ``answer`` to the call waiting on ``question_id``.

        Raises :class:`UnknownQuestion` when none waits, :class:`ValueError` (fixed text,
        safe to show) when an accepted answer does not fit the question's fields.
        """
        with self._changed:
            question = self._open.get(question_id)
            if question is None or question.answer is not None:
                raise UnknownQuestion(question_id)
            if answer.action is PersonAnswered.ACCEPT:
                answer = PersonAnswer.accepted(_checked(question, answer.content or {}))
            question.answer = answer
            question.answered.set()

    def __call__(self, question: Question) -> PersonAnswer:
        fields = flat_fields(question.schema)
        emit = self._page(question.run_id)
        if fields is None or emit is None:
            # A form this page cannot show, or nobody to show it to.
            return PersonAnswer.declined()
        question_id = secrets.token_urlsafe(16)
        waiting = _Open(run_id=question.run_id, fields=fields, required=_required(question.schema))
        with self._changed:
            self._open[question_id] = waiting
        try:
            emit(
                {
                    "event": "question",
                    "question_id": question_id,
                    "call_id": question.call_id,
                    "tool": question.tool,
                    "message": question.message,
                    "fields": [
                        _field(name, field, question.schema) for name, field in fields.items()
                    ],
                }
            )
            limit = 60.0 if self._timeout is None else self._timeout()
            answered = waiting.answered.wait(timeout=limit)
            with self._changed:
                if not answered or waiting.answer is None:
                    # Nobody answered in time: cancelled, and said so on the page.
                    waiting.answer = PersonAnswer.cancelled()
                answer = waiting.answer
        finally:
            with self._changed:
                self._open.pop(question_id, None)
        logger().info(
            "nrllm.inspector.question_answered", run_id=question.run_id, action=answer.action.value
        )
        emit(
            {"event": "question_closed", "question_id": question_id, "action": answer.action.value}
        )
        return answer

    def _page(self, run_id: str) -> Emit | None:
        with self._changed:
            self._changed.wait_for(lambda: run_id in self._pages, timeout=_WATCH_GRACE_SECONDS)
            return self._pages.get(run_id)


def _required(schema: Mapping[str, Any]) -> frozenset[str]:
    """The fields an accepted answer must fill: the schema's ``required`` names."""
    required = schema.get("required")
    if not isinstance(required, list):
        return frozenset()
    return frozenset(name for name in required if isinstance(name, str))


def _field(name: str, field: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """One field as the page builds its input: text the page shows as text."""
    choices = field.get("enum")
    return {
        "name": name,
        "type": field.get("type"),
        "title": field.get("title") if isinstance(field.get("title"), str) else None,
        "description": (
            field.get("description") if isinstance(field.get("description"), str) else None
        ),
        "enum": (
            choices
            if isinstance(choices, list) and all(isinstance(c, str) for c in choices)
            else None
        ),
        "required": name in _required(schema),
    }


def _checked(question: _Open, content: Mapping[str, Any]) -> dict[str, Any]:
    """``content`` if it fills the question's fields as their schema says; :class:`ValueError`
    if not."""
    if not set(content) <= set(question.fields):
        raise ValueError("The answer has a field the question did not ask for.")
    if not question.required <= set(content):
        raise ValueError("The answer leaves out a field the question requires.")
    for name, value in content.items():
        field = question.fields[name]
        choices = field.get("enum")
        kind = field.get("type")
        if isinstance(choices, list) and value not in choices:
            raise ValueError("An answer is not one of its field's choices.")
        if kind == "boolean":
            fits = isinstance(value, bool)
        elif kind == "integer":
            fits = isinstance(value, int) and not isinstance(value, bool)
        elif kind == "number":
            fits = isinstance(value, int | float) and not isinstance(value, bool)
        else:
            fits = isinstance(value, str)
        if not fits:
            raise ValueError("An answer does not have its field's type.")
    return dict(content)

"""What a running tool may ask of its run: a model's completion, or a person's answer.

Each ask is a step of the calling run (``sampling`` or ``elicitation``), privacy-filtered as
any model request is. A model is asked only when its provider's trust zone admits the calling
tool's data class, with no tools and a bounded answer; a person is asked only through the
host's handler, and nothing of the question or the answer reaches the run's model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, final

import attrs

from nrllm_core._ask_values import (
    MAX_TOKENS_LIMIT,
    AskRefused,
    PersonAnswer,
    Question,
    QuestionHandler,
)
from nrllm_core._bounds import bound_content
from nrllm_core._messages import ProviderError
from nrllm_core._payloads import RunStep, StepKind
from nrllm_core._providers import build_provider, closed, complete
from nrllm_core._values import DataClass
from nrllm_core.log import logger

if TYPE_CHECKING:
    from nrllm_core._config import HostConfig
    from nrllm_core._manager import PluginManager
    from nrllm_core._messages import ChatMessage, ProviderAnswer
    from nrllm_core._recorder import RunRecorder

__all__ = ["CallAsks", "RunAsks"]


@final
class RunAsks:
    """What one run segment's calls may ask: its host's configuration and providers, its
    recorder, and the host's question handler (``None``: every question is declined)."""

    __slots__ = ("_config", "_environ", "_lock", "_on_question", "_pm", "_recorder")

    def __init__(
        self,
        *,
        pm: PluginManager,
        config: HostConfig,
        environ: Mapping[str, str],
        recorder: RunRecorder,
        on_question: QuestionHandler | None,
    ) -> None:
        self._pm = pm
        self._config = config
        self._environ = environ
        self._recorder = recorder
        self._on_question = on_question
        # A person answers one question at a time, however many calls ask at once.
        self._lock = threading.Lock()

    def of_call(self, call_id: str) -> CallAsks:
        """The asks of one call, before its tool is admitted (:meth:`CallAsks.of`)."""
        return CallAsks(run=self, call_id=call_id)


@final
@attrs.frozen(kw_only=True)
class CallAsks:
    """What one call may ask of its run (``ToolContext.ask_model``, ``ask_person``): the
    run binds it to the tool admitted for the call, whose data class decides which model may read
    what the call sends. Unbound, every ask is refused."""

    run: RunAsks
    call_id: str
    # The admitted tool's name and data class; ``None`` until the call is admitted.
    tool: str | None = None
    data_class: DataClass | None = None

    def of(self, tool: str, data_class: DataClass) -> CallAsks:
        return CallAsks(run=self.run, call_id=self.call_id, tool=tool, data_class=data_class)

    def model(
        self,
        provider: str,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        refused: str | None = None,
    ) -> ProviderAnswer:
        tool, data_class = self._tool()
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise AskRefused("max_tokens must be a positive integer")
        max_tokens = min(max_tokens, MAX_TOKENS_LIMIT)
        fields: dict[str, Any] = {
            "tool_name": tool,
            "tool_call_id": self.call_id,
            "provider": provider,
            "data_class": data_class.value,
            "max_tokens": max_tokens,
            "messages_sent": [m.to_dict() for m in messages],
        }
        started = time.perf_counter()
        try:
            if refused is not None:
                # The tool refused the request itself: recorded as any refusal, never asked.
                raise AskRefused(refused)
            answer = self._complete(provider, messages, max_tokens)
        except AskRefused as refusal:
            fields["refused"] = str(refusal)
            self._record(StepKind.SAMPLING, started, fields)
            logger().info("nrllm.ask.model_refused", tool=tool, provider=provider)
            raise
        fields.update(
            # The provider's words: masked and cut below ``full`` as a request's answer's are.
            response_model=answer.response_model,
            content=answer.content,
            finish_reason=answer.finish_reason,
            usage=answer.usage.to_dict(),
        )
        if not self._record(StepKind.SAMPLING, started, fields):
            # The ask is not in the audit: its answer is not handed on.
            raise AskRefused("the request could not be written to the audit")
        return answer

    def _tool(self) -> tuple[str, DataClass]:
        if self.tool is None or self.data_class is None:
            raise AskRefused("the call's tool is not known: it was not admitted")
        return self.tool, self.data_class

    def _complete(
        self, name: str, messages: Sequence[ChatMessage], max_tokens: int
    ) -> ProviderAnswer:
        config, (_, data_class) = self.run._config, self._tool()
        settings = config.providers.get(name)
        if settings is None:
            raise AskRefused(f'no provider named "{name}" is configured')
        zone = config.zone_for(name)
        if not zone.permits(data_class):
            raise AskRefused(
                f'provider "{name}" is in zone {zone.value}, whose ceiling does not admit '
                f"{data_class.value} data"
            )
        section = _bounded(settings.section(), max_tokens)
        try:
            provider = build_provider(
                self.run._pm.provider_registry(),
                name,
                section,
                config_dir=config.config_dir,
                environ=self.run._environ,
            )
        except ProviderError:
            raise AskRefused(f'provider "{name}" could not be built') from None
        try:
            # No tools: a model asked by a tool is never offered any.
            return complete(provider, list(messages), [])
        except ProviderError as exc:
            # Its text may quote the provider's answer, free text a metadata-only audit never
            # keeps, nor the tool (an MCP server) needs: the log has it.
            logger().warning("nrllm.ask.model_failed", provider=name, error=str(exc))
            raise AskRefused(f'provider "{name}" failed') from None
        finally:
            closed(provider)

    def person(self, message: str, schema: Mapping[str, Any]) -> PersonAnswer:
        run, (tool, _) = self.run, self._tool()
        # Bounded as a tool's content is: it goes to a person's screen and to the audit.
        message = bound_content(message)
        question = Question(
            run_id=run._recorder.run_id,
            call_id=self.call_id,
            tool=tool,
            message=message,
            schema=dict(schema),
        )
        started = time.perf_counter()
        answer = PersonAnswer.declined()
        if run._on_question is not None:
            answer = _answer(run._on_question, question, run._lock)
        fields = {
            "tool_name": tool,
            "tool_call_id": self.call_id,
            "asked": run._on_question is not None,
            "question": {"message": message, "schema": dict(schema)},
            "action": answer.action.value,
            "answer": None if answer.content is None else dict(answer.content),
        }
        if not self._record(StepKind.ELICITATION, started, fields):
            return PersonAnswer.cancelled()
        return answer

    def _record(self, kind: StepKind, started: float, fields: dict[str, Any]) -> bool:
        recorder = self.run._recorder
        return recorder.record(
            RunStep(
                kind=kind,
                round=recorder.round,
                duration_ms=(time.perf_counter() - started) * 1000,
                fields=fields,
            )
        )


def _answer(handler: QuestionHandler, question: Question, lock: threading.Lock) -> PersonAnswer:
    """The handler's answer; cancelled when it fails or answers something else (a host's
    handler is its own code, and the tool waits for it)."""
    with lock:
        try:
            answer: object = handler(question)
        except Exception:
            logger().error("nrllm.ask.person_failed", tool=question.tool, exc_info=True)
            return PersonAnswer.cancelled()
    if not isinstance(answer, PersonAnswer):
        logger().error("nrllm.ask.no_person_answer", returned=type(answer).__name__)
        return PersonAnswer.cancelled()
    return answer


def _bounded(section: dict[str, Any], most: int) -> dict[str, Any]:
    """The provider's section asking for at most ``most`` tokens, through the setting it
    already uses (OpenAI's ``max_completion_tokens`` or the common ``max_tokens``)."""
    key = "max_completion_tokens" if section.get("max_completion_tokens") else "max_tokens"
    configured = section.get(key)
    section[key] = most if configured is None else min(configured, most)
    return section

"""What a server asks the client during a call: a model's completion (``sampling``) and the
person's answer (``elicitation``), each put to the calling run (``ToolContext.ask_model``,
``ToolContext.ask_person``), where the run's zone and its audit govern it.

A server may ask only what its settings turn on, and only during a call of one of its tools:
a session whose server may ask runs one call at a time, so each request belongs to the call in
flight, and a request with none in flight is refused. The answers go to the server only; the
run's model never sees a question or what the helper model said.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, final

from nrllm_core import AskRefused, ChatMessage, ToolContext
from nrllm_core.log import logger
from nrllm_mcp._runner import Abandoned

if TYPE_CHECKING:
    from nrllm_mcp._settings import ServerSettings

__all__ = ["Asking"]

# The most text one sampling request may send to a model.
_MAX_SAMPLING_BYTES: Final = 65_536
# How often a call waiting for the session's turn looks at whether it was abandoned.
_TURN_POLL_SECONDS: Final = 0.05


@final
class _InFlight:
    """The call whose server's requests are answered now, and how many models it asked."""

    __slots__ = ("context", "samples")

    def __init__(self, context: ToolContext) -> None:
        self.context = context
        self.samples = 0


@final
class Asking:
    """One session's answers to its server's requests, as its settings allow them."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self._turn = threading.Lock()
        self._current: _InFlight | None = None

    @property
    def enabled(self) -> bool:
        return self.settings.sampling is not None or self.settings.elicitation

    def callbacks(self) -> dict[str, Any]:
        """The ``ClientSession`` callbacks this server may use: none unless configured, so
        the client declares no capability it would refuse."""
        callbacks: dict[str, Any] = {}
        if self.settings.sampling is not None:
            callbacks["sampling_callback"] = self._sampling
        if self.settings.elicitation:
            callbacks["elicitation_callback"] = self._elicitation
        return callbacks

    @contextlib.contextmanager
    def turn(
        self, context: ToolContext | None, abandoned: threading.Event | None
    ) -> Iterator[None]:
        """Hold the session for one call while its server may ask; raises
        :class:`~nrllm_mcp._runner.Abandoned` when the call is abandoned before its turn."""
        if not self.enabled:
            yield
            return
        while not self._turn.acquire(timeout=_TURN_POLL_SECONDS):
            if abandoned is not None and abandoned.is_set():
                raise Abandoned
        try:
            self._current = None if context is None else _InFlight(context)
            yield
        finally:
            self._current = None
            self._turn.release()

    # -- on the plugin's loop -----------------------------------------------------------------

    async def _sampling(self, ctx: Any, params: Any) -> Any:
        from mcp.types import INVALID_REQUEST, CreateMessageResult, ErrorData, TextContent

        settings, current = self.settings, self._current
        provider = settings.sampling or ""
        if current is None:
            # No run to record it in: logged only.
            reason = "no call of this server is in flight"
            logger().warning("nrllm.mcp.sampling_refused", server=settings.name, reason=reason)
            return ErrorData(code=INVALID_REQUEST, message=reason)
        refused = self._sampling_refusal(current, params)
        messages = _messages(params)
        if refused is None and messages is None:
            refused = "only text messages, of at most 64 KiB, can be sampled"
        if refused is not None:
            logger().warning("nrllm.mcp.sampling_refused", server=settings.name, reason=refused)
        else:
            current.samples += 1
        max_tokens = min(params.max_tokens, settings.sampling_max_tokens)
        try:
            answer = await asyncio.to_thread(
                current.context.ask_model,
                provider,
                messages or [],
                max_tokens=max_tokens,
                refused=refused,
            )
        except AskRefused as refusal:
            return ErrorData(code=INVALID_REQUEST, message=str(refusal))
        return CreateMessageResult(
            role="assistant",
            content=TextContent(text=answer.content),
            model=answer.response_model or provider,
            stop_reason=_STOP_REASONS.get(answer.stop.value),
        )

    def _sampling_refusal(self, current: _InFlight, params: Any) -> str | None:
        if params.tools or params.tool_choice is not None:
            return "a server is never given tools through sampling"
        if current.samples >= self.settings.sampling_max_requests:
            return f"at most {self.settings.sampling_max_requests} sampling requests per call"
        return None

    async def _elicitation(self, ctx: Any, params: Any) -> Any:
        from mcp.types import INVALID_REQUEST, ElicitRequestFormParams, ElicitResult, ErrorData

        current = self._current
        if current is None:
            reason = "no call of this server is in flight"
            logger().warning("nrllm.mcp.elicitation_refused", server=self.settings.name)
            return ErrorData(code=INVALID_REQUEST, message=reason)
        if not isinstance(params, ElicitRequestFormParams):
            # A URL to open: a run never opens a browser, and a person is not sent to a link
            # a server chose.
            logger().info("nrllm.mcp.elicitation_url_declined", server=self.settings.name)
            return ElicitResult(action="decline")
        schema = dict(params.requested_schema)
        answer = await asyncio.to_thread(current.context.ask_person, params.message, schema)
        content = None if answer.content is None else dict(answer.content)
        return ElicitResult(action=answer.action.value, content=content)


_STOP_REASONS: Final = {"end": "endTurn", "length": "maxTokens"}


def _messages(params: Any) -> list[ChatMessage] | None:
    """The request's messages as a transcript; ``None`` when one is not text or they are
    too long."""
    from mcp.types import TextContent

    out = [ChatMessage.system(params.system_prompt)] if params.system_prompt else []
    size = len((params.system_prompt or "").encode())
    for message in params.messages:
        parts = message.content if isinstance(message.content, list) else [message.content]
        if not all(isinstance(part, TextContent) for part in parts):
            return None
        text = "\n".join(part.text for part in parts)
        size += len(text.encode())
        maker = ChatMessage.user if message.role == "user" else ChatMessage.assistant
        out.append(maker(text))
    return out if size <= _MAX_SAMPLING_BYTES else None

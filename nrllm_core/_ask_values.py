"""What a running tool may ask of its run, as the tool and the host see it: a refusal, a
question for a person and its answer, and the asks a call's context carries."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol, final

import attrs

from nrllm_core._values import DataClass

if TYPE_CHECKING:
    from nrllm_core._messages import ChatMessage, ProviderAnswer

__all__ = [
    "MAX_TOKENS_LIMIT",
    "AskRefused",
    "PersonAnswer",
    "PersonAnswered",
    "Question",
    "QuestionHandler",
    "ToolAsks",
    "flat_fields",
]

# The most tokens a tool may ask a model for, whatever it asks.
MAX_TOKENS_LIMIT: Final = 32_768


class AskRefused(Exception):
    """The run refused what a tool asked of it; the message is fixed text, safe to show."""


class PersonAnswered(enum.StrEnum):
    """What the person did with a question, in MCP's words."""

    ACCEPT = "accept"
    DECLINE = "decline"
    CANCEL = "cancel"


@final
@attrs.frozen(kw_only=True)
class Question:
    """What a tool asks a person: its ``message`` and the JSON Schema of the answer it
    wants, as the tool passed them (text a tool's server wrote: show it as text, never as
    markup). ``tool`` and ``run_id`` say who asks, and in which run."""

    run_id: str
    call_id: str
    tool: str
    message: str
    schema: Mapping[str, Any]


@final
@attrs.frozen(kw_only=True)
class PersonAnswer:
    """A person's answer to a :class:`Question`: ``content`` only when accepted."""

    action: PersonAnswered
    content: Mapping[str, Any] | None = None

    @classmethod
    def accepted(cls, content: Mapping[str, Any]) -> PersonAnswer:
        return cls(action=PersonAnswered.ACCEPT, content=dict(content))

    @classmethod
    def declined(cls) -> PersonAnswer:
        return cls(action=PersonAnswered.DECLINE)

    @classmethod
    def cancelled(cls) -> PersonAnswer:
        return cls(action=PersonAnswered.CANCEL)


# The most fields one question may ask for: a schema is the server's, a form is a person's.
_MAX_FIELDS: Final = 20
_FIELD_TYPES: Final = frozenset({"string", "number", "integer", "boolean"})


def flat_fields(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]] | None:
    """The fields of a question's schema when it is the flat object MCP allows (strings,
    numbers, integers, booleans, enumerations; at most 20); ``None`` for any other shape,
    which a person cannot be asked to fill in (the question is declined)."""
    properties = schema.get("properties", {})
    if not isinstance(properties, Mapping) or len(properties) > _MAX_FIELDS:
        return None
    fields: dict[str, Mapping[str, Any]] = {}
    for name, field in properties.items():
        if not isinstance(name, str) or not isinstance(field, Mapping):
            return None
        if field.get("type") not in _FIELD_TYPES:
            return None
        fields[name] = field
    return fields


# What a host hands its runs to put a tool's question to a person.
QuestionHandler = Callable[[Question], PersonAnswer]


class ToolAsks(Protocol):
    """What a call's context may ask of its run (``ToolContext.asks``); a run makes it, and
    each call runs with it bound to the tool admitted for it (:meth:`of`)."""

    def of(self, tool: str, data_class: DataClass) -> ToolAsks: ...

    def model(
        self,
        provider: str,
        messages: Sequence[ChatMessage],
        max_tokens: int,
        refused: str | None = None,
    ) -> ProviderAnswer: ...

    def person(self, message: str, schema: Mapping[str, Any]) -> PersonAnswer: ...

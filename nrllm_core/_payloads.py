"""The separately typed payloads each sink receives: wire, trace, audit."""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from typing import Any, TypeVar, cast, final

import attrs

from nrllm_core._values import ToolArtifact

__all__ = ["AuditRecord", "RunStep", "StepKind", "TraceEvent", "WirePayload", "builder"]

_T = TypeVar("_T", bound=attrs.AttrsInstance)
_INIT_HOOKS = ("__attrs_pre_init__", "__attrs_post_init__")


def builder(cls: type[_T]) -> type[_T]:
    """A keyword-only constructor for the slotted attrs class ``cls`` that makes the same
    instance as ``cls(...)`` given every field, at about half the cost.

    ``cls(...)`` goes through ``type.__call__`` with a dict of keywords, and attrs writes each
    field of a frozen class through a bound ``object.__setattr__``; this one makes the instance
    and writes its slots directly. The seam builds several such objects on every tool call.
    Only for classes whose ``__init__`` does nothing else (no validator, converter, alias or
    init hook): any other is refused. Typed as the class, so that mypy checks each call's
    keywords against its fields.
    """
    fields = attrs.fields(cls)
    plain = all(
        f.init and f.validator is None and f.converter is None and f.alias == f.name for f in fields
    )
    slots = all(isinstance(cls.__dict__.get(f.name), types.MemberDescriptorType) for f in fields)
    if not plain or not slots or any(hasattr(cls, hook) for hook in _INIT_HOOKS):
        raise TypeError(f"{cls.__name__} is not a plain slotted attrs class")
    names = [f.name for f in fields]
    # Field names are identifiers from the class's own source, so the generated code is too.
    source = "\n".join(
        [
            f"def build(*, {', '.join(names)}):",
            "    instance = new(cls)",
            *(f"    set_{name}(instance, {name})" for name in names),
            "    return instance",
        ]
    )
    namespace: dict[str, Any] = {"new": object.__new__, "cls": cls}
    namespace.update((f"set_{name}", cls.__dict__[name].__set__) for name in names)
    exec(source, namespace)
    namespace["build"].__qualname__ = f"builder({cls.__qualname__})"
    return cast(type[_T], namespace["build"])


@final
@attrs.frozen(kw_only=True)
class WirePayload:
    """What the model provider receives for one tool call. There is no artifact field."""

    call_id: str
    tool_name: str
    content: str
    is_error: bool


class StepKind(enum.StrEnum):
    """What a run step records. ``start``, ``suspension`` and ``finish`` bound a run segment:
    a run's first segment and every resumed one start with ``start``; each ends with
    ``finish``, or with ``suspension`` when a turn waits for a person."""

    START = "start"
    REQUEST = "request"
    LLM = "llm"
    TOOL = "tool"
    GATE = "gate"
    APPROVAL = "approval"
    # What a running call asked of its run: a model's completion, a person's answer.
    SAMPLING = "sampling"
    ELICITATION = "elicitation"
    SUSPENSION = "suspension"
    FINISH = "finish"


@final
@attrs.frozen(kw_only=True)
class RunStep:
    """One step of a run, unfiltered. ``fields`` hold the step's kind-specific keys."""

    kind: StepKind
    round: int
    duration_ms: float
    fields: Mapping[str, Any] = attrs.field(factory=dict)
    tool_artifacts: tuple[ToolArtifact, ...] = ()

    def head(self) -> dict[str, Any]:
        """The keys every step has: ``kind``, ``round``, ``duration_ms``."""
        return {
            # ``_value_``: the plain string, without ``.value``'s descriptor call.
            "kind": self.kind._value_,
            "round": self.round,
            "duration_ms": round(self.duration_ms, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        """The step as JSON data; ``tool_artifacts`` is absent when there are none."""
        out = self.head()
        out.update((k, v) for k, v in self.fields.items() if v is not None)
        if self.tool_artifacts:
            out["tool_artifacts"] = [a.to_dict() for a in self.tool_artifacts]
        return out


@final
@attrs.frozen(kw_only=True)
class TraceEvent:
    """A run step for the live stream and the inspector, with bounded artifacts."""

    run_id: str
    sequence: int
    step: RunStep


@final
@attrs.frozen(kw_only=True)
class AuditRecord:
    """The copy of a run step that may be persisted: ``payload`` is already privacy-filtered.

    ``guards`` says whether the step records what is about to happen, so it must be durable
    before that happens; the recorder decides it from the unfiltered step, never from the keys
    that survive the filter. Unset, a record guards (the strict side).
    """

    run_id: str
    sequence: int
    kind: StepKind
    round: int
    duration_ms: float
    payload: Mapping[str, Any]
    guards: bool = True

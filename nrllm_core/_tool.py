"""What a tool author implements: the ``Tool`` base class and the ``@tool`` decorator."""

from __future__ import annotations

import copy
import inspect
import math
import re
import threading
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, final

import attrs

from nrllm_core._json import is_json
from nrllm_core._values import Actor, DataClass, Effect, Integrity, ToolResult

if TYPE_CHECKING:
    from nrllm_core._ask_values import PersonAnswer, ToolAsks
    from nrllm_core._messages import ChatMessage, ProviderAnswer

__all__ = ["NAME_PATTERN", "NO_SETTINGS", "Tool", "ToolContext", "tool"]

NAME_PATTERN: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_EMPTY_OBJECT: Final[Mapping[str, Any]] = types.MappingProxyType(
    {"type": "object", "properties": {}, "additionalProperties": False}
)
# No settings at all; read-only over a dict nothing else holds, so every context can share it.
NO_SETTINGS: Final[Mapping[str, Any]] = types.MappingProxyType({})


@final
@attrs.frozen(kw_only=True)
class ToolContext:
    """Who a call acts for and where: handed to ``Tool.execute``.

    ``settings`` is, as a host builds the context, every plugin's settings by section name
    (``HostConfig.plugin_settings``). The seam hands the tool a copy that holds its own
    plugin's section only: an instance of the plugin's settings class
    (``nrllm_settings_class``), else a read-only mapping, ``{}`` when there is none.

    ``deps`` is what the host passed for this run (``Host.run(..., deps=...)``): its own
    process objects (a database session, a tenant, a client), never sealed, recorded or sent
    anywhere; ``None`` when the host passed none. A tool types it where it reads it
    (``env: Env = context.deps``).

    ``abandoned`` is set once the host no longer waits for the call: its run was cancelled
    (``Host.cancel``) or it passed ``[run] tool_timeout_seconds``. A sync tool cannot be
    stopped; one that waits on something it can stop (a request to a server) may watch it.
    ``None`` outside a run's turn.

    ``on_progress`` is set by a host whose run is streamed (``Host.stream``): a long call
    reports how far it got with :meth:`report_progress`, which reaches the reader as a
    ``ToolProgress`` event. ``None`` when nobody watches.
    """

    run_id: str
    call_id: str
    actor: Actor
    settings: Any = NO_SETTINGS
    deps: Any = None
    on_progress: Callable[[float, float | None, str | None], None] | None = None
    abandoned: threading.Event | None = None
    asks: ToolAsks | None = None

    def ask_model(
        self,
        provider: str,
        messages: Sequence[ChatMessage],
        *,
        max_tokens: int,
        refused: str | None = None,
    ) -> ProviderAnswer:
        """A completion of ``messages`` by the configured ``provider``, offered no tools and
        asked for at most ``max_tokens``, recorded as a ``sampling`` step of the run. Raises
        :class:`AskRefused` (its message safe to show) when there is no run, the provider is
        unknown, its zone's ceiling is below this tool's data class, or it fails. A tool that
        refuses a request itself (``refused``: why, fixed text) has it recorded the same way,
        and the model is not asked."""
        from nrllm_core._ask_values import AskRefused

        if self.asks is None:
            raise AskRefused("a model can be asked only from a call of a run")
        return self.asks.model(provider, messages, max_tokens, refused)

    def ask_person(self, message: str, schema: Mapping[str, Any]) -> PersonAnswer:
        """The answer of the person the host asks (``Host(on_question=...)``) to ``message``,
        the answer's shape given by the JSON Schema ``schema``; recorded as an
        ``elicitation`` step of the run, never shown to the model. Declined when there is no
        run or the host has no one to ask."""
        from nrllm_core._ask_values import PersonAnswer

        if self.asks is None:
            return PersonAnswer.declined()
        return self.asks.person(message, schema)

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        """Tell whoever watches the run how far this call got (``progress`` of ``total``,
        when known, and a short ``message``). Does nothing when nobody watches; never
        raises."""
        if self.on_progress is None:
            return
        try:
            self.on_progress(progress, total, message)
        except Exception:
            from nrllm_core.log import logger

            logger().error("nrllm.tool.progress_failed", call_id=self.call_id, exc_info=True)


class Tool:
    """Subclass this to write a tool; or decorate a function with :func:`tool`.

    The data class, the effect, the integrity of its results (``None``: untrusted) and its
    egress (the most sensitive data class it may send out of the host, ``None`` when it sends
    nothing out) are properties of the code: host configuration cannot change them.
    """

    name: str
    description: str
    group: str
    parameters: Mapping[str, Any] = _EMPTY_OBJECT
    # The JSON Schema the seam checks arguments against, when it is not the one a model is
    # offered: an MCP server's schema as the server gave it, offered cleaned and cut down.
    argument_schema: Mapping[str, Any] | None = None
    data_class: DataClass | None = None
    effect: Effect = Effect.READ_ONLY
    requires_approval: bool = False
    enabled_by_default: bool = True
    requires_admin: bool = False
    checks_own_arguments: bool = False
    integrity: Integrity | None = None
    egress: DataClass | None = None

    def execute(
        self, arguments: dict[str, Any], context: ToolContext
    ) -> ToolResult | Awaitable[ToolResult]:
        """Run the call; ``arguments`` come from the model and are hostile.

        May be ``async def``: the async host awaits it on its event loop, the sync host runs
        it on a private event loop thread. A sync ``execute`` runs in a worker thread.
        """
        raise NotImplementedError

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        """Lines shown to the person who approves a call; ``None`` offers no preview."""
        return None


class _FunctionTool(Tool):
    def __init__(
        self,
        function: Callable[..., ToolResult | Awaitable[ToolResult]],
        takes_context: bool,
        preview: Callable[..., list[str] | None] | None,
        **spec: Any,
    ) -> None:
        self._function = function
        self._takes_context = takes_context
        self._preview = preview
        for key, value in spec.items():
            setattr(self, key, value)

    def execute(
        self, arguments: dict[str, Any], context: ToolContext
    ) -> ToolResult | Awaitable[ToolResult]:
        if self._takes_context:
            return self._function(**arguments, context=context)
        return self._function(**arguments)

    def preview(self, arguments: dict[str, Any], context: ToolContext) -> list[str] | None:
        if self._preview is None:
            return None
        if self._takes_context:
            return self._preview(**arguments, context=context)
        return self._preview(**arguments)

    def __call__(self, *args: Any, **kwargs: Any) -> ToolResult | Awaitable[ToolResult]:
        return self._function(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name!r}>"


class _AsyncFunctionTool(_FunctionTool):
    """An ``async def`` tool function: its ``execute`` is a coroutine function too, so the
    async host awaits it on its loop instead of lending it a thread."""

    async def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        # The base class named, not super(): no proxy object built on every call.
        result: ToolResult = await _FunctionTool.execute(self, arguments, context)  # type: ignore[misc]
        return result


def tool(
    *,
    group: str,
    name: str | None = None,
    data_class: DataClass | None = None,
    effect: Effect = Effect.READ_ONLY,
    requires_approval: bool = False,
    enabled_by_default: bool = True,
    requires_admin: bool = False,
    checks_own_arguments: bool = False,
    preview: Callable[..., list[str] | None] | None = None,
    integrity: Integrity | None = None,
    egress: DataClass | None = None,
) -> Callable[[Callable[..., ToolResult | Awaitable[ToolResult]]], Tool]:
    """Turn a typed function into a :class:`Tool`.

    The docstring is the description (required), the JSON Schema comes from the signature,
    arguments arrive as keyword parameters, and a parameter named ``context`` receives the
    :class:`ToolContext`. The function may be ``async def``. ``preview`` (always a plain
    function) is called like the tool (the same keyword arguments,
    and ``context`` when the tool takes it) and returns the lines shown to the person who
    approves the call, as :meth:`Tool.preview` does.
    """

    def decorate(function: Callable[..., ToolResult | Awaitable[ToolResult]]) -> Tool:
        description = inspect.getdoc(function)
        if not description:
            raise TypeError(f"tool function {function.__qualname__} needs a docstring")
        parameters, takes_context = _schema_from_signature(function)
        if preview is not None and not callable(preview):
            raise TypeError(f"the preview of tool {function.__qualname__} is not callable")
        kind = _AsyncFunctionTool if inspect.iscoroutinefunction(function) else _FunctionTool
        return kind(
            function,
            takes_context,
            preview,
            name=function.__name__ if name is None else name,
            description=description,
            group=group,
            parameters=parameters,
            data_class=data_class,
            effect=effect,
            requires_approval=requires_approval,
            enabled_by_default=enabled_by_default,
            requires_admin=requires_admin,
            checks_own_arguments=checks_own_arguments,
            integrity=integrity,
            egress=egress,
        )

    return decorate


def _schema_from_signature(function: Callable[..., Any]) -> tuple[dict[str, Any], bool]:
    # Extras kept: ``Annotated`` carries the constraints.
    hints = typing.get_type_hints(function, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    takes_context = False
    for param in inspect.signature(function).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tool parameter {param.name!r} must be a plain keyword parameter")
        if param.name == "context":
            takes_context = True
            continue
        if param.name not in hints:
            raise TypeError(f"tool parameter {param.name!r} needs a type annotation")
        properties[param.name] = _schema_for(hints[param.name], param.name)
        if param.default is param.empty:
            required.append(param.name)
        elif not is_json(param.default):
            raise TypeError(
                f"tool parameter {param.name!r}: its default {param.default!r} is not a JSON value"
            )
        else:
            properties[param.name]["default"] = copy.deepcopy(param.default)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = required
    _check_defaults(schema)
    return schema, takes_context


def _check_defaults(schema: dict[str, Any]) -> None:
    """Each default must pass the check the seam makes of what the model sends."""
    defaults = {n: p["default"] for n, p in schema["properties"].items() if "default" in p}
    if not defaults:
        return
    from nrllm_core._schema import argument_error, compile_schema

    validator = compile_schema({k: v for k, v in schema.items() if k != "required"})
    for name, value in defaults.items():
        problem = argument_error(validator, {name: value})
        if problem is not None:
            raise TypeError(
                f"tool parameter {name!r}: its default does not fit its schema: {problem}"
            )


_SCALARS: Final[Mapping[Any, str]] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
# The JSON Schema keywords of the length constraints, (MinLen, MaxLen), by JSON type.
_LENGTHS: Final[Mapping[str, tuple[str, str]]] = {
    "string": ("minLength", "maxLength"),
    "array": ("minItems", "maxItems"),
    "object": ("minProperties", "maxProperties"),
}
_KINDS: Final[Mapping[str, str]] = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
    "array": "an array",
    "object": "an object",
}


def _schema_for(annotation: Any, where: str) -> dict[str, Any]:
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _constrained(_schema_for(args[0], where), args[1:], where)
    if origin is Literal and all(isinstance(a, str | int | bool) for a in args):
        return {"enum": list(args)}
    if origin is list and len(args) == 1:
        return {"type": "array", "items": _schema_for(args[0], where)}
    if origin is dict and len(args) == 2 and args[0] is str:
        if args[1] is Any:
            return {"type": "object"}
        return {"type": "object", "additionalProperties": _schema_for(args[1], where)}
    if origin in (typing.Union, types.UnionType):
        return {"anyOf": [_schema_for(a, where) for a in args]}
    raise TypeError(f"tool parameter {where!r} has a type with no JSON Schema: {annotation!r}")


def _constrained(schema: dict[str, Any], metadata: tuple[Any, ...], where: str) -> dict[str, Any]:
    """``schema`` with the ``annotated-types`` constraints of an ``Annotated`` type. Anything
    else there is refused: a constraint the schema cannot carry would go unchecked."""
    import annotated_types

    for item in metadata:
        # ``Interval`` and ``Len`` are groups of the single constraints.
        group = item if isinstance(item, annotated_types.GroupedMetadata) else [item]
        for constraint in group:
            try:
                keyword, value = _keyword(constraint, schema)
            except ValueError as exc:
                raise TypeError(f"tool parameter {where!r}: {constraint!r} {exc}") from None
            schema[keyword] = value
    return schema


def _keyword(constraint: object, schema: Mapping[str, Any]) -> tuple[str, Any]:
    """The JSON Schema keyword and value of one constraint on ``schema``; ``ValueError``
    saying why there is none."""
    from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen, MultipleOf

    # Each constraint's keyword (by the JSON type it applies to) and the field of its bound.
    numbers = ("integer", "number")
    keywords: dict[type, tuple[Mapping[str, str], str]] = {
        Gt: (dict.fromkeys(numbers, "exclusiveMinimum"), "gt"),
        Ge: (dict.fromkeys(numbers, "minimum"), "ge"),
        Lt: (dict.fromkeys(numbers, "exclusiveMaximum"), "lt"),
        Le: (dict.fromkeys(numbers, "maximum"), "le"),
        MultipleOf: (dict.fromkeys(numbers, "multipleOf"), "multiple_of"),
        MinLen: ({t: pair[0] for t, pair in _LENGTHS.items()}, "min_length"),
        MaxLen: ({t: pair[1] for t, pair in _LENGTHS.items()}, "max_length"),
    }
    kind = type(constraint)
    if kind not in keywords:
        raise ValueError("is not a constraint with a JSON Schema")
    by_type, field = keywords[kind]
    json_type = schema.get("type")
    keyword = by_type.get(json_type) if isinstance(json_type, str) else None
    if keyword is None:
        shown = _KINDS.get(json_type) if isinstance(json_type, str) else None
        raise ValueError(
            f"does not apply to {shown or ('an enum' if 'enum' in schema else 'a union')}"
        )
    if keyword in schema:
        raise ValueError(f"repeats {keyword}")
    value = getattr(constraint, field)
    if kind in (MinLen, MaxLen):
        if type(value) is not int or value < 0:
            raise ValueError("needs an integer of 0 or more")
    elif type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError("needs a finite number")
    elif kind is MultipleOf and value <= 0:
        raise ValueError("needs a number above 0")
    return keyword, value

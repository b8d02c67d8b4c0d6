"""The ``@tool`` decorator and what registration accepts."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

import pytest
from annotated_types import Ge, Gt, Interval, Le, Len, Lt, MaxLen, MinLen, MultipleOf, Predicate

from nrllm_core import (
    Actor,
    DataClass,
    Effect,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
    hookimpl,
    tool,
)


@tool(group="content", data_class=DataClass.EDITOR_CONTENT)
def everything(
    text: str,
    count: int,
    ratio: float,
    flag: bool,
    tags: list[str],
    weights: dict[str, int],
    mode: Literal["fast", "slow"],
    maybe: Optional[int],  # noqa: UP045 - the Optional spelling is what is under test
    either: int | None = None,
    limit: int = 10,
    matrix: list[list[float]] | None = None,
    extra: dict[str, Any] | None = None,
) -> ToolResult:
    """Take one parameter of every supported kind.

    Second paragraph of the description.
    """
    return ToolResult.text(f"{text}:{count}:{mode}:{limit}")


def test_schema_is_derived_from_the_signature():
    assert everything.parameters == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "weights": {"type": "object", "additionalProperties": {"type": "integer"}},
            "mode": {"enum": ["fast", "slow"]},
            "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "either": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            "limit": {"type": "integer", "default": 10},
            "matrix": {
                "anyOf": [
                    {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                    {"type": "null"},
                ],
                "default": None,
            },
            "extra": {"anyOf": [{"type": "object"}, {"type": "null"}], "default": None},
        },
        "required": ["text", "count", "ratio", "flag", "tags", "weights", "mode", "maybe"],
        "additionalProperties": False,
    }


def test_no_parameters_gives_an_empty_object_schema():
    @tool(group="system")
    def ping() -> ToolResult:
        """Answer pong."""
        return ToolResult.text("pong")

    assert ping.parameters == {"type": "object", "properties": {}, "additionalProperties": False}


def test_the_decorated_object_is_a_tool_with_the_declared_properties():
    assert isinstance(everything, Tool)
    assert everything.name == "everything"
    assert everything.group == "content"
    assert everything.description == (
        "Take one parameter of every supported kind.\n\nSecond paragraph of the description."
    )
    assert everything.data_class is DataClass.EDITOR_CONTENT
    assert everything.effect is Effect.READ_ONLY
    assert everything.requires_approval is False
    assert everything.enabled_by_default is True
    assert everything.requires_admin is False
    assert everything.checks_own_arguments is False


def test_every_option_is_carried():
    @tool(
        group="editing",
        name="write-it",
        data_class=DataClass.SOURCE_CODE,
        effect=Effect.NON_IDEMPOTENT_WRITE,
        requires_approval=True,
        enabled_by_default=False,
        requires_admin=True,
        checks_own_arguments=True,
    )
    def write(path: str) -> ToolResult:
        """Write a file."""
        return ToolResult.text(path)

    assert (write.name, write.group, write.data_class, write.effect) == (
        "write-it",
        "editing",
        DataClass.SOURCE_CODE,
        Effect.NON_IDEMPOTENT_WRITE,
    )
    assert write.requires_approval is True
    assert write.enabled_by_default is False
    assert write.requires_admin is True
    assert write.checks_own_arguments is True


def test_arguments_arrive_as_keywords_and_defaults_apply():
    context = ToolContext(run_id="r", call_id="c", actor=Actor(id="a"))
    arguments = {
        "text": "t",
        "count": 2,
        "ratio": 0.5,
        "flag": True,
        "tags": [],
        "weights": {},
        "mode": "slow",
        "maybe": None,
    }
    assert everything.execute(arguments, context).content == "t:2:slow:10"


def test_the_function_can_still_be_called_directly():
    assert everything("t", 1, 1.0, False, [], {}, "fast", None).content == "t:1:fast:10"


def test_context_is_injected_only_when_declared():
    context = ToolContext(run_id="r", call_id="c", actor=Actor(id="alice"))

    @tool(group="rag")
    def with_context(query: str, context: ToolContext) -> ToolResult:
        """Use the context."""
        return ToolResult.text(f"{query} for {context.actor.id}")

    @tool(group="rag")
    def without_context(query: str) -> ToolResult:
        """Ignore the context."""
        return ToolResult.text(query)

    # Anywhere in the signature: first, or keyword-only between two parameters.
    @tool(group="rag")
    def first(context: ToolContext, query: str) -> ToolResult:
        """Context first."""
        return ToolResult.text(f"{query} for {context.actor.id}")

    @tool(group="rag")
    def keyword_only(query: str, *, context: ToolContext, limit: int = 3) -> ToolResult:
        """Context keyword-only."""
        return ToolResult.text(f"{query}:{limit} for {context.actor.id}")

    assert with_context.execute({"query": "q"}, context).content == "q for alice"
    assert without_context.execute({"query": "q"}, context).content == "q"
    # The context is not a parameter the model can see or send.
    assert "context" not in with_context.parameters["properties"]
    assert with_context.parameters["required"] == ["query"]
    assert first.execute({"query": "q"}, context).content == "q for alice"
    assert keyword_only.execute({"query": "q"}, context).content == "q:3 for alice"
    assert list(first.parameters["properties"]) == ["query"]
    assert list(keyword_only.parameters["properties"]) == ["query", "limit"]


def test_a_missing_docstring_fails_at_decoration():
    def undocumented() -> ToolResult:
        return ToolResult.text("x")

    with pytest.raises(TypeError, match="docstring"):
        tool(group="rag")(undocumented)


def test_a_blank_docstring_fails_at_decoration():
    def blank() -> ToolResult:
        """ """
        return ToolResult.text("x")

    with pytest.raises(TypeError, match="docstring"):
        tool(group="rag")(blank)


def unsupported_set(value: set[int]) -> ToolResult:
    """Unsupported."""
    return ToolResult.text("x")


def unsupported_bytes(value: bytes) -> ToolResult:
    """Unsupported."""
    return ToolResult.text("x")


def unsupported_int_keys(value: dict[int, str]) -> ToolResult:
    """Unsupported."""
    return ToolResult.text("x")


def unsupported_bare_list(value: list) -> ToolResult:  # type: ignore[type-arg]
    """Unsupported."""
    return ToolResult.text("x")


def unsupported_float_literal(value: Literal[1.5]) -> ToolResult:  # type: ignore[valid-type]
    """Unsupported."""
    return ToolResult.text("x")


def unsupported_nested(value: list[object]) -> ToolResult:
    """Unsupported."""
    return ToolResult.text("x")


def unannotated(value) -> ToolResult:  # type: ignore[no-untyped-def]
    """Unsupported."""
    return ToolResult.text("x")


def variadic(*values: int) -> ToolResult:
    """Unsupported."""
    return ToolResult.text("x")


def keywords(**values: int) -> ToolResult:
    """Unsupported."""
    return ToolResult.text("x")


def positional_only(value: int, /) -> ToolResult:
    """Unsupported."""
    return ToolResult.text("x")


@pytest.mark.parametrize(
    "function",
    [
        unsupported_set,
        unsupported_bytes,
        unsupported_int_keys,
        unsupported_bare_list,
        unsupported_float_literal,
        unsupported_nested,
        unannotated,
        variadic,
        keywords,
        positional_only,
    ],
    ids=lambda f: f.__name__,
)
def test_unsupported_parameters_fail_at_decoration(function):
    with pytest.raises(TypeError, match="value"):
        tool(group="rag")(function)


def named(name: str) -> Tool:
    @tool(group="rag", name=name)
    def function() -> ToolResult:
        """A tool."""
        return ToolResult.text("x")

    return function


@pytest.mark.parametrize("name", ["a", "A-z_09", "x" * 64, "get_system_status", "with-dash", "0"])
def test_valid_names_register(name):
    registry = ToolRegistry()
    registry.register(named(name))
    assert [t.name for t in registry.tools] == [name]


@pytest.mark.parametrize(
    "name",
    ["", "x" * 65, "has space", "dot.ted", "slash/ed", "ümlaut", "trailing\n", "tab\t", "a:b"],
    ids=["empty", "65", "space", "dot", "slash", "non-ascii", "newline", "tab", "colon"],
)
def test_invalid_names_are_rejected_at_registration(name):
    registry = ToolRegistry()
    with pytest.raises(ValueError, match=r"\^\[A-Za-z0-9_-\]\{1,64\}\$"):
        registry.register(named(name))
    assert registry.tools == ()


class Minimal(Tool):
    name = "minimal"
    description = "A subclassed tool."
    group = "rag"

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        return ToolResult.text("minimal")


def test_a_subclassed_tool_registers_with_the_defaults():
    registry = ToolRegistry()
    registry.register(Minimal())
    (registered,) = registry.tools
    assert registered.parameters == {
        "type": "object",
        "properties": {},
        "additionalProperties": False,
    }
    assert registered.data_class is None
    assert registered.effect is Effect.READ_ONLY


def test_registration_refuses_what_is_not_a_tool():
    def plain() -> ToolResult:
        """Not decorated."""
        return ToolResult.text("x")

    with pytest.raises(TypeError, match="Tool"):
        ToolRegistry().register(plain)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("attribute", "value", "error"),
    [
        ("description", None, TypeError),
        ("group", 3, TypeError),
        ("effect", "read_only", TypeError),
        ("requires_approval", "yes", TypeError),
        ("data_class", "publicContent", TypeError),
        ("parameters", {"type": "array"}, ValueError),
        ("parameters", {"type": "object", "properties": 3}, ValueError),
    ],
    ids=["description", "group", "effect", "approval", "data-class", "not-object", "bad-schema"],
)
def test_registration_refuses_malformed_declarations(attribute, value, error):
    broken = Minimal()
    setattr(broken, attribute, value)
    with pytest.raises(error):
        ToolRegistry().register(broken)


@tool(group="content", data_class=DataClass.PUBLIC_CONTENT)
def constrained(
    limit: Annotated[int, Ge(1), Le(50)],
    ratio: Annotated[float, Gt(0), Lt(1)],
    step: Annotated[int, MultipleOf(5)],
    title: Annotated[str, MinLen(1), MaxLen(40)],
    tags: Annotated[list[Annotated[str, MaxLen(10)]], MaxLen(3)],
    weights: Annotated[dict[str, int], MinLen(1)],
    window: Annotated[int, Interval(ge=0, lt=10)],
    code: Annotated[str, Len(2, 3)],
    mode: Literal["fast", "slow"] = "fast",
    page: Annotated[int, Ge(1)] = 1,
    note: Annotated[str, MaxLen(5)] | None = None,
) -> ToolResult:
    """Take one parameter of every constraint."""
    return ToolResult.text(f"{limit}:{mode}:{page}:{note}")


def test_annotated_constraints_literals_and_defaults_are_in_the_schema():
    assert constrained.parameters["properties"] == {
        "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "step": {"type": "integer", "multipleOf": 5},
        "title": {"type": "string", "minLength": 1, "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
        "weights": {
            "type": "object",
            "additionalProperties": {"type": "integer"},
            "minProperties": 1,
        },
        "window": {"type": "integer", "minimum": 0, "exclusiveMaximum": 10},
        "code": {"type": "string", "minLength": 2, "maxLength": 3},
        "mode": {"enum": ["fast", "slow"], "default": "fast"},
        "page": {"type": "integer", "minimum": 1, "default": 1},
        "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}], "default": None},
    }
    assert constrained.parameters["required"] == [
        "limit", "ratio", "step", "title", "tags", "weights", "window", "code",
    ]  # fmt: skip


VALID = {
    "limit": 50,
    "ratio": 0.5,
    "step": 10,
    "title": "t",
    "tags": ["a"],
    "weights": {"a": 1},
    "window": 0,
    "code": "ab",
}


class Constrained:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(constrained)


def test_the_seam_applies_the_python_defaults_to_a_valid_call(nrllm):
    nrllm.load(Constrained())

    assert nrllm.invoke("constrained", **VALID).content == "50:fast:1:None"


@pytest.mark.parametrize(
    ("changed", "problem"),
    [
        ({"limit": 0}, "$.limit: 0 is less than the minimum of 1"),
        ({"limit": 51}, "$.limit: 51 is greater than the maximum of 50"),
        ({"ratio": 0}, "$.ratio: 0 is less than or equal to the minimum of 0"),
        ({"ratio": 1}, "$.ratio: 1 is greater than or equal to the maximum of 1"),
        ({"step": 7}, "$.step: 7 is not a multiple of 5"),
        ({"title": ""}, "$.title: '' should be non-empty"),
        ({"title": "x" * 41}, "$.title: '" + "x" * 41 + "' is too long"),
        ({"tags": ["a"] * 4}, "$.tags: ['a', 'a', 'a', 'a'] is too long"),
        ({"tags": ["x" * 11]}, "$.tags[0]: '" + "x" * 11 + "' is too long"),
        ({"weights": {}}, "$.weights: {} should be non-empty"),
        ({"window": 10}, "$.window: 10 is greater than or equal to the maximum of 10"),
        ({"code": "abcd"}, "$.code: 'abcd' is too long"),
        ({"mode": "medium"}, "$.mode: 'medium' is not one of ['fast', 'slow']"),
        ({"page": 0}, "$.page: 0 is less than the minimum of 1"),
        ({"note": "too long"}, "$.note: 'too long' is too long"),
    ],
    ids=lambda v: v.split(":")[0] + ":" + v.split(":")[1][:12] if isinstance(v, str) else "",
)
def test_the_seam_refuses_arguments_outside_the_constraints(nrllm, changed, problem):
    nrllm.load(Constrained())

    call = nrllm.invoke("constrained", **{**VALID, **changed})

    assert call.is_error
    assert call.content == f'Error: invalid arguments for tool "constrained": {problem}'


def _with_default(annotation: Any, default: Any) -> Any:
    def function(value: int = 0) -> ToolResult:
        """A tool."""
        return ToolResult.text("x")

    function.__annotations__["value"] = annotation
    function.__defaults__ = (default,)
    return function


SCHEMA = "its default does not fit its schema: $.value:"


@pytest.mark.parametrize(
    ("annotation", "default", "problem"),
    [
        (Annotated[int, Ge(1)], 0, f"{SCHEMA} 0 is less than the minimum of 1"),
        (int, "10", f"{SCHEMA} '10' is not of type 'integer'"),
        (int, True, f"{SCHEMA} True is not of type 'integer'"),
        (int, None, f"{SCHEMA} None is not of type 'integer'"),
        (Literal["a", "b"], "c", f"{SCHEMA} 'c' is not one of ['a', 'b']"),
        (Annotated[str, MaxLen(2)], "abc", f"{SCHEMA} 'abc' is too long"),
        (list[str], ("a",), "its default ('a',) is not a JSON value"),
        (float, float("nan"), "its default nan is not a JSON value"),
        (float, float("inf"), "its default inf is not a JSON value"),
        (dict[str, int], {1: 2}, "its default {1: 2} is not a JSON value"),
        (list[str], {"a"}, "its default {'a'} is not a JSON value"),
        (str, b"a", "its default b'a' is not a JSON value"),
    ],
    ids=[
        "minimum", "string-for-int", "bool-for-int", "none-for-int", "enum", "max-length",
        "tuple", "nan", "inf", "int-key", "set", "bytes",
    ],
)  # fmt: skip
def test_a_default_that_is_not_a_valid_argument_fails_at_decoration(annotation, default, problem):
    with pytest.raises(TypeError) as failed:
        tool(group="rag")(_with_default(annotation, default))
    assert str(failed.value) == f"tool parameter 'value': {problem}"


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        (Annotated[str, Ge(1)], "Ge(ge=1) does not apply to a string"),
        (Annotated[int, MaxLen(3)], "MaxLen(max_length=3) does not apply to an integer"),
        (Annotated[bool, Ge(0)], "Ge(ge=0) does not apply to a boolean"),
        (Annotated[Literal[1, 2], Ge(1)], "Ge(ge=1) does not apply to an enum"),
        (Annotated[int | None, Ge(1)], "Ge(ge=1) does not apply to a union"),
        (Annotated[int, "doc"], "'doc' is not a constraint with a JSON Schema"),
        (
            Annotated[int, Predicate(bool)],
            "Predicate(bool) is not a constraint with a JSON Schema",
        ),
        (Annotated[float, Ge(True)], "Ge(ge=True) needs a finite number"),
        (Annotated[float, Le(float("inf"))], "Le(le=inf) needs a finite number"),
        (Annotated[int, MultipleOf(0)], "MultipleOf(multiple_of=0) needs a number above 0"),
        (Annotated[str, MaxLen(-1)], "MaxLen(max_length=-1) needs an integer of 0 or more"),
        (Annotated[int, Ge(1), Ge(2)], "Ge(ge=2) repeats minimum"),
    ],
    ids=[
        "number-on-string", "length-on-int", "number-on-bool", "enum", "union", "doc",
        "predicate", "bool-bound", "infinite-bound", "zero-multiple", "negative-length",
        "repeated",
    ],
)  # fmt: skip
def test_a_constraint_without_a_json_schema_fails_at_decoration(annotation, problem):
    def function(value: int) -> ToolResult:
        """A tool."""
        return ToolResult.text("x")

    function.__annotations__["value"] = annotation
    with pytest.raises(TypeError) as failed:
        tool(group="rag")(function)
    assert str(failed.value) == f"tool parameter 'value': {problem}"


def test_a_default_keeps_a_flat_schema_on_the_quick_check():
    from nrllm_core._schema import compile_schema

    @tool(group="rag")
    def search(query: str, limit: int = 10) -> ToolResult:
        """Search."""
        return ToolResult.text(query)

    validator = compile_schema(search.parameters)

    assert validator.quick is not None
    for arguments in ({"query": "q"}, {"query": "q", "limit": 3}, {"query": "q", "limit": "3"}):
        assert validator.quick(arguments) is validator.full.is_valid(arguments)

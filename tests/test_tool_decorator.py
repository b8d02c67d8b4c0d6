"""The ``@tool`` decorator and what registration accepts."""

from __future__ import annotations

from typing import Any, Literal, Optional

import pytest

from nrllm_core import (
    Actor,
    DataClass,
    Effect,
    Tool,
    ToolContext,
    ToolRegistry,
    ToolResult,
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
            "either": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "limit": {"type": "integer"},
            "matrix": {
                "anyOf": [
                    {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                    {"type": "null"},
                ]
            },
            "extra": {"anyOf": [{"type": "object"}, {"type": "null"}]},
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

    assert with_context.execute({"query": "q"}, context).content == "q for alice"
    assert without_context.execute({"query": "q"}, context).content == "q"
    # The context is not a parameter the model can see or send.
    assert "context" not in with_context.parameters["properties"]
    assert with_context.parameters["required"] == ["query"]


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

"""The tools the plugins registered: validated, snapshotted, with name clashes withheld."""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from typing import Any, Final, final

import attrs

from nrllm_core._schema import argument_error, compile_schema
from nrllm_core._tool import NAME_PATTERN, Tool
from nrllm_core._values import DataClass, Effect, Integrity
from nrllm_core.redact import redact

__all__ = ["GROUP_DEFAULTS", "RegisteredTool", "ToolCatalog", "ToolRegistry", "WithheldTool"]

# A withholding reason is a short word, shown as ``no: REASON``: never text from a tool's source.
_REASON: Final = re.compile(r"[a-z][A-Za-z0-9]{0,31}")
# Its detail can quote what a tool's source sent (an MCP server's schema, hostile) and is shown
# on a terminal: kept to printable ASCII, every other code point written as U+XXXX, and cut.
_DETAIL_MAX: Final = 300
_CUT: Final = "..."

GROUP_DEFAULTS: Final[Mapping[str, DataClass]] = {
    "content": DataClass.EDITOR_CONTENT,
    "editing": DataClass.EDITOR_CONTENT,
    "files": DataClass.EDITOR_CONTENT,
    "rag": DataClass.PUBLIC_CONTENT,
    "structure": DataClass.INTERNAL_CONFIGURATION,
    "configuration": DataClass.INTERNAL_CONFIGURATION,
    "code": DataClass.SOURCE_CODE,
    "system": DataClass.SYSTEM_DIAGNOSTICS,
    "accounts": DataClass.SECRET_ADJACENT,
}


@final
@attrs.frozen(kw_only=True)
class RegisteredTool:
    """A tool as registered: its declaration read once, so a later change cannot move the gate."""

    tool: Tool = attrs.field(eq=False)
    plugin: str
    name: str
    description: str
    # The description as a call's step keeps it: masked and bounded like any audited text (an
    # MCP server writes it), worked out once here rather than on every call.
    audited_description: str = attrs.field(eq=False, repr=False)
    group: str
    parameters: Mapping[str, Any] = attrs.field(eq=False)
    validator: Any = attrs.field(eq=False, repr=False)
    # Validation is pure, so the answer for a call without arguments is worked out once.
    no_arguments_error: str | None = attrs.field(eq=False, repr=False)
    declared_data_class: DataClass | None
    effect: Effect
    declared_approval: bool
    enabled_by_default: bool
    requires_admin: bool
    checks_own_arguments: bool
    data_class: DataClass
    data_class_source: str
    # Who writes its results, as declared; undeclared is untrusted.
    integrity: Integrity
    # The most sensitive data class it may send out of the host; None: it sends nothing out.
    egress: DataClass | None
    # Whether ``execute`` is a coroutine function (the call runs on an event loop); read
    # once, like the declaration, instead of on every call.
    is_async: bool = attrs.field(eq=False, repr=False)

    @property
    def requires_approval(self) -> bool:
        """Declared so, or a write: what needs a person's approval under the default policy
        (a write's own need follows ``[policy] approve_writes``; a declared one always holds)."""
        return self.declared_approval or self.effect.is_write


@final
class ToolRegistry:
    """Handed to ``nrllm_register_tools``: collects one plugin's tools."""

    __slots__ = ("_tools", "_withheld")

    def __init__(self) -> None:
        self._tools: list[Tool] = []
        self._withheld: list[tuple[str, str, str | None]] = []

    def register(self, tool: Tool) -> None:
        """Register a :class:`~nrllm_core.Tool`; a malformed one raises at once."""
        _validate(tool)
        self._tools.append(tool)

    def withhold(self, name: str, reason: str, *, detail: str | None = None) -> None:
        """Name a tool this plugin knows of but does not offer, with a one-word ``reason``
        (``unpinned``, say) and optionally what exactly is wrong, ``detail``: listed by
        ``nrllm tools`` as ``no: REASON (DETAIL)``, never offered or run. The detail is kept as
        printable ASCII, every other code point written as ``U+XXXX``, cut to 300 characters.
        The name still counts for clashes, so no other plugin's tool takes its place."""
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            raise ValueError(f"tool name {name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
        if not isinstance(reason, str) or not _REASON.fullmatch(reason):
            raise ValueError(f"withholding reason {reason!r} must match ^[a-z][A-Za-z0-9]{{0,31}}$")
        if detail is not None and not isinstance(detail, str):
            raise ValueError("withholding detail must be a string or None")
        self._withheld.append((name, reason, _shown(detail) if detail else None))

    @property
    def tools(self) -> tuple[Tool, ...]:
        return tuple(self._tools)

    @property
    def withheld(self) -> tuple[tuple[str, str, str | None], ...]:
        """Each withheld name with its reason and its detail, as shown."""
        return tuple(self._withheld)


def _shown(detail: str) -> str:
    """``detail`` as printable ASCII, every other code point written as ``U+XXXX``, at most
    :data:`_DETAIL_MAX` characters; a longer one is cut between two code points and ends in
    ``...``. Only as much of ``detail`` is read as can be shown."""
    pieces: list[str] = []
    size = 0
    for char in detail:
        piece = char if " " <= char <= "~" else f"U+{ord(char):04X}"
        pieces.append(piece)
        size += len(piece)
        if size > _DETAIL_MAX:
            break
    else:
        return "".join(pieces)
    while size > _DETAIL_MAX - len(_CUT):
        size -= len(pieces.pop())
    return "".join(pieces) + _CUT


def _validate(tool: object) -> None:
    if not isinstance(tool, Tool):
        raise TypeError(f"register() takes a Tool, not {type(tool).__name__}")
    name = getattr(tool, "name", None)
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"tool name {name!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
    checks: list[tuple[str, type | tuple[type, ...]]] = [
        ("description", str),
        ("group", str),
        ("parameters", Mapping),
        ("effect", Effect),
        ("requires_approval", bool),
        ("enabled_by_default", bool),
        ("requires_admin", bool),
        ("checks_own_arguments", bool),
    ]
    for attribute, kind in checks:
        if not isinstance(getattr(tool, attribute, None), kind):
            raise TypeError(f"tool {name!r}: {attribute} has the wrong type")
    if tool.data_class is not None and not isinstance(tool.data_class, DataClass):
        raise TypeError(f"tool {name!r}: data_class must be a DataClass or None")
    if tool.integrity is not None and not isinstance(tool.integrity, Integrity):
        raise TypeError(f"tool {name!r}: integrity must be an Integrity or None")
    if tool.egress is not None and not isinstance(tool.egress, DataClass):
        raise TypeError(f"tool {name!r}: egress must be a DataClass or None")
    if tool.parameters.get("type") != "object":
        raise ValueError(f"tool {name!r}: parameters must be a JSON Schema of type object")
    compile_schema(tool.parameters)
    if tool.argument_schema is not None:
        if not isinstance(tool.argument_schema, Mapping):
            raise TypeError(f"tool {name!r}: argument_schema has the wrong type")
        compile_schema(tool.argument_schema, "argument_schema")


def snapshot(tool: Tool, plugin: str, answers: list[DataClass | None]) -> RegisteredTool:
    """Freeze a tool's declaration and resolve its effective data class.

    The base class is the tool's own declaration, else its group's default, else the strictest
    class for a group core does not know; hook answers can only raise it.
    """
    if tool.data_class is not None:
        base, source = tool.data_class, "declared"
    elif tool.group in GROUP_DEFAULTS:
        base, source = GROUP_DEFAULTS[tool.group], "group_default"
    else:
        base, source = DataClass.SECRET_ADJACENT, "unknown_group"
    checked = tool.argument_schema
    validator = compile_schema(tool.parameters if checked is None else checked)
    effective = base
    for answer in answers:
        if isinstance(answer, DataClass) and answer > effective:
            effective, source = answer, "hook"
    return RegisteredTool(
        tool=tool,
        plugin=plugin,
        name=tool.name,
        description=tool.description,
        audited_description=redact(tool.description),
        group=tool.group,
        parameters=tool.parameters,
        validator=validator,
        no_arguments_error=argument_error(validator, {}),
        declared_data_class=tool.data_class,
        effect=tool.effect,
        declared_approval=tool.requires_approval,
        enabled_by_default=tool.enabled_by_default,
        requires_admin=tool.requires_admin,
        checks_own_arguments=tool.checks_own_arguments,
        data_class=effective,
        data_class_source=source,
        integrity=Integrity.UNTRUSTED if tool.integrity is None else tool.integrity,
        egress=tool.egress,
        is_async=inspect.iscoroutinefunction(tool.execute),
    )


@final
@attrs.frozen(kw_only=True)
class WithheldTool:
    """A tool its plugin withholds (``ToolRegistry.withhold``), the plugin's reason, and what
    exactly is wrong when the plugin says (printable ASCII, at most 300 characters)."""

    name: str
    plugin: str
    reason: str
    detail: str | None = None


@final
@attrs.frozen(kw_only=True)
class ToolCatalog:
    """Every usable tool by name, plus what was withheld and why."""

    tools: Mapping[str, RegisteredTool]
    clashes: Mapping[str, tuple[str, ...]]
    errors: Mapping[str, str]
    withheld: Mapping[str, WithheldTool] = attrs.field(factory=dict)

    def get(self, name: str) -> RegisteredTool | None:
        return self.tools.get(name)

    def claims(self, name: str) -> bool:
        """Whether a plugin registered ``name``: a usable tool, a clash or a withheld one."""
        return name in self.tools or name in self.clashes or name in self.withheld

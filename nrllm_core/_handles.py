"""Handles: a tool's result kept in the run, out of the model's context.

The wire carries a short description that nrllm writes (``handle h3: text, 2.1 KB, from
read_email``), so the run's label does not take the value's; the model may pass the handle as
an argument (``{"$handle": "h3"}``), and the value is put in its place before the call runs,
its label joining the run's for the policy's decision on that call only.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final, final

import attrs

from nrllm_core._bounds import bound_artifacts
from nrllm_core._label import RunLabel
from nrllm_core._values import DataClass, Integrity, ToolArtifact, ToolResult

__all__ = ["HANDLE_KEY", "Handle", "Handles", "Keeper", "UnknownHandle"]

# The key of the one-key object that stands for a handle in a call's arguments.
HANDLE_KEY: Final = "$handle"
# How deep a call's arguments are searched for handles; deeper ones stay as the model wrote them.
_MAX_DEPTH: Final = 32


class UnknownHandle(LookupError):
    """An argument names a handle this run does not hold; the message is safe to show."""


@final
@attrs.frozen(kw_only=True)
class Handle:
    """One kept result: its id in the run, the call that returned it, what it is, its text."""

    id: str
    tool: str
    call_id: str
    data_class: DataClass
    integrity: Integrity
    text: str

    def description(self) -> str:
        """What the model reads instead of the value: nrllm's words, with nothing of it."""
        return f"handle {self.id}: text, {_size(len(self.text.encode()))}, from {self.tool}"


@final
@attrs.define(kw_only=True)
class Handles:
    """A run's handles, in the order they were kept (sealed with a suspension)."""

    kept: dict[str, Handle] = attrs.field(factory=dict)

    def keep(
        self, *, tool: str, call_id: str, data_class: DataClass, integrity: Integrity, text: str
    ) -> Handle:
        handle = Handle(
            id=f"h{len(self.kept) + 1}",
            tool=tool,
            call_id=call_id,
            data_class=data_class,
            integrity=integrity,
            text=text,
        )
        self.kept[handle.id] = handle
        return handle

    def keeper(
        self, *, tool: str, call_id: str, data_class: DataClass, integrity: Integrity, always: bool
    ) -> Keeper:
        """What keeps one call's result as a handle: every result with ``always`` (the
        policy's ``handle``), else one the tool returned with ``handle=True``."""
        return Keeper(
            handles=self,
            tool=tool,
            call_id=call_id,
            data_class=data_class,
            integrity=integrity,
            always=always,
        )

    def label(self, label: RunLabel, arguments: object) -> RunLabel:
        """``label`` risen by every handle ``arguments`` names: what a call passing them
        carries (an unknown handle adds nothing: the call is refused before it runs)."""
        for name in _names(arguments, 0):
            handle = self.kept.get(name)
            if handle is not None:
                label = label.rise(
                    tool=handle.tool,
                    call_id=handle.call_id,
                    data_class=handle.data_class,
                    integrity=handle.integrity,
                )
        return label

    def named(self, arguments: object) -> bool:
        """Whether ``arguments`` name any handle."""
        return next(_names(arguments, 0), None) is not None

    def substituted(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``arguments`` with each handle replaced by its value; raises :class:`UnknownHandle`."""
        return {key: self._replaced(value, 1) for key, value in arguments.items()}

    def _replaced(self, value: object, depth: int) -> object:
        name = _name(value)
        if name is not None:
            return self._get(name).text
        if depth >= _MAX_DEPTH:
            return value
        if isinstance(value, Mapping):
            return {k: self._replaced(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._replaced(v, depth + 1) for v in value]
        return value

    def _get(self, name: str) -> Handle:
        handle = self.kept.get(name)
        if handle is None:
            raise UnknownHandle(f"Error: this run holds no handle {name[:16]!r}")
        return handle


@final
@attrs.define(kw_only=True)
class Keeper:
    """Keeps one call's bounded result as a handle, when it is to be kept: the wire then
    carries the handle's description (trusted: nrllm wrote it) and the value goes to the run
    only, as a text artifact. ``integrity`` is the tool's declared one (a result's own wins);
    ``handle`` is the one it kept, if any."""

    handles: Handles
    tool: str
    call_id: str
    data_class: DataClass
    integrity: Integrity
    always: bool
    handle: Handle | None = None

    def __call__(self, result: ToolResult) -> ToolResult:
        if result.is_error or not (self.always or result.handle):
            return result
        handle = self.handles.keep(
            tool=self.tool,
            call_id=self.call_id,
            data_class=self.data_class,
            integrity=result.integrity or self.integrity,
            text=result.content,
        )
        self.handle = handle
        value = ToolArtifact.text(result.content, label=f"handle {handle.id}")
        # Bounded again with the value among them: the artifacts' budget holds for all.
        artifacts = bound_artifacts((*result.artifacts, value))
        return ToolResult.text(handle.description(), *artifacts, integrity=Integrity.TRUSTED)


def _name(value: object) -> str | None:
    if isinstance(value, Mapping) and len(value) == 1:
        name = value.get(HANDLE_KEY)
        if isinstance(name, str):
            return name
    return None


def _names(value: object, depth: int) -> Iterator[str]:
    name = _name(value)
    if name is not None:
        yield name
    elif depth < _MAX_DEPTH and isinstance(value, Mapping):
        for item in value.values():
            yield from _names(item, depth + 1)
    elif depth < _MAX_DEPTH and isinstance(value, list | tuple):
        for item in value:
            yield from _names(item, depth + 1)


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} B"
    return f"{count / 1024:.1f} KB" if count < 1024 * 1024 else f"{count / 1048576:.1f} MB"

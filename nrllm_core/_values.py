"""The value objects a tool author works with: results, artifacts, data classes, zones, effects."""

from __future__ import annotations

import enum
import functools
from collections.abc import Iterable, Sequence
from typing import Any, Final, final

import attrs

__all__ = [
    "Actor",
    "ArtifactType",
    "DataClass",
    "Effect",
    "Integrity",
    "ToolArtifact",
    "ToolResult",
    "TrustZone",
]

# Only the factories hold this token, which makes ``ToolResult.__init__`` effectively private.
_CREATE: Final = object()


class ArtifactType(enum.StrEnum):
    """How an artifact is rendered; closed: a new case lands in core with its rendering."""

    TABLE = "table"
    TEXT = "text"


class Integrity(enum.StrEnum):
    """Who wrote what a tool returns: ``trusted``, the host's own people or systems;
    ``untrusted``, anyone else (a web page, a stranger's email, a file shared with you, an MCP
    server's answer). What a tool does not declare is untrusted."""

    TRUSTED = "trusted"
    UNTRUSTED = "untrusted"


class _Ranked(enum.StrEnum):
    """A string enum whose comparisons follow declaration order, never the strings."""

    @property
    def rank(self) -> int:
        return _member_rank(self)

    def __lt__(self, other: object) -> bool:
        return self.rank < _other_rank(self, other)

    def __le__(self, other: object) -> bool:
        return self.rank <= _other_rank(self, other)

    def __gt__(self, other: object) -> bool:
        return self.rank > _other_rank(self, other)

    def __ge__(self, other: object) -> bool:
        return self.rank >= _other_rank(self, other)

    __hash__ = enum.StrEnum.__hash__


def _other_rank(member: _Ranked, other: object) -> int:
    # Returning NotImplemented would let Python fall back to str's comparison for a plain
    # string, ordering by spelling; refusing keeps every comparison on ranks.
    if type(other) is not type(member):
        raise TypeError(f"cannot order {type(member).__name__} against {type(other).__name__}")
    return _member_rank(other)


# Cached, as the gate and the privacy filter compare at every step; typed, as members of two
# enums that share a value are equal strings.
@functools.lru_cache(maxsize=None, typed=True)
def _member_rank(member: _Ranked) -> int:
    return list(type(member)).index(member)


class DataClass(_Ranked):
    """The sensitivity of what a tool returns, least sensitive first."""

    PUBLIC_CONTENT = "publicContent"
    EDITOR_CONTENT = "editorContent"
    SOURCE_CODE = "sourceCode"
    INTERNAL_CONFIGURATION = "internalConfiguration"
    SYSTEM_DIAGNOSTICS = "systemDiagnostics"
    SECRET_ADJACENT = "secretAdjacent"


class TrustZone(_Ranked):
    """Where a model provider runs, most trusted first."""

    LOCAL = "local"
    PRIVATE_HOSTED = "privateHosted"
    EXTERNAL_EU = "externalEu"
    EXTERNAL_GLOBAL = "externalGlobal"

    @property
    def ceiling(self) -> DataClass:
        """The most sensitive data class a run in this zone may collect."""
        return _CEILINGS[self]

    def permits(self, data_class: DataClass) -> bool:
        """Whether a tool of ``data_class`` may be offered in this zone."""
        return data_class <= self.ceiling


_CEILINGS: Final = {
    TrustZone.LOCAL: DataClass.SECRET_ADJACENT,
    TrustZone.PRIVATE_HOSTED: DataClass.SYSTEM_DIAGNOSTICS,
    TrustZone.EXTERNAL_EU: DataClass.INTERNAL_CONFIGURATION,
    TrustZone.EXTERNAL_GLOBAL: DataClass.EDITOR_CONTENT,
}


class Effect(enum.StrEnum):
    """What calling a tool does to the world."""

    READ_ONLY = "read_only"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT_WRITE = "non_idempotent_write"

    @property
    def is_write(self) -> bool:
        return self is not Effect.READ_ONLY


def _permission_set(permissions: Iterable[str]) -> frozenset[str]:
    # A typed converter: with the bare ``frozenset`` mypy accepts no argument at all.
    return frozenset(permissions)


def _names_someone(_: object, __: attrs.Attribute[str], value: str) -> None:
    from nrllm_core._identity import NAMES_NOBODY, names_nobody

    if names_nobody(value):
        raise ValueError(f"an actor id {NAMES_NOBODY}")


@final
@attrs.frozen(kw_only=True)
class Actor:
    """The person a run or a direct call acts for: an id that names nobody is refused
    (``ValueError``)."""

    id: str = attrs.field(validator=_names_someone)
    admin: bool = False
    permissions: frozenset[str] = attrs.field(default=frozenset(), converter=_permission_set)

    def has_permission(self, permission: str) -> bool:
        return self.admin or permission in self.permissions

    def same_person_for_refusal(self, actor_id: str) -> bool:
        """Whether ``actor_id`` may name this person, for a check that refuses (four-eyes):
        people, not code points. Ids are compared after NFKC, case folding, removing every
        character that never tells people apart (default-ignorable, control, format, space
        and blank ones) and the UTS #39 confusable skeleton, so ``alice``, `` Alice``, a
        full-width ``alice``, and ``alice`` with a zero-width space (U+200B) or a Cyrillic
        ``a`` (U+0430) are one person. Look-alikes are one person too (``kim`` and
        ``kirn``): never grant anything by it."""
        from nrllm_core._identity import same_person_for_refusal

        return same_person_for_refusal(self.id, actor_id)

    def same_id_for_grant(self, actor_id: str) -> bool:
        """Whether ``actor_id`` is this actor's id, for a check that grants access or
        ownership: equal after NFC and case folding, once the characters that never tell
        people apart are removed (``Alice`` and ``alice\u200b`` are ``alice``). Look-alikes
        are not folded: ``kirn`` is not ``kim``, a Cyrillic ``a`` (U+0430) is not an ``a``."""
        from nrllm_core._identity import same_id_for_grant

        return same_id_for_grant(self.id, actor_id)


@final
@attrs.frozen(kw_only=True)
class ToolArtifact:
    """Structured, run-only data for the trace, the inspector and the audit; never the wire.

    The constructor does not validate ``data``: the invoke seam is what makes any artifact safe.
    """

    type: ArtifactType
    label: str
    data: Any

    @classmethod
    def table(
        cls, columns: Sequence[str], rows: Iterable[Sequence[str]], label: str = ""
    ) -> ToolArtifact:
        """A table of string cells; every row has exactly one cell per column."""
        cols = list(columns)
        if not all(isinstance(c, str) for c in cols):
            raise ValueError("table columns must be strings")
        checked: list[list[str]] = []
        for index, row in enumerate(rows):
            cells = list(row)
            if len(cells) != len(cols):
                raise ValueError(f"table row {index} has {len(cells)} cells, expected {len(cols)}")
            if not all(isinstance(c, str) for c in cells):
                raise ValueError(f"table row {index} has a cell that is not a string")
            checked.append(cells)
        return cls(type=ArtifactType.TABLE, label=label, data={"columns": cols, "rows": checked})

    @classmethod
    def text(cls, text: str, label: str = "") -> ToolArtifact:
        """A block of preformatted text."""
        if not isinstance(text, str):
            raise ValueError("text artifact needs a string")
        return cls(type=ArtifactType.TEXT, label=label, data={"text": text})

    def to_dict(self) -> dict[str, Any]:
        """``{"type", "label", "data"}``, the shape every sink and the inspector share."""
        kind = self.type.value if isinstance(self.type, ArtifactType) else self.type
        return {"type": kind, "label": self.label, "data": self.data}


def _refuse_direct(instance: ToolResult, attribute: attrs.Attribute[object], value: object) -> None:
    if value is not _CREATE:
        raise TypeError("build a ToolResult with ToolResult.text(...) or ToolResult.error(...)")


@final
@attrs.frozen(kw_only=True, repr=False, eq=True)
class ToolResult:
    """What a tool returns: ``content`` for the model, ``artifacts`` for the run only.

    There is no implicit conversion to a string: ``str()`` and ``format()`` raise, so the one
    way to the wire is ``.content``.
    """

    content: str
    is_error: bool
    artifacts: tuple[ToolArtifact, ...]
    # Who wrote this result, when the tool says per call; ``None``: as the tool declares.
    integrity: Integrity | None = None
    # Kept in the run as a handle: the model reads a description, never the content.
    handle: bool = False
    _token: object = attrs.field(
        default=None, alias="_token", repr=False, eq=False, hash=False, validator=_refuse_direct
    )

    @classmethod
    def text(
        cls,
        content: str,
        *artifacts: ToolArtifact,
        integrity: Integrity | None = None,
        handle: bool = False,
    ) -> ToolResult:
        """A successful result, optionally with artifacts (order kept). ``integrity`` says who
        wrote this one result when the tool returns both kinds (your own email and one from a
        stranger); without it, the tool's declared ``integrity`` holds. With ``handle``, a
        run keeps ``content`` as a handle: its model reads only nrllm's description of it,
        and may pass it on to another call (``{"$handle": "h1"}``)."""
        if not isinstance(content, str):
            raise TypeError("ToolResult content must be a str")
        for artifact in artifacts:
            if not isinstance(artifact, ToolArtifact):
                raise TypeError("ToolResult artifacts must be ToolArtifact instances")
        if integrity is not None and not isinstance(integrity, Integrity):
            raise TypeError("ToolResult integrity must be an Integrity or None")
        if type(handle) is not bool:
            raise TypeError("ToolResult handle must be a bool")
        return cls(
            content=content,
            is_error=False,
            artifacts=artifacts,
            integrity=integrity,
            handle=handle,
            _token=_CREATE,
        )

    @classmethod
    def error(cls, content: str) -> ToolResult:
        """A failed result; never with artifacts, so a failure cannot leak a half-built one."""
        if not isinstance(content, str):
            raise TypeError("ToolResult content must be a str")
        return cls(content=content, is_error=True, artifacts=(), _token=_CREATE)

    def __attrs_post_init__(self) -> None:
        # Spent once checked: attrs.evolve() copies fields, so a copy made that way carries no
        # token and is refused like a direct call. Only the factories make results.
        object.__setattr__(self, "_token", None)

    def __str__(self) -> str:
        raise TypeError("a ToolResult has no string form; use result.content")

    def __format__(self, format_spec: str) -> str:
        raise TypeError("a ToolResult has no string form; use result.content")

    def __repr__(self) -> str:
        kinds = ", ".join(str(getattr(a.type, "value", "?")) for a in self.artifacts)
        return (
            f"ToolResult(content=<{len(self.content)} chars>, is_error={self.is_error}, "
            f"artifacts={len(self.artifacts)} [{kinds}])"
        )

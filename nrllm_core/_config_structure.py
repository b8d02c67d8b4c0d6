"""The one converter of the configuration: cattrs with no coercion (``"yes"`` is not a bool,
``"3"`` is not an integer), and its errors as ``path: problem`` lines a person can act on.

cattrs loads on the first value structured, never at import.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar

import attrs

if TYPE_CHECKING:
    from cattrs import Converter

__all__ = ["kind_name", "listing", "structure"]

T = TypeVar("T")


def structure(value: object, cls: type[T], path: str, errors: list[str]) -> T | None:
    """``value`` as ``cls``, or ``None`` with every problem added to ``errors``."""
    from cattrs.errors import BaseValidationError

    try:
        structured: T = _converter().structure(value, cls)
    except BaseValidationError as exc:
        errors.extend(_messages(exc, path))
        return None
    except (TypeError, ValueError) as exc:
        errors.extend(_class_message(exc, cls, path) if attrs.has(cls) else _messages(exc, path))
        return None
    except Exception as exc:
        errors.extend(_messages(exc, path))
        return None
    return structured


def listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names)) or "none"


_TYPE_NAMES: Final[Mapping[type, str]] = {
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    list: "an array",
    dict: "a table",
}


def kind_name(value: object) -> str:
    """How a person names the type of a configuration value."""
    return _TYPE_NAMES.get(type(value), type(value).__name__)


# -- the one converter --------------------------------------------------------------------------


@functools.cache
def _converter() -> Converter:
    """cattrs with no coercion: ``"yes"`` is not a bool and ``"3"`` is not an integer."""
    from cattrs.cols import is_mapping
    from cattrs.gen import make_dict_structure_fn, make_mapping_structure_fn
    from cattrs.preconf.tomllib import make_converter

    conv = make_converter(forbid_extra_keys=True)
    conv.register_structure_hook(str, _exact(str))
    conv.register_structure_hook(bool, _exact(bool))
    conv.register_structure_hook(int, _exact(int))
    conv.register_structure_hook(float, _number)
    conv.register_structure_hook_func(lambda kind: kind == tuple[str, ...], _names)
    conv.register_structure_hook(Path, _path)
    conv.register_structure_hook(enum.Enum, _enum)

    def table(cls: type[Any]) -> Callable[[Any, Any], Any]:
        fields = make_dict_structure_fn(cls, conv, _cattrs_forbid_extra_keys=True)

        def structure(value: Any, kind: Any) -> Any:
            if not isinstance(value, Mapping):
                raise TypeError(f"expected a table, got {kind_name(value)}")
            return fields(value, kind)

        return structure

    conv.register_structure_hook_factory(attrs.has, table)

    def mapping(kind: Any) -> Callable[[Any, Any], Any]:
        # cattrs' own would call .items() on a string and fail with an AttributeError.
        entries = make_mapping_structure_fn(kind, conv)

        def structure(value: Any, wanted: Any) -> Any:
            if not isinstance(value, Mapping):
                raise TypeError(f"expected a table, got {kind_name(value)}")
            return entries(value, wanted)

        return structure

    conv.register_structure_hook_factory(is_mapping, mapping)
    return conv


def _exact(kind: type[Any]) -> Callable[[Any, Any], Any]:
    def structure(value: Any, wanted: Any) -> Any:
        if wanted is not kind and issubclass(wanted, enum.Enum):
            # A str (or int) enum reaches its base type's hook first.
            return _enum(value, wanted)
        if type(value) is not kind:
            raise TypeError(f"expected {_TYPE_NAMES[kind]}, got {kind_name(value)}")
        return value

    return structure


def _number(value: Any, _: Any) -> float:
    if type(value) not in (int, float):
        raise TypeError(f"expected a number, got {kind_name(value)}")
    return float(value)


def _names(value: Any, _: Any) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise TypeError(f"expected an array of strings, got {kind_name(value)}")
    for index, item in enumerate(value):
        if type(item) is not str:
            raise TypeError(f"item {index}: expected a string, got {kind_name(item)}")
    return tuple(value)


def _path(value: Any, _: Any) -> Path:
    if type(value) is not str or not value:
        raise TypeError(f"expected a path (a non-empty string), got {kind_name(value)}")
    return Path(value)


def _enum(value: Any, enum_type: type[enum.Enum]) -> Any:
    """A member by its exact value: ``"local"``, never ``"Local"`` or the member's name."""
    for member in enum_type:
        if type(value) is type(member.value) and member.value == value:
            return member
    accepted = ", ".join(str(m.value) for m in enum_type)
    raise ValueError(f"{value!r} is not accepted; accepted values: {accepted}")


def _messages(exc: BaseException, path: str) -> list[str]:
    """Flatten cattrs' nested validation errors into ``key.path: problem`` lines."""
    from cattrs.errors import (
        ClassValidationError,
        ForbiddenExtraKeysError,
        IterableValidationError,
    )

    if isinstance(exc, ForbiddenExtraKeysError):
        accepted = listing(a.name for a in attrs.fields(exc.cl))
        return [
            f"{_join(path, key)}: unknown key; accepted: {accepted}"
            for key in sorted(exc.extra_fields)
        ]
    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        out = [m for inner, note in with_notes for m in _messages(inner, _join(path, note.name))]
        return out + [m for inner in without for m in _class_message(inner, exc.cl, path)]
    if isinstance(exc, IterableValidationError):
        listed, unlisted = exc.group_exceptions()
        out = [m for inner, note in listed for m in _messages(inner, _join(path, note.index))]
        return out + [m for inner in unlisted for m in _messages(inner, path)]
    if isinstance(exc, KeyError):
        return [f"{path}: required key missing"]
    if not isinstance(exc, TypeError | ValueError):
        # A plugin's settings class is plugin code: a crash in it refuses its section, by type.
        return [f"{path or '(top level)'}: the settings class failed ({type(exc).__name__})"]
    return [f"{path or '(top level)'}: {exc}"]


def _class_message(exc: BaseException, cls: type[Any], path: str) -> list[str]:
    """A class's own check (an attrs validator or converter): a message that starts with a
    field's name (``"allow_hosts: no ranges"``) joins the field to the path."""
    field, colon, problem = str(exc).partition(": ")
    if type(exc) in (TypeError, ValueError) and colon and field in attrs.fields_dict(cls):
        return [f"{_join(path, field)}: {problem}"]
    return _messages(exc, path)


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)

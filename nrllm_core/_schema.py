"""Tool arguments against the tool's JSON Schema (jsonschema loads on first use)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Final

import attrs

__all__ = ["ArgumentValidator", "argument_error", "compile_schema"]

# Python types whose values jsonschema certainly accepts for each JSON type (bool is not an
# integer in JSON Schema, so exact type checks are used, never isinstance).
_EXACT_TYPES: Final[Mapping[str, tuple[type, ...]]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}
_FLAT_OBJECT_KEYS: Final = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "title"}
)
# CPython 3.11 locks each module on its own while it imports it: threads that enter jsonschema
# at different submodules at once (``jsonschema.exceptions`` here, ``jsonschema.validators``
# there, each importing the other through the package) can wait on each other's locks, and the
# import system then breaks the cycle by handing one of them a partially initialized module
# ("cannot import name 'Draft3Validator'"). So jsonschema is entered only through its package,
# whose ``__init__`` imports its submodules in one order, by one thread at a time.
_IMPORT_LOCK: Final = threading.Lock()
# ``default`` is an annotation only: it changes what a value may be no more than a title does.
_FLAT_PROPERTY_KEYS: Final = frozenset({"type", "description", "title", "default"})


@attrs.frozen
class ArgumentValidator:
    """A compiled schema: ``quick`` proves simple arguments valid without jsonschema."""

    full: Any
    quick: Callable[[Mapping[str, Any]], bool] | None


def compile_schema(schema: Mapping[str, Any], what: str = "parameters") -> ArgumentValidator:
    """A validator for ``schema``; ``ValueError`` unless it is a valid JSON Schema (the
    message names the tool's attribute, ``what``)."""
    jsonschema = _jsonschema()
    plain = dict(schema)
    cls = jsonschema.validators.validator_for(plain)
    try:
        cls.check_schema(plain)
    except jsonschema.exceptions.SchemaError as exc:
        raise ValueError(f"{what} is not a valid JSON Schema: {exc.message}") from None
    return ArgumentValidator(full=cls(plain), quick=_quick_check(plain))


def argument_error(validator: ArgumentValidator, arguments: Mapping[str, Any]) -> str | None:
    """``"<path>: <message>"`` for the most relevant violation, or ``None`` when valid."""
    if validator.quick is not None and validator.quick(arguments):
        return None
    error = _jsonschema().exceptions.best_match(validator.full.iter_errors(arguments))
    if error is None:
        return None
    return f"{error.json_path}: {error.message}"


@functools.cache
def _jsonschema() -> ModuleType:
    # Cached: a validation that misses the quick check takes no lock.
    with _IMPORT_LOCK:
        import jsonschema
    return jsonschema


def _quick_check(schema: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], bool] | None:
    """For a flat object of scalar properties, a check that only ever says "valid" when
    jsonschema would; every other answer, and every other schema, goes to jsonschema."""
    if schema.get("type") != "object" or not set(schema) <= _FLAT_OBJECT_KEYS:
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    closed = schema.get("additionalProperties", True)
    if (
        not isinstance(properties, Mapping)
        or not isinstance(required, list)
        or closed
        not in (
            True,
            False,
        )
    ):
        return None
    types: dict[str, tuple[type, ...]] = {}
    for name, spec in properties.items():
        if not isinstance(spec, Mapping) or not set(spec) <= _FLAT_PROPERTY_KEYS:
            return None
        kind = spec.get("type")
        if not isinstance(kind, str) or kind not in _EXACT_TYPES:
            return None
        types[name] = _EXACT_TYPES[kind]
    needed = tuple(required)

    def quick(arguments: Mapping[str, Any]) -> bool:
        for name in needed:
            if name not in arguments:
                return False
        for name, value in arguments.items():
            allowed = types.get(name)
            if allowed is None:
                if closed is False:
                    return False
            elif type(value) not in allowed:
                return False
        return True

    return quick

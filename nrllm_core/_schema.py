"""Tool arguments against the tool's JSON Schema (jsonschema loads on first use)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
# ``default`` is an annotation only: it changes what a value may be no more than a title does.
_FLAT_PROPERTY_KEYS: Final = frozenset({"type", "description", "title", "default"})


@attrs.frozen
class ArgumentValidator:
    """A compiled schema: ``quick`` proves simple arguments valid without jsonschema."""

    full: Any
    quick: Callable[[Mapping[str, Any]], bool] | None


def compile_schema(schema: Mapping[str, Any]) -> ArgumentValidator:
    """A validator for ``schema``; ``ValueError`` unless it is a valid JSON Schema."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    plain = dict(schema)
    cls = validator_for(plain)
    try:
        cls.check_schema(plain)
    except SchemaError as exc:
        raise ValueError(f"parameters is not a valid JSON Schema: {exc.message}") from None
    return ArgumentValidator(full=cls(plain), quick=_quick_check(plain))


def argument_error(validator: ArgumentValidator, arguments: Mapping[str, Any]) -> str | None:
    """``"<path>: <message>"`` for the most relevant violation, or ``None`` when valid."""
    if validator.quick is not None and validator.quick(arguments):
        return None
    from jsonschema.exceptions import best_match

    error = best_match(validator.full.iter_errors(arguments))
    if error is None:
        return None
    return f"{error.json_path}: {error.message}"


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

"""Tool arguments against the tool's JSON Schema (jsonschema loads on first use)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["argument_error", "compile_schema"]


def compile_schema(schema: Mapping[str, Any]) -> Any:
    """A validator for ``schema``; ``ValueError`` unless it is a valid JSON Schema."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    plain = dict(schema)
    cls = validator_for(plain)
    try:
        cls.check_schema(plain)
    except SchemaError as exc:
        raise ValueError(f"parameters is not a valid JSON Schema: {exc.message}") from None
    return cls(plain)


def argument_error(validator: Any, arguments: Mapping[str, Any]) -> str | None:
    """``"<path>: <message>"`` for the most relevant violation, or ``None`` when valid."""
    from jsonschema.exceptions import best_match

    error = best_match(validator.iter_errors(arguments))
    if error is None:
        return None
    return f"{error.json_path}: {error.message}"

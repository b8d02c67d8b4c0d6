"""The host process's environment, values masked unless allow-listed: ``get_env``."""

from __future__ import annotations

import os
from types import MappingProxyType
from typing import Any, Final

from nrllm_builtin._settings import settings_or_error
from nrllm_core import DataClass, Integrity, Tool, ToolContext, ToolResult
from nrllm_core.redact import REDACTION_MASK, mask_secrets

__all__ = ["GetEnv"]

MAX_NAMES: Final = 50
MAX_VALUE_CHARS: Final = 300


class GetEnv(Tool):
    name = "get_env"
    description = (
        "List the host's environment variable names, or only the names you give. Values are "
        "masked unless the host allow-listed the variable."
    )
    group = "system"
    data_class = DataClass.SECRET_ADJACENT
    enabled_by_default = False
    parameters = MappingProxyType(
        {
            "type": "object",
            "properties": {
                "names": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 256},
                    "maxItems": MAX_NAMES,
                }
            },
            "additionalProperties": False,
        }
    )
    # The host's own environment.
    integrity = Integrity.TRUSTED

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        settings = settings_or_error(context, self.name)
        if isinstance(settings, ToolResult):
            return settings
        names = arguments.get("names")
        if names is None:
            wanted = sorted(os.environ)
        elif (
            isinstance(names, list)
            and len(names) <= MAX_NAMES
            and all(isinstance(n, str) for n in names)
        ):
            wanted = list(dict.fromkeys(names))
        else:
            return ToolResult.text(f"names: expected a list of at most {MAX_NAMES} names.")
        allowed = frozenset(settings.env_allow)
        lines = []
        for name in wanted:
            value = os.environ.get(name)
            shown_name = name[:256]
            if value is None:
                lines.append(f"{shown_name}: (not set)")
            elif name in allowed:
                # Allow-listed, yet still through the catalogue: a listed variable can hold a
                # credential its owner did not expect.
                masked = mask_secrets(value)
                cut = masked[:MAX_VALUE_CHARS] + ("…" if len(masked) > MAX_VALUE_CHARS else "")
                lines.append(f"{shown_name}={cut}")
            else:
                lines.append(f"{shown_name}={REDACTION_MASK}")
        if not lines:
            return ToolResult.text("The environment is empty.")
        return ToolResult.text("\n".join(lines))

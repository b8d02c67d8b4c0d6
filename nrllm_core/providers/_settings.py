"""Reading one provider section's settings, each mistake named by provider and key."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final, final

from nrllm_core._json import is_json
from nrllm_core._providers import ProviderConfigError

__all__ = ["Settings", "params_problems", "plain"]

# Request fields a section sets under their own names.
REQUEST_SETTINGS: Final = ("temperature", "max_tokens", "max_completion_tokens")
# Fields the adapter itself writes: ``[params]`` may not set them.
PARAMS_FORBIDDEN: Final = frozenset(
    {"model", "messages", "system", "tools", "tool_choice", "stream"}
)
# Fields of a streamed request: the adapter asks for a stream when the run streams, and a
# request that does not stream takes none of them.
PARAMS_STREAMING: Final = frozenset({"stream_options"})
_PARAMS_MAX_DEPTH: Final = 32
# A header's value as httpx sends it: visible ASCII, with spaces and tabs only inside.
_HEADER_VALUE: Final = re.compile(r"[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?")


def params_problems(params: object) -> Iterator[tuple[str, str]]:
    """``(key, problem)`` for each field of a ``params`` table that cannot be sent."""
    if not isinstance(params, Mapping):
        yield "", "must be a table"
        return
    for key, value in params.items():
        if not isinstance(key, str) or not key:
            yield str(key), "a request field's name must be a non-empty string"
        elif key in PARAMS_FORBIDDEN:
            yield key, "is written by the adapter and cannot be set in params"
        elif key in PARAMS_STREAMING:
            yield key, "belongs to streaming, which the adapter owns: cannot be set in params"
        elif key in REQUEST_SETTINGS:
            yield key, f"has its own setting: set it as {key}, not in params"
        elif not is_json(value, _PARAMS_MAX_DEPTH):
            yield key, "must be a JSON value (string, number, boolean, array or table)"


def plain(value: Any) -> Any:
    """A JSON value with plain dicts and lists, whatever mappings and sequences held it."""
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


@final
class Settings:
    """Typed access to a ``[providers.NAME]`` section."""

    __slots__ = ("_name", "_values")

    def __init__(self, name: str, values: Mapping[str, Any]) -> None:
        self._name = name
        self._values = values

    @property
    def name(self) -> str:
        """The provider section's name."""
        return self._name

    def _given(self, key: str, default: object) -> Any:
        # A loaded section has every core key, None where the file set none: that is unset.
        value = self._values.get(key)
        return default if value is None else value

    def error(self, message: str) -> ProviderConfigError:
        return ProviderConfigError(f'provider "{self._name}": {message}')

    def text(self, key: str, default: str | None = None) -> str:
        value = self._given(key, default)
        if not isinstance(value, str) or not value:
            raise self.error(f'"{key}" must be a non-empty string')
        return value

    def optional_text(self, key: str) -> str | None:
        if self._values.get(key) is None:
            return None
        return self.text(key)

    def count(self, key: str, default: int, *, minimum: int = 0) -> int:
        value = self._given(key, default)
        if type(value) is not int or value < minimum:
            raise self.error(f'"{key}" must be an integer of at least {minimum}')
        return value

    def seconds(self, key: str, default: float) -> float:
        value = self._given(key, default)
        if type(value) not in (int, float) or not 0 < value <= 3600:
            raise self.error(f'"{key}" must be a number of seconds between 0 and 3600')
        return float(value)

    def optional_number(self, key: str) -> float | None:
        value = self._values.get(key)
        if value is None:
            return None
        if type(value) not in (int, float):
            raise self.error(f'"{key}" must be a number')
        return float(value)

    def request_fields(self) -> dict[str, Any]:
        """The request fields the section sets: its named settings, then ``params`` as given."""
        fields: dict[str, Any] = {}
        for key in REQUEST_SETTINGS:
            if self._values.get(key) is None:
                continue
            if key == "temperature":
                fields[key] = self.optional_number(key)
            else:
                fields[key] = self.count(key, 0, minimum=1)
        params = self._values.get("params") or {}
        first = next(params_problems(params), None)
        if first is not None:
            key, problem = first
            raise self.error(f"params{'.' + key if key else ''} {problem}")
        fields.update({key: plain(value) for key, value in params.items()})
        return fields

    def secret(self, key: str, environ: Mapping[str, str], default: str | None = None) -> str:
        """The value of the environment variable that ``key`` names; the value is never shown."""
        return self.header_value(self.text(key, default), environ, "the API key variable")

    def header_value(self, variable: str, environ: Mapping[str, str], what: str) -> str:
        """The value of the environment variable ``variable`` (``what``, in an error), to be
        sent in a header: set, not empty, and sendable. Errors name the variable, never show
        the value."""
        value = environ.get(variable)
        if not value:
            raise self.error(f"{what} {variable} is not set")
        if not _HEADER_VALUE.fullmatch(value):
            # httpx would fail only at the request, or quote the character it cannot encode.
            raise self.error(
                f"{what} {variable} holds what a header cannot carry (a control or non-ASCII "
                "character, or whitespace at either end)"
            )
        return value

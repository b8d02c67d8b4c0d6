"""Reading one provider section's settings, each mistake named by provider and key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

from nrllm_core._providers import ProviderConfigError

__all__ = ["Settings"]


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

    def error(self, message: str) -> ProviderConfigError:
        return ProviderConfigError(f'provider "{self._name}": {message}')

    def text(self, key: str, default: str | None = None) -> str:
        value = self._values.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.error(f'"{key}" must be a non-empty string')
        return value

    def optional_text(self, key: str) -> str | None:
        if self._values.get(key) is None:
            return None
        return self.text(key)

    def count(self, key: str, default: int, *, minimum: int = 0) -> int:
        value = self._values.get(key, default)
        if type(value) is not int or value < minimum:
            raise self.error(f'"{key}" must be an integer of at least {minimum}')
        return value

    def seconds(self, key: str, default: float) -> float:
        value = self._values.get(key, default)
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

    def secret(self, key: str, environ: Mapping[str, str], default: str | None = None) -> str:
        """The value of the environment variable that ``key`` names; the value is never shown."""
        variable = self.text(key, default)
        value = environ.get(variable)
        if not value:
            raise self.error(f"the API key variable {variable} is not set")
        return value

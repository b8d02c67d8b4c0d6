"""Core's provider kinds, each with its factory and the check of its sections."""

from __future__ import annotations

from nrllm_core._providers import ProviderRegistry
from nrllm_core.providers._anthropic import AnthropicProvider, anthropic_check
from nrllm_core.providers._gemini import (
    GeminiProvider,
    GeminiSettings,
    gemini_check,
    gemini_endpoint,
)
from nrllm_core.providers._gemini_schema import gemini_tool_problem
from nrllm_core.providers._openai import (
    OpenAIProvider,
    OpenAISettings,
    openai_check,
    openai_endpoint,
)
from nrllm_core.providers._responses import (
    ResponsesProvider,
    responses_check,
    responses_endpoint,
)
from nrllm_core.providers._scripted import scripted_check, scripted_factory

__all__ = ["register_core_kinds"]


def register_core_kinds(registry: ProviderRegistry) -> None:
    """``scripted``, ``openai``, ``openai-responses``, ``anthropic`` and ``gemini``: what core's
    plugin registers, and what a configuration loaded without a plugin manager is checked
    against."""
    registry.register("scripted", scripted_factory, check=scripted_check)
    registry.register(
        "openai",
        OpenAIProvider.factory,
        check=openai_check,
        settings=OpenAISettings,
        endpoint=openai_endpoint,
    )
    registry.register(
        "openai-responses",
        ResponsesProvider.factory,
        check=responses_check,
        settings=OpenAISettings,
        endpoint=responses_endpoint,
    )
    registry.register("anthropic", AnthropicProvider.factory, check=anthropic_check)
    registry.register(
        "gemini",
        GeminiProvider.factory,
        check=gemini_check,
        settings=GeminiSettings,
        tools=gemini_tool_problem,
        endpoint=gemini_endpoint,
    )

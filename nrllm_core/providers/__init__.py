"""Core's provider kinds: ``scripted``, ``openai``, ``openai-responses``, ``anthropic`` and
``gemini``, registered as a plugin.

``make_plugin_manager`` registers this module as ``nrllm.providers``; httpx loads on the first
request, never here.
"""

from __future__ import annotations

from nrllm_core._providers import ProviderRegistry
from nrllm_core.hookspecs import hookimpl
from nrllm_core.providers._anthropic import AnthropicProvider
from nrllm_core.providers._gemini import GeminiProvider
from nrllm_core.providers._kinds import register_core_kinds
from nrllm_core.providers._openai import OpenAIProvider
from nrllm_core.providers._responses import ResponsesProvider
from nrllm_core.providers._scripted import ScriptedProvider

__all__ = [
    "AnthropicProvider",
    "GeminiProvider",
    "OpenAIProvider",
    "ResponsesProvider",
    "ScriptedProvider",
    "nrllm_register_providers",
]


@hookimpl
def nrllm_register_providers(registry: ProviderRegistry) -> None:
    register_core_kinds(registry)

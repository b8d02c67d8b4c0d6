"""The ``bedrock`` provider kind: AWS Bedrock's Converse and ConverseStream APIs.

Importing this package loads neither botocore nor httpx: the first request does.
"""

from __future__ import annotations

from nrllm_bedrock._provider import BedrockProvider
from nrllm_bedrock._settings import BedrockSettings, bedrock_check, bedrock_endpoint
from nrllm_core import ProviderRegistry, hookimpl

__all__ = ["BedrockProvider", "BedrockSettings", "nrllm_register_providers"]


@hookimpl
def nrllm_register_providers(registry: ProviderRegistry) -> None:
    registry.register(
        "bedrock",
        BedrockProvider.factory,
        check=bedrock_check,
        settings=BedrockSettings,
        endpoint=bedrock_endpoint,
    )

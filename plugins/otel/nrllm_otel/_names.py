"""The GenAI semantic-convention names the plugin emits, spelt out here rather than imported.

``opentelemetry-semantic-conventions`` keeps them in its private ``_incubating`` modules, and
since 0.66b2 documents every one of them as deprecated ("Moved to the OpenTelemetry GenAI
semantic conventions repository"): a release may rename or drop them, and importing them would
turn that into a plugin that records nothing. The strings are the contract a backend reads, so
they live here; ``tests/test_names.py`` compares each one with the installed package's
constant, so that a rename upstream is noticed.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "GEN_AI_AGENT_NAME",
    "GEN_AI_CLIENT_OPERATION_DURATION",
    "GEN_AI_CLIENT_TOKEN_USAGE",
    "GEN_AI_CONVERSATION_ID",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_ID",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_TOKEN_TYPE",
    "GEN_AI_TOOL_CALL_ARGUMENTS",
    "GEN_AI_TOOL_CALL_ID",
    "GEN_AI_TOOL_CALL_RESULT",
    "GEN_AI_TOOL_DESCRIPTION",
    "GEN_AI_TOOL_NAME",
    "GEN_AI_TOOL_TYPE",
    "GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "GEN_AI_USAGE_REASONING_OUTPUT_TOKENS",
    "OPERATION_CHAT",
    "OPERATION_EXECUTE_TOOL",
    "OPERATION_INVOKE_AGENT",
    "TOKEN_INPUT",
    "TOKEN_OUTPUT",
    "TOOL_TYPE_FUNCTION",
]

# Attributes (upstream: gen_ai_attributes, under the same names).
GEN_AI_AGENT_NAME: Final = "gen_ai.agent.name"
GEN_AI_CONVERSATION_ID: Final = "gen_ai.conversation.id"
GEN_AI_INPUT_MESSAGES: Final = "gen_ai.input.messages"
GEN_AI_OPERATION_NAME: Final = "gen_ai.operation.name"
GEN_AI_OUTPUT_MESSAGES: Final = "gen_ai.output.messages"
GEN_AI_PROVIDER_NAME: Final = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL: Final = "gen_ai.request.model"
GEN_AI_RESPONSE_FINISH_REASONS: Final = "gen_ai.response.finish_reasons"
GEN_AI_RESPONSE_ID: Final = "gen_ai.response.id"
GEN_AI_RESPONSE_MODEL: Final = "gen_ai.response.model"
GEN_AI_TOKEN_TYPE: Final = "gen_ai.token.type"
GEN_AI_TOOL_CALL_ARGUMENTS: Final = "gen_ai.tool.call.arguments"
GEN_AI_TOOL_CALL_ID: Final = "gen_ai.tool.call.id"
GEN_AI_TOOL_CALL_RESULT: Final = "gen_ai.tool.call.result"
GEN_AI_TOOL_DESCRIPTION: Final = "gen_ai.tool.description"
GEN_AI_TOOL_NAME: Final = "gen_ai.tool.name"
GEN_AI_TOOL_TYPE: Final = "gen_ai.tool.type"
GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: Final = "gen_ai.usage.cache_creation.input_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: Final = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_INPUT_TOKENS: Final = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS: Final = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: Final = "gen_ai.usage.reasoning.output_tokens"

# Metrics (upstream: gen_ai_metrics, under the same names).
GEN_AI_CLIENT_OPERATION_DURATION: Final = "gen_ai.client.operation.duration"
GEN_AI_CLIENT_TOKEN_USAGE: Final = "gen_ai.client.token.usage"

# Values of gen_ai.operation.name (upstream: GenAiOperationNameValues).
OPERATION_CHAT: Final = "chat"
OPERATION_EXECUTE_TOOL: Final = "execute_tool"
OPERATION_INVOKE_AGENT: Final = "invoke_agent"

# Values of gen_ai.token.type (upstream: GenAiTokenTypeValues).
TOKEN_INPUT: Final = "input"
TOKEN_OUTPUT: Final = "output"

# A value of gen_ai.tool.type that the convention names in its text only: upstream has no
# constant for it.
TOOL_TYPE_FUNCTION: Final = "function"

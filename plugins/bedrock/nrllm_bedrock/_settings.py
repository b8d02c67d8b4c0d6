"""The ``bedrock`` kind's own keys, and what a section of the kind may not say."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Final, final

import attrs

from nrllm_core import ProviderConfigError

__all__ = [
    "BedrockSettings",
    "bedrock_check",
    "bedrock_endpoint",
    "endpoint",
    "own_settings",
]

DEFAULT_KEY_VARIABLE: Final = "AWS_BEARER_TOKEN_BEDROCK"
# Converse's request fields that the adapter writes: params may not set them.
WRITTEN: Final = frozenset({"modelId", "messages", "system", "toolConfig"})
# Converse's other request fields (botocore's bedrock-runtime model; a test compares them):
# params sets them as they are, and the API refuses a request with any field not among them.
PARAMS: Final = frozenset(
    {
        "inferenceConfig",
        "guardrailConfig",
        "projectIdentifier",
        "additionalModelRequestFields",
        "promptVariables",
        "additionalModelResponseFieldPaths",
        "requestMetadata",
        "performanceConfig",
        "serviceTier",
        "outputConfig",
    }
)
# inferenceConfig's fields that params may set; the other two are settings of their own.
INFERENCE_PARAMS: Final = frozenset({"topP", "stopSequences"})
_OWN_SETTING: Final = {"maxTokens": "max_tokens", "temperature": "temperature"}
# A region's name goes into the endpoint's host: nothing else may.
_REGION: Final = re.compile(r"[a-z]{2}(?:-[a-z]+)+-\d{1,2}")


@final
@attrs.frozen(kw_only=True)
class BedrockSettings:
    """The ``bedrock`` kind's own keys: ``region`` (it names the endpoint and signs the
    request) and ``endpoint_url`` (a VPC endpoint, say; the regional one when not given).
    Core's ``base_url`` overrides both as the endpoint."""

    region: str | None = None
    endpoint_url: str | None = None


def own_settings(name: str, settings: Mapping[str, Any]) -> BedrockSettings:
    """The section's :class:`BedrockSettings` (all defaults for a section built by hand)."""
    own = settings.get("options")
    if own is None:
        return BedrockSettings()
    if not isinstance(own, BedrockSettings):
        raise ProviderConfigError(f'provider "{name}": its options must be BedrockSettings')
    return own


def endpoint(name: str, settings: Mapping[str, Any]) -> str | None:
    """Where requests go: ``base_url``, else ``endpoint_url``, else the region's endpoint;
    ``None`` when nothing says (the check refuses such a section)."""
    own = own_settings(name, settings)
    given = settings.get("base_url") or own.endpoint_url
    if given:
        return str(given).rstrip("/")
    if own.region is None:
        return None
    return f"https://bedrock-runtime.{own.region}.amazonaws.com"


def bedrock_endpoint(
    name: str, settings: Mapping[str, Any]
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """Where the section's whole answers are asked for (streams go to ``converse-stream``
    beside it), and the environment variables it reads; none is read here."""
    from urllib.parse import quote

    base = endpoint(name, settings) or "(no region)"
    model = settings.get("model")
    url = f"{base}/model/{quote(model if isinstance(model, str) else '', safe='')}/converse"
    variable = settings.get("api_key_env")
    if variable is not None:
        return url, ((str(variable), "authorization"),)
    region = own_settings(name, settings).region or "(no region)"
    return url, (
        (DEFAULT_KEY_VARIABLE, "authorization, when set"),
        ("AWS_ACCESS_KEY_ID", f"else SigV4 for {region} with the AWS credential chain"),
    )


def bedrock_check(
    name: str, settings: Mapping[str, Any], *, config_dir: Path | None
) -> Iterator[tuple[str, str]]:
    """What the Converse API, or the endpoint's choice, refuses in a ``bedrock`` section."""
    own = own_settings(name, settings)
    model = settings.get("model")
    if not isinstance(model, str) or not model:
        yield "model", "must be set: the model (or inference profile) is part of the URL"
    for key, value in (("region", own.region), ("endpoint_url", own.endpoint_url)):
        if value == "":
            yield key, "must not be empty (leave it out instead)"
    if own.region and not _REGION.fullmatch(own.region):
        yield "region", "must be an AWS region's name (us-east-1, eu-central-1)"
    if not own.region and not own.endpoint_url and not settings.get("base_url"):
        yield "region", "must be set (or endpoint_url): it names the endpoint"
    if own.endpoint_url and not own.endpoint_url.startswith(("https://", "http://")):
        yield "endpoint_url", "must be an http(s) URL"
    if settings.get("max_completion_tokens") is not None:
        yield "max_completion_tokens", "is OpenAI's: Converse takes max_tokens"
    temperature = settings.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 1:
        yield "temperature", "must be between 0 and 1"
    yield from _params_problems(settings.get("params") or {})


def _params_problems(params: object) -> Iterator[tuple[str, str]]:
    if not isinstance(params, Mapping):
        yield "params", "must be a table"
        return
    for key, value in params.items():
        if key in WRITTEN:
            yield f"params.{key}", "is written by the adapter and cannot be set in params"
        elif key not in PARAMS:
            known = ", ".join(sorted(PARAMS))
            yield f"params.{key}", f"is no Converse request field (known: {known})"
        elif key == "inferenceConfig":
            yield from _inference_problems(value)
        elif not isinstance(value, Mapping | list | str):
            yield f"params.{key}", "must be a table, an array or a string as Converse takes it"


def _inference_problems(value: object) -> Iterator[tuple[str, str]]:
    if not isinstance(value, Mapping):
        yield "params.inferenceConfig", "must be a table"
        return
    for key in value:
        path = f"params.inferenceConfig.{key}"
        if key in _OWN_SETTING:
            yield path, f"has its own setting: set it as {_OWN_SETTING[key]}, not in params"
        elif key not in INFERENCE_PARAMS:
            yield (
                path,
                f"is no inferenceConfig field (known: {', '.join(sorted(INFERENCE_PARAMS))})",
            )
    top_p = value.get("topP")
    if top_p is not None and (not isinstance(top_p, int | float) or not 0 <= top_p <= 1):
        yield "params.inferenceConfig.topP", "must be a number between 0 and 1"

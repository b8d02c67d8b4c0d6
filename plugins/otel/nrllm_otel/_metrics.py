"""The metrics: the GenAI client histograms and a counter of tool calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs
from opentelemetry import metrics

from nrllm_otel import _names as names

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, MeterProvider

__all__ = ["Instruments"]

# The bucket boundaries the GenAI semantic conventions advise for each histogram.
_TOKEN_BUCKETS: Final = tuple(float(4**n) for n in range(15))
_DURATION_BUCKETS: Final = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip


@final
@attrs.frozen(kw_only=True)
class Instruments:
    token_usage: Histogram
    duration: Histogram
    tool_calls: Counter

    @classmethod
    def create(cls, provider: MeterProvider | None) -> Instruments:
        from importlib.metadata import version

        meter = metrics.get_meter("nrllm_otel", version("nrllm-otel"), meter_provider=provider)
        return cls(
            token_usage=meter.create_histogram(
                names.GEN_AI_CLIENT_TOKEN_USAGE,
                unit="{token}",
                description="Number of input and output tokens used.",
                explicit_bucket_boundaries_advisory=_TOKEN_BUCKETS,
            ),
            duration=meter.create_histogram(
                names.GEN_AI_CLIENT_OPERATION_DURATION,
                unit="s",
                description="GenAI operation duration.",
                explicit_bucket_boundaries_advisory=_DURATION_BUCKETS,
            ),
            tool_calls=meter.create_counter(
                "nrllm.tool.calls",
                unit="{call}",
                description=(
                    "Tool calls by tool, result (ok, error, timeout, refused) and data class."
                ),
            ),
        )

    def chat(
        self,
        attributes: Mapping[str, Any],
        *,
        input_tokens: int | None,
        output_tokens: int | None,
        seconds: float,
    ) -> None:
        self.duration.record(seconds, attributes)
        for token_type, count in (
            (names.TOKEN_INPUT, input_tokens),
            (names.TOKEN_OUTPUT, output_tokens),
        ):
            if count is not None:
                self.token_usage.record(count, {**attributes, names.GEN_AI_TOKEN_TYPE: token_type})

    def tool_call(self, tool: str, result: str, data_class: str | None) -> None:
        attributes = {names.GEN_AI_TOOL_NAME: tool, "nrllm.tool.result": result}
        if data_class is not None:
            attributes["nrllm.tool.data_class"] = data_class
        self.tool_calls.add(1, attributes)

"""``--otel-console``: the command, as a host, prints the run's OpenTelemetry data on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from nrllm_core.cli._common import BadInput
from nrllm_core.cli._terminal import printable

__all__ = ["otel_console_option", "start_otel_console"]

F = TypeVar("F", bound=Callable[..., Any])
_NO_SDK = (
    "--otel-console needs the OpenTelemetry SDK: install it with pip install 'nrllm-core[otel]'"
)
_NO_PLUGIN = (
    "--otel-console needs the nrllm-otel plugin: install it with pip install nrllm-otel "
    "(and keep otel in NRLLM_LOAD_PLUGINS, when that is set)"
)


def otel_console_option(command: F) -> F:
    return click.option(
        "--otel-console",
        is_flag=True,
        help="Print the run's OpenTelemetry spans and metrics on stderr (the otel extra).",
    )(command)


def start_otel_console(has_plugin: bool) -> Callable[[], None]:
    """Set the SDK's console exporters as the global providers, through the CLI's sanitiser:
    spans can hold model text at the ``redacted`` and ``full`` levels.

    Returns what shuts both providers down, exporting what they still hold. They shut down as
    the interpreter exits anyway; a process a signal ends runs no exit hooks, so a command that
    can be ended so calls it itself.
    """
    try:
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import (
            ConsoleMetricExporter,
            PeriodicExportingMetricReader,
        )
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor
    except ImportError:
        raise BadInput(_NO_SDK) from None
    if not has_plugin:
        raise BadInput(_NO_PLUGIN)
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        SimpleSpanProcessor(
            ConsoleSpanExporter(
                out=sys.stderr,
                formatter=lambda span: printable(span.to_json(), multiline=True) + "\n",
            )
        )
    )
    trace.set_tracer_provider(tracer_provider)
    # Exported once, when the providers shut down.
    reader = PeriodicExportingMetricReader(
        ConsoleMetricExporter(
            out=sys.stderr,
            formatter=lambda data: printable(data.to_json(), multiline=True) + "\n",
        ),
        export_interval_millis=3_600_000,
    )
    meter_provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)

    def shutdown() -> None:
        tracer_provider.shutdown()
        meter_provider.shutdown()

    return shutdown

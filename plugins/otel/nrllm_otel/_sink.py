"""The sink: each run segment's audit records as an ``invoke_agent`` span with its children."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.semconv.attributes import error_attributes
from opentelemetry.semconv.attributes import server_attributes as server
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from nrllm_core import StepKind, hookimpl
from nrllm_core.log import logger
from nrllm_otel import _names as names
from nrllm_otel._content import Level, chat_content, level_of, tool_artifact_events, tool_content
from nrllm_otel._metrics import Instruments
from nrllm_otel._settings import OtelSettings

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from nrllm_core import AuditRecord

__all__ = ["OtelSink"]

_SCOPE: Final = "nrllm_otel"
_PROPAGATOR: Final = TraceContextTextMapPropagator()
# error.type of a call whose tool ran and answered with an error (or raised).
_TOOL_ERROR: Final = "tool_error"


@attrs.define(kw_only=True)
class _Segment:
    """What one run segment's open span needs from its earlier records."""

    span: Span
    level: Level
    provider: str | None
    model: str | None
    server_address: str | None
    server_port: int | None
    # The last request's redacted (or verbatim) messages, for the next ``chat`` span.
    input_messages: Any = None
    # When the request that has no ``llm`` record yet was sent.
    request_started: int | None = None
    # What the model had read when asked (the request's label): names, never content.
    label: Any = None


@final
class OtelSink:
    """The plugin: build it with the providers to use, or none for the global ones.

    ``[otel] enabled = false`` (delivered through ``nrllm_settings``) stops it from starting
    any span for the segments that begin afterwards.
    """

    def __init__(
        self,
        *,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self._tracer_provider = tracer_provider
        self._meter_provider = meter_provider
        self._tracer: Tracer | None = None
        self._instruments: Instruments | None = None
        self._enabled = True
        self._agent_name = OtelSettings().agent_name
        self._lock = threading.Lock()
        self._segments: dict[str, _Segment] = {}
        # Suspended segments' span contexts, until core asks for them to store.
        self._suspended: dict[str, trace.SpanContext] = {}

    # -- hooks -------------------------------------------------------------------------------

    @hookimpl
    def nrllm_settings_class(self) -> type[OtelSettings]:
        return OtelSettings

    @hookimpl
    def nrllm_settings(self, settings: Any) -> None:
        if not isinstance(settings, OtelSettings):
            settings = _settings_from(settings)
        self._enabled = settings.enabled
        self._agent_name = settings.agent_name

    @hookimpl
    def nrllm_trace_context(self, run_id: str) -> Mapping[str, str] | None:
        with self._lock:
            span_context = self._suspended.pop(run_id, None)
        if span_context is None:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(
            carrier, context=trace.set_span_in_context(trace.NonRecordingSpan(span_context))
        )
        return carrier

    @hookimpl
    def nrllm_audit(self, record: AuditRecord) -> None:
        # Observability must never stop a run: a failure here is logged, never raised.
        try:
            self._handle(record, time.time_ns())
        except Exception:
            logger().error("nrllm.otel.record_failed", run_id=record.run_id, exc_info=True)

    # -- records -----------------------------------------------------------------------------

    def _handle(self, record: AuditRecord, now: int) -> None:
        payload = record.payload
        if record.kind is StepKind.START:
            if self._enabled:
                started_segment = self._start(record, now)
                with self._lock:
                    self._segments[record.run_id] = started_segment
            return
        with self._lock:
            segment = self._segments.get(record.run_id)
        if segment is None:
            return
        started = now - int(record.duration_ms * 1_000_000)
        if record.kind is StepKind.REQUEST:
            segment.input_messages = payload.get("messages_sent")
            segment.request_started = now
            segment.label = payload.get("label")
        elif record.kind is StepKind.LLM:
            self._chat(segment, payload, started, now)
        elif record.kind is StepKind.TOOL:
            self._tool(segment, payload, started, now)
        elif record.kind is StepKind.GATE:
            segment.span.add_event("nrllm.gate.decision", _gate_attributes(payload), now)
        elif record.kind is StepKind.APPROVAL:
            segment.span.add_event("nrllm.approval", _approval_attributes(payload), now)
        elif record.kind is StepKind.SUSPENSION:
            segment.span.add_event("nrllm.suspension", _suspension_attributes(payload), now)
            self._end(record.run_id, segment, "awaiting_approval", "awaiting_approval", now)
        elif record.kind is StepKind.FINISH:
            self._end(
                record.run_id,
                segment,
                _text(payload.get("status")),
                _text(payload.get("termination_reason")),
                now,
            )

    def _start(self, record: AuditRecord, now: int) -> _Segment:
        payload = record.payload
        provider = _text(payload.get("provider"))
        resumed = _resumed_from(payload.get("trace_context"))
        parent = (
            otel_context.get_current()
            if resumed is None
            else trace.set_span_in_context(trace.NonRecordingSpan(resumed))
        )
        attributes = _drop_none(
            {
                names.GEN_AI_OPERATION_NAME: names.OPERATION_INVOKE_AGENT,
                names.GEN_AI_AGENT_NAME: self._agent_name,
                names.GEN_AI_PROVIDER_NAME: _provider_name(_text(payload.get("provider_kind")))
                or provider,
                names.GEN_AI_REQUEST_MODEL: _text(payload.get("model")),
                names.GEN_AI_CONVERSATION_ID: record.run_id,
                "nrllm.provider": provider,
                "nrllm.trust_zone": _text(payload.get("zone")),
                "nrllm.skill": _text(payload.get("skill")),
                "nrllm.run.kind": _text(payload.get("run_kind")),
            }
        )
        span = self._tracer_for().start_span(
            f"{names.OPERATION_INVOKE_AGENT} {self._agent_name}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=() if resumed is None else (Link(resumed, {"nrllm.link": "resumes"}),),
            start_time=now,
        )
        port = payload.get("server_port")
        return _Segment(
            span=span,
            level=level_of(payload.get("privacy_level")),
            provider=attributes.get(names.GEN_AI_PROVIDER_NAME),
            model=attributes.get(names.GEN_AI_REQUEST_MODEL),
            server_address=_text(payload.get("server_address")),
            server_port=port if type(port) is int else None,
        )

    def _chat(self, segment: _Segment, payload: Mapping[str, Any], start: int, end: int) -> None:
        usage = {
            names.GEN_AI_USAGE_INPUT_TOKENS: _count(payload.get("prompt_tokens")),
            names.GEN_AI_USAGE_OUTPUT_TOKENS: _count(payload.get("completion_tokens")),
            # Zero is how a provider that does not report them reads: left out.
            names.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: _count(payload.get("cached_tokens"))
            or None,
            names.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS: (
                _count(payload.get("reasoning_tokens")) or None
            ),
            names.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS: (
                _count(payload.get("cache_creation_tokens")) or None
            ),
        }
        reason = _text(payload.get("finish_reason"))
        answered = {
            **_drop_none(usage),
            **_drop_none(
                {
                    names.GEN_AI_RESPONSE_ID: _text(payload.get("response_id")),
                    names.GEN_AI_RESPONSE_MODEL: _text(payload.get("response_model")),
                    names.GEN_AI_RESPONSE_FINISH_REASONS: None if reason is None else (reason,),
                }
            ),
            **chat_content(segment.level, segment.input_messages, payload),
            **_label_attributes(segment.label),
        }
        self._model_call(
            segment,
            answered,
            start,
            end,
            input_tokens=usage[names.GEN_AI_USAGE_INPUT_TOKENS],
            output_tokens=usage[names.GEN_AI_USAGE_OUTPUT_TOKENS],
        )

    def _model_call(
        self,
        segment: _Segment,
        attributes: Mapping[str, Any],
        start: int,
        end: int,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        error: str | None = None,
    ) -> None:
        """The ``chat`` span and its metrics; ``error`` (``error.type``) for a call that got no
        answer."""
        shared = _drop_none(
            {
                names.GEN_AI_OPERATION_NAME: names.OPERATION_CHAT,
                names.GEN_AI_PROVIDER_NAME: segment.provider,
                names.GEN_AI_REQUEST_MODEL: segment.model,
                server.SERVER_ADDRESS: segment.server_address,
                server.SERVER_PORT: segment.server_port,
                error_attributes.ERROR_TYPE: error,
            }
        )
        segment.input_messages = None
        segment.request_started = None
        # The convention's name: the operation and the requested model, when there is one.
        name = f"{names.OPERATION_CHAT} {segment.model}" if segment.model else names.OPERATION_CHAT
        span = self._child(segment, name, SpanKind.CLIENT, {**shared, **attributes}, start)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=end)
        self._instruments_for().chat(
            shared,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            seconds=(end - start) / 1e9,
        )

    def _tool(self, segment: _Segment, payload: Mapping[str, Any], start: int, end: int) -> None:
        data_class = _text(payload.get("tool_data_class"))
        # A tool no plugin registered has no class, and its name is whatever the model wrote:
        # free text, shown from ``redacted`` on only, and never a metric's label (a model
        # could make any number of them).
        asked = _text(payload.get("tool_name")) or "unknown"
        known = asked if data_class is not None else "unknown"
        name = known if segment.level is Level.METADATA else asked
        outcome = _text(payload.get("tool_outcome")) or (
            "error" if payload.get("tool_is_error") is True else "ok"
        )
        attributes = _drop_none(
            {
                names.GEN_AI_OPERATION_NAME: names.OPERATION_EXECUTE_TOOL,
                names.GEN_AI_TOOL_NAME: name,
                names.GEN_AI_TOOL_DESCRIPTION: _text(payload.get("tool_description")),
                names.GEN_AI_TOOL_CALL_ID: _text(payload.get("tool_call_id")),
                names.GEN_AI_TOOL_TYPE: names.TOOL_TYPE_FUNCTION,
                "nrllm.tool.data_class": data_class,
                "nrllm.tool.effect": _text(payload.get("tool_effect")),
                "nrllm.tool.artifact_types": _artifact_types(payload),
                "nrllm.tool.result": outcome,
            }
        )
        attributes.update(tool_content(segment.level, payload))
        span = self._child(
            segment, f"{names.OPERATION_EXECUTE_TOOL} {name}", SpanKind.INTERNAL, attributes, start
        )
        for event_name, event_attributes in tool_artifact_events(segment.level, payload):
            span.add_event(event_name, event_attributes, end)
        if payload.get("tool_is_error") is True:
            # error.type names the class of failure: refused, timeout, or the tool's own error.
            span.set_attribute(
                error_attributes.ERROR_TYPE, _TOOL_ERROR if outcome == "error" else outcome
            )
            span.set_status(Status(StatusCode.ERROR, outcome))
        span.end(end_time=end)
        self._instruments_for().tool_call(known, outcome, data_class)

    def _child(
        self,
        segment: _Segment,
        name: str,
        kind: SpanKind,
        attributes: Mapping[str, Any],
        start: int,
    ) -> Span:
        """A span under the segment's ``invoke_agent`` span, started at the step's start."""
        return self._tracer_for().start_span(
            name,
            context=trace.set_span_in_context(segment.span),
            kind=kind,
            attributes=attributes,
            start_time=start,
        )

    def _end(
        self, run_id: str, segment: _Segment, status: str | None, reason: str | None, now: int
    ) -> None:
        if segment.request_started is not None:
            # The segment ended with a request unanswered: that model call failed.
            self._model_call(
                segment,
                chat_content(segment.level, segment.input_messages, None),
                segment.request_started,
                now,
                error=reason or error_attributes.ErrorTypeValues.OTHER.value,
            )
        span = segment.span
        span.set_attributes(_drop_none({"nrllm.run.status": status, "nrllm.termination": reason}))
        if status == "failed":
            span.set_attribute(
                error_attributes.ERROR_TYPE, reason or error_attributes.ErrorTypeValues.OTHER.value
            )
            span.set_status(Status(StatusCode.ERROR, reason))
        span.end(end_time=now)
        span_context = span.get_span_context()
        with self._lock:
            self._segments.pop(run_id, None)
            # A no-op tracer's span (nothing configured) has no trace to resume: no context,
            # rather than an empty answer that core would refuse as malformed.
            if status == "awaiting_approval" and span_context.is_valid:
                self._suspended[run_id] = span_context

    # -- providers ---------------------------------------------------------------------------

    def _tracer_for(self) -> Tracer:
        if self._tracer is None:
            from importlib.metadata import version

            self._tracer = trace.get_tracer(
                _SCOPE,
                version("nrllm-otel"),
                tracer_provider=self._tracer_provider,
            )
        return self._tracer

    def _instruments_for(self) -> Instruments:
        if self._instruments is None:
            self._instruments = Instruments.create(self._meter_provider)
        return self._instruments


def _settings_from(section: object) -> OtelSettings:
    """Settings handed over as a plain section (the sink registered under another name)."""
    given = section if isinstance(section, Mapping) else {}
    enabled = given.get("enabled", True)
    if type(enabled) is not bool:
        # Fail closed: an observability backend is an external store.
        logger().warning("nrllm.otel.enabled_invalid")
        return OtelSettings(enabled=False)
    name = given.get("agent_name")
    try:
        return OtelSettings(enabled=enabled, agent_name=name if isinstance(name, str) else "nrllm")
    except ValueError:
        logger().warning("nrllm.otel.agent_name_invalid")
        return OtelSettings(enabled=enabled)


def _resumed_from(value: object) -> trace.SpanContext | None:
    if not isinstance(value, Mapping):
        return None
    carrier = {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}
    span_context = trace.get_current_span(_PROPAGATOR.extract(carrier)).get_span_context()
    return span_context if span_context.is_valid else None


def _gate_attributes(payload: Mapping[str, Any]) -> dict[str, Any]:
    decisions = [d for d in payload.get("decisions") or () if isinstance(d, Mapping)]
    return {
        "nrllm.gate.offered": tuple(
            str(d.get("tool")) for d in decisions if d.get("offered") is True
        ),
        "nrllm.gate.refused": tuple(
            f"{d.get('tool')}:{d.get('reason')}" for d in decisions if d.get("offered") is not True
        ),
        "nrllm.gate.observed": tuple(
            f"{d.get('tool')}:{d.get('observed')}" for d in decisions if d.get("observed")
        ),
    }


def _suspension_attributes(payload: Mapping[str, Any]) -> dict[str, Any]:
    calls = [c for c in payload.get("pending_calls") or () if isinstance(c, Mapping)]
    return _drop_none(
        {
            "nrllm.turn_digest": _text(payload.get("turn_digest")),
            "nrllm.pending.call_ids": tuple(str(c.get("id")) for c in calls),
            "nrllm.pending.tools": tuple(str(c.get("name")) for c in calls),
            "nrllm.pending.requires_approval": tuple(
                c.get("requires_approval") is True for c in calls
            ),
        }
    )


def _approval_attributes(payload: Mapping[str, Any]) -> dict[str, Any]:
    return _drop_none(
        {
            "nrllm.approval.decision": _text(payload.get("decision")),
            "nrllm.approval.approver": _text(payload.get("approver")),
            "nrllm.approval.decided_at": _text(payload.get("decided_at")),
            "nrllm.turn_digest": _text(payload.get("turn_digest")),
        }
    )


def _artifact_types(payload: Mapping[str, Any]) -> tuple[str, ...] | None:
    listed = payload.get("tool_artifact_types")
    if listed is None:
        listed = [
            a.get("type") for a in payload.get("tool_artifacts") or () if isinstance(a, Mapping)
        ]
    types = tuple(t for t in listed if isinstance(t, str))
    return types or None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


# ``gen_ai.provider.name`` for the provider kinds whose API the conventions name otherwise
# (upstream: GenAiProviderNameValues); any other kind is its own name.
_PROVIDER_NAMES: Final = {
    "openai-responses": "openai",
    "gemini": "gcp.gemini",
    "bedrock": "aws.bedrock",
}


def _provider_name(kind: str | None) -> str | None:
    """The conventions' name of the API a provider kind speaks."""
    return None if kind is None else _PROVIDER_NAMES.get(kind, kind)


def _label_attributes(label: Any) -> dict[str, Any]:
    """What the model had read when asked: its class, its integrity, and the tools that
    brought untrusted text (issue 34's label, as the request step records it)."""
    if not isinstance(label, Mapping):
        return {}
    sources = label.get("untrusted_from")
    return _drop_none(
        {
            "nrllm.label.data_class": _text(label.get("data_class")),
            "nrllm.label.integrity": _text(label.get("integrity")),
            "nrllm.label.untrusted_from": (
                tuple(s for s in sources if isinstance(s, str))
                if isinstance(sources, list) and sources
                else None
            ),
        }
    )

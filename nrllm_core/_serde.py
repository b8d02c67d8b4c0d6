"""One private cattrs converter per sink boundary, all encoding through the canonical encoder.

cattrs loads on the first call, never at ``import nrllm_core``.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from nrllm_core import _json
from nrllm_core._payloads import AuditRecord, RunStep, TraceEvent, WirePayload

if TYPE_CHECKING:
    from cattrs.preconf.json import JsonConverter

__all__ = ["audit_dict", "to_json", "trace_dict", "wire_dict"]


def _converter() -> JsonConverter:
    from cattrs.preconf.json import make_converter

    return make_converter(forbid_extra_keys=True)


@functools.cache
def _wire() -> JsonConverter:
    return _converter()


@functools.cache
def _trace() -> JsonConverter:
    conv = _converter()
    conv.register_unstructure_hook(RunStep, RunStep.to_dict)
    return conv


@functools.cache
def _audit() -> JsonConverter:
    conv = _converter()
    conv.register_unstructure_hook(RunStep, RunStep.to_dict)
    return conv


def wire_dict(payload: WirePayload) -> dict[str, Any]:
    result: dict[str, Any] = _wire().unstructure(payload, WirePayload)
    return result


def trace_dict(event: TraceEvent) -> dict[str, Any]:
    """``{"run_id", "sequence", ...the step's keys}``."""
    nested: dict[str, Any] = _trace().unstructure(event, TraceEvent)
    return {"run_id": nested["run_id"], "sequence": nested["sequence"], **nested["step"]}


def audit_dict(record: AuditRecord) -> dict[str, Any]:
    result: dict[str, Any] = _audit().unstructure(record, AuditRecord)
    return result


def to_json(data: Any) -> str:
    """Canonical JSON text for sink output."""
    return _json.dumps(data).decode()

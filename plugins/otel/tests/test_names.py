"""Every GenAI name the plugin spells out is the one the installed semantic conventions define.

The package keeps these constants in private, deprecated modules; once it drops them this test
fails (it never skips), and the names are to be checked against their new home instead.
"""

from __future__ import annotations

import importlib
from importlib.metadata import version
from types import ModuleType

import pytest

from nrllm_otel import _names

# Where each of _names' groups is defined upstream: the module and, for values, the enum.
ATTRIBUTES = "opentelemetry.semconv._incubating.attributes.gen_ai_attributes"
METRICS = "opentelemetry.semconv._incubating.metrics.gen_ai_metrics"
VALUE_ENUMS = {"OPERATION_": "GenAiOperationNameValues", "TOKEN_": "GenAiTokenTypeValues"}
# Values the convention names in its text only; upstream has no constant to compare with.
UNCHECKED = {"TOOL_TYPE_FUNCTION"}


def upstream(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError:
        pytest.fail(
            f"opentelemetry-semantic-conventions {version('opentelemetry-semantic-conventions')}"
            f" has no {module}: check nrllm_otel/_names.py against the GenAI semantic"
            " conventions where they live now, and point this test there"
        )


def test_every_name_belongs_to_a_checked_group():
    groups = ("GEN_AI_", *VALUE_ENUMS)
    assert sorted(_names.__all__) == sorted(
        name for name in vars(_names) if name.isupper() and not name.startswith("_")
    )
    assert [n for n in _names.__all__ if not n.startswith(groups) and n not in UNCHECKED] == []


@pytest.mark.parametrize("name", [n for n in _names.__all__ if n.startswith("GEN_AI_")])
def test_an_attribute_or_metric_name_matches_the_conventions_constant(name):
    attributes, metrics = upstream(ATTRIBUTES), upstream(METRICS)
    defined = getattr(attributes, name, None) or getattr(metrics, name, None)
    assert defined is not None, f"the installed semantic conventions define no {name}"
    assert getattr(_names, name) == defined


@pytest.mark.parametrize("name", [n for n in _names.__all__ if n.startswith(tuple(VALUE_ENUMS))])
def test_a_value_matches_the_conventions_enum_member(name):
    prefix = next(p for p in VALUE_ENUMS if name.startswith(p))
    values = getattr(upstream(ATTRIBUTES), VALUE_ENUMS[prefix])
    member = name.removeprefix(prefix)
    assert member in values.__members__, f"{VALUE_ENUMS[prefix]} has no {member}"
    assert getattr(_names, name) == values[member].value

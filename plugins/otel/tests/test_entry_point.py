"""The installed entry point loads no OpenTelemetry until a run sends it a record, and its
settings reach the sink it then makes, whenever they were delivered."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# In a fresh interpreter: which modules are loaded is the point, and the global providers this
# sets must not leak into the other tests.
_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path

    import nrllm_otel
    from nrllm_core import Host, make_plugin_manager

    folder = Path(sys.argv[1])
    script = folder / "script.json"
    script.write_text(json.dumps({"turns": [{"content": "ok"}] * 2}), encoding="utf-8")

    def host(otel):
        pm = make_plugin_manager(load_entry_points=False)
        pm.register(nrllm_otel, name="otel")
        return Host.from_config(
            data={
                "providers": {"model": {"kind": "scripted", "script": str(script)}},
                "defaults": {"provider": "model"},
                "actor": {"id": "alice"},
                "otel": otel,
            },
            pm=pm,
            data_dir=folder / "home",
            environ={},
        )

    def loaded():
        return any(name.startswith("opentelemetry") for name in sys.modules)

    first = host({"agent_name": "first-agent"})
    print("after the settings:", loaded())

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    print("run:", first.run("Hi").status)
    names = sorted(
        span.attributes.get("gen_ai.agent.name")
        for span in exporter.get_finished_spans()
        if span.name.startswith("invoke_agent")
    )
    print("agents:", names)
    # Delivered after the sink was made: a host that turns the plugin off.
    second = host({"enabled": False})
    exporter.clear()
    print("run:", second.run("Hi").status)
    print("spans when off:", len(exporter.get_finished_spans()))
    first.store.close()
    second.store.close()
    """
)


def test_the_entry_point_loads_opentelemetry_at_its_first_record_with_its_settings(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "after the settings: False",
        "run: completed",
        "agents: ['first-agent']",
        "run: completed",
        "spans when off: 0",
    ]

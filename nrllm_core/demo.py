"""``python -m nrllm_core.demo``: one governed run after another, on the embedded SQLite store.

It writes its configuration and model scripts into ``$NRLLM_HOME`` (``make demo`` uses
``.demo/``), so every figure it prints comes from the real code paths: the gate, the seam, the
sinks, the loop, the sealed suspension, the approval and the persisted, filtered timeline.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

from nrllm_core._host import Host, RunOutcome
from nrllm_core._payloads import TraceEvent
from nrllm_core._serde import to_json, trace_dict

_CONFIG = """\
[defaults]
provider = "cloud"

# A hosted model outside the EU: the strictest zone, ceiling editorContent.
[providers.cloud]
kind = "scripted"
script = "read.toml"
trust_zone = "externalGlobal"

[providers.cloud_writer]
kind = "scripted"
script = "write.toml"
trust_zone = "externalGlobal"

# A model on this machine: every class may be offered.
[providers.onprem]
kind = "scripted"
script = "read.toml"
trust_zone = "local"

[actor]
id = "demo-operator"
permissions = ["repurpose"]

[privacy]
level = "metadata"

[builtin]
write_tables = ["drafts"]
"""

_READ_SCRIPT = """\
[[turns]]
content = "I will read the published pages."
[[turns.tool_calls]]
name = "read_records"
arguments = { table = "pages", limit = 3 }

[[turns]]
content = "There are three pages; the first is the home page."
"""

_WRITE_SCRIPT = """\
[[turns]]
content = "I will draft the page you asked for."
[[turns.tool_calls]]
name = "create_record_draft"
arguments = { table = "drafts", values = { title = "Opening hours", body = "Mon-Fri 9-17" } }

[[turns]]
content = "The draft is saved; an editor can publish it."
"""


def _section(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 74 - len(title)))


def _show_event(event: TraceEvent) -> None:
    step = trace_dict(event)
    if step["kind"] != "tool":
        return
    print(f"  trace  #{step['sequence']} tool {step['tool_name']}")
    for artifact in step.get("tool_artifacts", []):
        data = artifact["data"]
        label = artifact["label"] or "Artifact"
        if artifact["type"] == "table":
            print(f"         [{label}] columns {data['columns']}, {len(data['rows'])} row(s):")
            for row in data["rows"]:
                print(f"           {row}")
        else:
            print(f"         [{label}] {to_json(data)}")


def _show_outcome(outcome: RunOutcome) -> None:
    print(f"  status {outcome.status} ({outcome.termination_reason})")
    if outcome.final_content:
        print(f"  answer {outcome.final_content}")
    for pending in outcome.pending:
        print(f"  pending {pending.name} {to_json(pending.arguments)}")
        for line in pending.preview:
            print(f"    | {line}")
    if outcome.turn_digest:
        print(f"  digest {outcome.turn_digest}")
    if outcome.error:
        print(f"  error  {outcome.error}")


def main(home: Path) -> int:
    home.mkdir(parents=True, exist_ok=True)
    (home / "nrllm.toml").write_text(_CONFIG, encoding="utf-8")
    (home / "read.toml").write_text(_READ_SCRIPT, encoding="utf-8")
    (home / "write.toml").write_text(_WRITE_SCRIPT, encoding="utf-8")
    host = Host.from_config(home / "nrllm.toml", data_dir=home)
    actor = host.config.actor()

    _section("1. Tools offered by zone (the gate)")
    for provider in ("onprem", "cloud"):
        report = host.gate(provider=provider, skill=None, actor=actor)
        print(f"  {provider}: zone {report.zone.value}, ceiling {report.ceiling.value}")
        for decision in report.decisions:
            verdict = "offered" if decision.offered else f"denied ({decision.reason})"
            print(f"    {decision.tool:<24} {decision.data_class.value:<22} {verdict}")

    _section("2. A read tool: the table goes to the trace, only text to the wire")
    wire = host.invoke("read_records", {"table": "pages", "limit": 3}, on_event=_show_event)
    print("  wire   (what the model receives):")
    print(textwrap.indent(wire.content, "           "))

    _section("3. A governed run against the cloud provider")
    outcome = host.run("Which pages are published?", provider="cloud", on_event=_show_event)
    _show_outcome(outcome)

    _section("4. A write tool suspends the run before it executes")
    suspended = host.run("Draft a page with our opening hours.", provider="cloud_writer")
    _show_outcome(suspended)
    if suspended.turn_digest is None:
        print("  the run did not suspend", file=sys.stderr)
        return 1

    _section("5. A person approves; the run resumes and the write executes")
    resumed = host.approve(
        suspended.run_id,
        approve=True,
        approver="demo-editor",
        turn_digest=suspended.turn_digest,
        on_event=_show_event,
    )
    _show_outcome(resumed)

    _section("6. The persisted, privacy-filtered timeline (what an auditor sees)")
    detail = host.store.get_run(suspended.run_id)
    if detail is not None:
        for step in detail.steps:
            print(f"  #{step.sequence} {step.kind:<8} round {step.round}  {_brief(step.payload)}")
    print(f"\nEverything above is stored in {home}; `nrllm --config {home / 'nrllm.toml'} runs`")
    print("lists the runs, and `nrllm serve` opens the inspector.")
    return 0


def _brief(payload: Any) -> str:
    text = to_json(payload)
    return text if len(text) <= 110 else text[:107] + "..."


if __name__ == "__main__":
    from nrllm_core.cli._logging import configure_for_cli

    configure_for_cli()
    sys.exit(main(Path(os.environ.get("NRLLM_HOME", ".demo")).resolve()))

"""The command group and the core commands."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import click

from nrllm_core import _json
from nrllm_core._manager import make_plugin_manager
from nrllm_core._payloads import StepKind
from nrllm_core._serde import audit_dict, to_json, trace_dict, wire_dict
from nrllm_core._sink_recorder import SinkRecorder
from nrllm_core.cli import _common
from nrllm_core.cli._logging import configure_for_cli
from nrllm_core.cli._terminal import PrintableGroup, echo, echo_json


@click.group(cls=PrintableGroup)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Configuration file (default: $NRLLM_CONFIG, then ./nrllm.toml).",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """Governed LLM tool calling."""
    ctx.obj = {"config_path": config_path}


def main() -> None:
    """Console-script entry point: plugins may add commands before the command line is read."""
    configure_for_cli()
    make_plugin_manager().register_commands(cli)
    cli()


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def plugins(as_json: bool) -> None:
    """List plugins with their distribution, hooks, tools and load errors."""
    # ``nrllm plugins`` shows the load errors in full itself.
    pm = _common.plugin_manager(report_load_errors=False)
    records = pm.plugin_records()
    if as_json:
        echo_json(
            [
                {
                    "name": r.name,
                    "distribution": r.distribution,
                    "version": r.version,
                    "hooks": list(r.hooks),
                    "tools": list(r.tools),
                    "error": r.error,
                    "withheld": [{"tool": t, "plugins": list(p)} for t, p in r.withheld],
                    "traceback": r.traceback,
                }
                for r in records
            ]
        )
        return
    for r in records:
        where = f"{r.distribution} {r.version}" if r.distribution else "registered by the host"
        echo(f"{r.name} ({where})")
        if r.error:
            echo(f"  error: {r.error}")
        if r.traceback:
            echo(_indent(r.traceback.rstrip(), 4), multiline=True)
        if r.hooks:
            echo(f"  hooks: {', '.join(r.hooks)}")
        if r.tools:
            echo(f"  tools: {', '.join(r.tools)}")
        for tool_name, owners in r.withheld:
            echo(f"  withheld: {tool_name} (registered by {' and '.join(owners)})")


def _parse_arguments(raw: str) -> dict[str, Any]:
    import json

    try:
        value = _json.loads(raw)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(
            f"not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
            param_hint="--args",
        ) from None
    except ValueError:
        raise click.BadParameter("not valid JSON", param_hint="--args") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--args")
    return value


@cli.command()
@click.argument("tool_name")
@click.option("--args", "raw_args", default="{}", help="The call's arguments as a JSON object.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--provider", default=None, help="Apply the gate for this provider (default: a direct call)."
)
@click.pass_context
def invoke(
    ctx: click.Context, tool_name: str, raw_args: str, as_json: bool, provider: str | None
) -> None:
    """Call one tool through the seam and show what the wire, trace and audit received."""
    arguments = _parse_arguments(raw_args)
    host = _common.open_host(ctx)
    catalog = host.pm.catalog()
    # A withheld name is no typo: the call's report says why it is withheld.
    suggestion = None if catalog.claims(tool_name) else _closest(tool_name, catalog.tools)
    if suggestion:
        # On stderr: stdout is the call's report, which says the tool is unknown.
        echo(suggestion, err=True)
    capture = SinkRecorder()
    host.pm.register(capture, name="nrllm.cli.capture")
    try:
        host.invoke(tool_name, arguments, provider=provider)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    # The call's run also records its start, its finish and, with --provider, the gate's
    # decision: show the tool call's own step.
    report = {
        "wire": wire_dict(capture.wire[-1]),
        "trace": trace_dict(next(e for e in capture.trace if e.step.kind is StepKind.TOOL)),
        "audit": audit_dict(next(r for r in capture.audit if r.kind is StepKind.TOOL)),
    }
    if as_json:
        echo_json(report)
        return
    wire = report["wire"]
    echo(f"wire  ({'error' if wire['is_error'] else 'ok'}): what the model would receive")
    echo(_indent(wire["content"]), multiline=True)
    artifacts = report["trace"].get("tool_artifacts", [])
    echo(f"trace: {len(artifacts)} artifact(s), for the run's trace and inspector only")
    for artifact in artifacts:
        echo(_indent(f"[{artifact['type']}] {artifact['label'] or 'Artifact'}"))
        echo(_indent(to_json(artifact["data"]), 4))
    echo("audit: the persisted copy")
    echo(_indent(to_json(report["audit"]["payload"])))


def _closest(name: str, known: Iterable[str]) -> str | None:
    """``did you mean "..."?`` for a name that is not known but close to some that are."""
    import difflib

    close = difflib.get_close_matches(name, list(known), n=3)
    if not close:
        return None
    return "did you mean " + " or ".join(f'"{n}"' for n in close) + "?"


def _indent(text: str, width: int = 2) -> str:
    pad = " " * width
    return "\n".join(pad + line for line in text.splitlines() or [""])

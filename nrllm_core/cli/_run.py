"""The run commands: a governed run, and a person's decision on a suspended one."""

from __future__ import annotations

import shlex
import sys
from typing import Any, NoReturn

import click

from nrllm_core._config import ConfigError
from nrllm_core._host import ApprovalRefused, Host, RunOutcome
from nrllm_core._serde import to_json
from nrllm_core.cli import _main
from nrllm_core.cli._common import BadInput
from nrllm_core.cli._terminal import echo, echo_json


def open_host(ctx: click.Context) -> Host:
    try:
        return Host.from_config(ctx.find_root().obj["config_path"], pm=_main._plugin_manager())
    except ConfigError as exc:
        raise BadInput(f"invalid configuration: {exc}") from None


@_main.cli.command()
@click.argument("prompt")
@click.option("--provider", default=None, help="The provider (default: [defaults] provider).")
@click.option("--skill", default=None, help="Narrow the offered tools to this skill's list.")
@click.option(
    "--max-rounds", type=int, default=None, help="Rounds before synthesis (5; 20 at most)."
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def run(
    ctx: click.Context,
    prompt: str,
    provider: str | None,
    skill: str | None,
    max_rounds: int | None,
    as_json: bool,
) -> None:
    """Run PROMPT against a provider with the tools its zone allows."""
    host = open_host(ctx)
    try:
        outcome = host.run(prompt, provider=provider, skill=skill, max_rounds=max_rounds)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    _report(ctx, outcome, as_json)


@_main.cli.command()
@click.argument("run_id")
@click.option("--deny", is_flag=True, help="Deny the pending turn instead of approving it.")
@click.option("--as", "approver", default=None, help="Who decides (default: the configured actor).")
@click.option("--digest", default=None, help="The turn digest (default: the one stored now).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def approve(
    ctx: click.Context,
    run_id: str,
    deny: bool,
    approver: str | None,
    digest: str | None,
    as_json: bool,
) -> None:
    """Approve (or --deny) a suspended run's pending turn and resume it here."""
    host = open_host(ctx)
    if digest is None:
        suspension = host.store.suspension(run_id)
        digest = suspension.turn_digest if suspension is not None else None
        if digest is not None:
            # On stderr with --json, so stdout stays one JSON object.
            echo(f"turn digest: {digest}", err=as_json)
    try:
        outcome = host.approve(
            run_id,
            approve=not deny,
            approver=approver or host.config.actor().id,
            turn_digest=digest,
        )
    except ApprovalRefused as exc:
        _refused(host, run_id, str(exc), as_json)
    _report(ctx, outcome, as_json)


def _refused(host: Host, run_id: str, reason: str, as_json: bool) -> NoReturn:
    if as_json:
        # A refusal changes nothing: the status is the run's own, as stored (none if unknown).
        detail = host.store.get_run(run_id)
        echo_json(
            RunOutcome(
                run_id=run_id,
                status=None if detail is None else detail.run.status.value,
                termination_reason=None,
                final_content="",
                error=reason,
            ).to_dict()
        )
    else:
        echo(f"approval refused: {reason}", err=True)
    sys.exit(1)


def _report(ctx: click.Context, outcome: RunOutcome, as_json: bool) -> None:
    if as_json:
        echo_json(outcome.to_dict())
    elif outcome.status == "completed":
        echo(outcome.final_content, multiline=True)
    elif outcome.status == "awaiting_approval":
        echo(f"run {outcome.run_id} is waiting for approval of this turn:")
        for pending in outcome.pending:
            need = "needs approval" if pending.requires_approval else "runs with the turn"
            echo(f"  {pending.name} ({need}) {to_json(pending.arguments)}")
            for line in pending.preview:
                echo(f"    | {line}")
        echo(f"turn digest: {outcome.turn_digest}")
        base = _command_prefix(ctx)
        echo(f"approve: {base} approve {outcome.run_id} --digest {outcome.turn_digest}")
        echo(f"deny:    {base} approve {outcome.run_id} --deny --digest {outcome.turn_digest}")
    else:
        echo(f"run {outcome.run_id} failed: {outcome.error or ''}", err=True)
    if outcome.status == "failed":
        sys.exit(1)


def _command_prefix(ctx: click.Context) -> str:
    config_path: Any = ctx.find_root().obj["config_path"]
    return "nrllm" if config_path is None else f"nrllm --config {shlex.quote(str(config_path))}"

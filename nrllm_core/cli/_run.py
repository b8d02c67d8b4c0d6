"""The run commands: a governed run, and a person's decision on a suspended one."""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Any, Final, NoReturn

import click

from nrllm_core._serde import to_json
from nrllm_core._status import RunStatus
from nrllm_core.cli import _main
from nrllm_core.cli._common import BadInput, check_text, open_host
from nrllm_core.cli._otel import otel_console_option, start_otel_console
from nrllm_core.cli._terminal import echo, echo_json

if TYPE_CHECKING:
    from nrllm_core._ask_values import QuestionHandler
    from nrllm_core._host import Host
    from nrllm_core._outcome import RunOutcome


@_main.cli.command()
@click.argument("prompt")
@click.option("--provider", default=None, help="The provider (default: [defaults] provider).")
@click.option("--skill", default=None, help="Narrow the offered tools to this skill's list.")
@click.option(
    "--max-rounds",
    type=int,
    default=None,
    help="Rounds before a text-only last request ([run] max_rounds, 5; at most "
    "[run] max_rounds_cap, 20).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@otel_console_option
@click.pass_context
def run(
    ctx: click.Context,
    prompt: str,
    provider: str | None,
    skill: str | None,
    max_rounds: int | None,
    as_json: bool,
    otel_console: bool,
) -> None:
    """Run PROMPT against a provider with the tools its zone allows. On a terminal, a tool's
    question to a person is asked there; elsewhere it is declined."""
    # Loaded with the host: a command that opens none (``--help``, ``runs``) never loads them.
    from nrllm_core._events import Finished, Suspended
    from nrllm_core.cli._progress import ProgressLine

    line = ProgressLine() if _stderr_terminal() else None
    asker = _asker()
    if line is not None and asker is not None:
        asker = line.asking(asker)
    host = open_host(ctx, on_elicitation=asker)
    if otel_console:
        start_otel_console(host.pm.has_plugin("otel"))
    try:
        events = host.stream(prompt, provider=provider, skill=skill, max_rounds=max_rounds)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    # The events only drive the progress line: the model's text is printed once, with the
    # outcome, as it always was (stdout is the answer, not a transcript of its making).
    for event in events:
        if line is not None:
            line.see(event)
        if isinstance(event, Suspended | Finished):
            _report(ctx, event.outcome, as_json)


@_main.cli.command()
@click.argument("run_id")
@click.option("--deny", is_flag=True, help="Deny the pending turn instead of approving it.")
@click.option("--as", "approver", default=None, help="Who decides (default: the configured actor).")
@click.option(
    "--digest",
    default=None,
    help="The turn digest you reviewed (without it: shown and confirmed on a terminal).",
)
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
    # Refused before anything is decided.
    check_text("--as", approver)
    host = open_host(ctx, on_elicitation=_asker())
    # Loaded with the host: a command that opens none (``--help``, ``runs``) never loads them.
    from nrllm_core._suspension import ApprovalRefused

    if digest is None:
        digest = _confirmed_digest(host, run_id, deny=deny, as_json=as_json)
    try:
        outcome = host.approve(
            run_id,
            approve=not deny,
            # An explicit ``--as ""`` is an approver naming nobody, refused like ``--as " "``.
            approver=host.config.actor().id if approver is None else approver,
            turn_digest=digest,
        )
    except ApprovalRefused as exc:
        _refused(host, run_id, str(exc), as_json)
    _report(ctx, outcome, as_json)


def _asker() -> QuestionHandler | None:
    """Who answers a tool's question: the person at the terminal, when there is one."""
    if not _interactive():
        return None
    from nrllm_core.cli._questions import ask_on_terminal

    return ask_on_terminal


def _stderr_terminal() -> bool:
    """Whether a person watches standard error: the progress line is for a terminal only."""
    return sys.stderr.isatty()


def _interactive() -> bool:
    """Whether a person can answer a prompt: standard input is a terminal."""
    return sys.stdin.isatty()


def _confirmed_digest(host: Host, run_id: str, *, deny: bool, as_json: bool) -> str:
    """The digest of the turn a person was shown and confirmed: nothing is decided blind."""
    from nrllm_core._suspension import ApprovalRefused

    if not _interactive():
        raise BadInput(
            "no --digest: pass the turn digest you reviewed (--digest D), "
            "or run this on a terminal to review the turn and confirm it"
        )
    try:
        outcome = host.pending(run_id)
    except ApprovalRefused as exc:
        _refused(host, run_id, str(exc), as_json)
    if outcome is None or outcome.turn_digest is None:
        _refused(host, run_id, f'run "{run_id}" is not awaiting approval', as_json)
    # On stderr with --json, so stdout stays one JSON object.
    _show_turn(outcome, err=as_json)
    if not click.confirm("Deny?" if deny else "Approve?", default=False, err=as_json):
        echo("nothing was decided; the run is still waiting", err=True)
        sys.exit(1)
    return outcome.turn_digest


def _refused(host: Host, run_id: str, reason: str, as_json: bool) -> NoReturn:
    from nrllm_core._outcome import RunOutcome

    if as_json:
        # A refusal changes nothing: the status is the run's own, as stored (none if unknown).
        detail = host.store.get_run(run_id)
        echo_json(
            RunOutcome(
                run_id=run_id,
                status=None if detail is None else detail.run.status,
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
    elif outcome.status is RunStatus.COMPLETED:
        echo(outcome.final_content, multiline=True)
    elif outcome.status is RunStatus.AWAITING_APPROVAL:
        _show_turn(outcome)
        base = _command_prefix(ctx)
        echo(f"approve: {base} approve {outcome.run_id} --digest {outcome.turn_digest}")
        echo(f"deny:    {base} approve {outcome.run_id} --deny --digest {outcome.turn_digest}")
    else:
        echo(f"run {outcome.run_id} failed: {outcome.error or ''}", err=True)
    if outcome.status is RunStatus.FAILED:
        sys.exit(1)


# Why the information-flow policy sent a call to a person, as the person reads it.
_POLICY_REASONS: Final = {
    "untrusted": ": the run has read untrusted text",
    "egress": ": it would send data above its clearance",
}


def _show_turn(outcome: RunOutcome, *, err: bool = False) -> None:
    """The pending calls, their previews and the digest: what a person decides on."""
    echo(f"run {outcome.run_id} is waiting for approval of this turn:", err=err)
    for pending in outcome.pending:
        if pending.refusal is not None:
            need = "refused, never runs"
        elif pending.requires_approval:
            need = "needs approval" + _POLICY_REASONS.get(pending.policy_reason or "", "")
        else:
            need = "runs with the turn"
        echo(f"  {pending.name} ({need}) {to_json(pending.arguments)}", err=err)
        for line in pending.preview:
            echo(f"    | {line}", err=err)
    if outcome.untrusted:
        echo("untrusted text the model had read before this turn:", err=err)
    for source in outcome.untrusted:
        said = "" if source.excerpt is None else f": {source.excerpt}"
        echo(f"  {source.tool} ({source.call_id}){said}", err=err)
    echo(f"turn digest: {outcome.turn_digest}", err=err)


def _command_prefix(ctx: click.Context) -> str:
    config_path: Any = ctx.find_root().obj["config_path"]
    return "nrllm" if config_path is None else f"nrllm --config {shlex.quote(str(config_path))}"

"""The audit commands: what the store kept of each run, retention, and schema upgrades."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from nrllm_core._serde import to_json
from nrllm_core._status import RunStatus
from nrllm_core.cli._common import BadInput, host_config
from nrllm_core.cli._main import cli
from nrllm_core.cli._terminal import echo, echo_json

if TYPE_CHECKING:
    from nrllm_core._config import HostConfig
    from nrllm_core.store import RunInfo, Store

_STATUSES = tuple(status.value for status in RunStatus)


def _config(ctx: click.Context) -> HostConfig:
    return host_config(ctx)


def _open_store(config: HostConfig) -> Store:
    from sqlalchemy.exc import SQLAlchemyError

    from nrllm_core._config import ConfigError
    from nrllm_core.store import SchemaOutdatedError, Store

    try:
        return Store.open(config.store.url, lease_seconds=config.store.lease_seconds)
    except SchemaOutdatedError as exc:
        raise click.ClickException(str(exc)) from None
    except ConfigError as exc:
        raise BadInput(f"invalid configuration: {exc}") from None
    except SQLAlchemyError as exc:
        # The class only: the driver's text may quote the URL, and with it the password.
        raise click.ClickException(f"the store cannot be opened ({type(exc).__name__})") from None


@cli.group(invoke_without_command=True)
@click.option("--status", type=click.Choice(_STATUSES), default=None, help="Only runs in it.")
@click.option("--actor", default=None, help="Only runs that acted for this actor id.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def runs(ctx: click.Context, status: str | None, actor: str | None, as_json: bool) -> None:
    """List persisted runs, newest first."""
    if ctx.invoked_subcommand is not None:
        return
    store = _open_store(_config(ctx))
    try:
        found = store.list_runs(RunStatus(status) if status else None, actor=actor)
    finally:
        store.close()
    if as_json:
        echo_json([run.to_dict() for run in found])
        return
    if not found:
        echo("no runs")
    for run in found:
        echo(_run_line(run))


@runs.command("show")
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show(ctx: click.Context, run_id: str, as_json: bool) -> None:
    """Print a run's persisted timeline: the privacy-filtered steps an auditor sees."""
    store = _open_store(_config(ctx))
    try:
        detail = store.get_run(run_id)
    finally:
        store.close()
    if detail is None:
        raise click.ClickException(f"no run {run_id!r} in the audit store")
    usage, truncated = _answer_facts(detail.steps)
    label = _last_label(detail.steps)
    if as_json:
        echo_json(
            {
                "run": detail.run.to_dict(),
                "usage": usage,
                "truncated": truncated,
                "label": label,
                "steps": [s.to_dict() for s in detail.steps],
            }
        )
        return
    echo(_run_line(detail.run))
    echo(
        "  usage: "
        + ", ".join(f"{key} {count}" for key, count in usage.items())
        + f"; truncated: {'true' if truncated else 'false'}"
    )
    if label is not None:
        sources = ", ".join(label.get("untrusted_from") or ()) or "-"
        echo(
            f"  label: {label.get('data_class')}, {label.get('integrity')} "
            f"(untrusted text from: {sources})"
        )
    for step in detail.steps:
        echo(f"  #{step.sequence} {step.kind} round {step.round} {step.duration_ms:.1f} ms")
        echo(f"    {to_json(_facts(step.payload))}")


@runs.command("verify")
@click.argument("run_id", required=False)
@click.option("--all", "every", is_flag=True, help="Check every stored run.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def verify(ctx: click.Context, run_id: str | None, every: bool, as_json: bool) -> None:
    """Check that no stored step of a run was edited, deleted, inserted or reordered.

    Exits 0 when every chain holds and 1 naming each broken run's first broken step.
    """
    from nrllm_core.store import KeySource

    if (run_id is not None) == every:
        raise click.UsageError("name a RUN_ID or give --all")
    store = _open_store(_config(ctx))
    try:
        check = store.verify(run_id)
    except (ValueError, LookupError) as exc:
        # A malformed NRLLM_AUDIT_KEY or NRLLM_STATE_KEY (the message names it, never its
        # value), or a database that lost its own key.
        raise click.ClickException(str(exc)) from None
    finally:
        store.close()
    if check.key_source is KeySource.DATABASE:
        echo(
            "note: no NRLLM_AUDIT_KEY or NRLLM_STATE_KEY is set, so the chains use a key kept "
            "in the database itself: this detects accidents, not attackers",
            err=True,
        )
    if as_json:
        echo_json(check.to_dict())
    else:
        for found in check.broken:
            echo(f"run {found.run_id}: broken at step {found.sequence}: {found.problem}")
        state = f"{len(check.broken)} broken" if check.broken else "every chain holds"
        echo(f"{check.runs_checked} run(s) checked: {state}")
    if check.broken:
        ctx.exit(1)


def _answer_facts(steps: Any) -> tuple[dict[str, int], bool]:
    """The tokens the run's model calls were billed for, and whether its last answer was cut
    off at its token limit, from its ``llm`` steps."""
    from nrllm_core._messages import Usage

    keys = tuple(Usage().to_dict())
    usage = dict.fromkeys(keys, 0)
    truncated = False
    for step in steps:
        if step.kind != "llm":
            continue
        for key in keys:
            count = step.payload.get(key)
            usage[key] += count if type(count) is int and count >= 0 else 0
        truncated = step.payload.get("truncated") is True
    return usage, truncated


def _last_label(steps: Any) -> dict[str, Any] | None:
    """What the run's model had read by its last request (or the turn it suspended on)."""
    labels = [s.payload["label"] for s in steps if isinstance(s.payload.get("label"), dict)]
    return labels[-1] if labels else None


def _facts(payload: Any) -> dict[str, Any]:
    # kind, round and duration are already on the step's line.
    return {k: v for k, v in payload.items() if k not in ("kind", "round", "duration_ms")}


def _run_line(run: RunInfo) -> str:
    ended = run.ended_at.isoformat(timespec="seconds") if run.ended_at else "-"
    reason = f" ({run.termination_reason})" if run.termination_reason else ""
    return (
        f"{run.run_id}  {run.kind.value}  {run.status.value}{reason}  "
        f"provider={run.provider or '-'} zone={run.zone or '-'} actor={run.actor or '-'}  "
        f"{run.started_at.isoformat(timespec='seconds')} .. {ended}  "
        f"steps={run.steps} tokens={run.prompt_tokens}+{run.completion_tokens}"
    )


@cli.command()
@click.option(
    "--days",
    type=int,
    default=None,
    help="Delete finished runs older than this (default: [privacy] retention_days).",
)
@click.pass_context
def purge(ctx: click.Context, days: int | None) -> None:
    """Delete old runs with their steps; unfinished runs use [store] unfinished_retention_days."""
    config = _config(ctx)
    if days is None:
        days = config.privacy.retention_days
    if days < 1:
        echo(f"--days must be a positive integer (got {days}); nothing was purged")
        return
    from nrllm_core._config import MOST_DAYS

    if days > MOST_DAYS:
        # Past it the cut-off date is before any calendar's first.
        raise BadInput(f"--days: at most {MOST_DAYS:,}")
    unfinished_days = config.store.unfinished_retention_days
    store = _open_store(config)
    try:
        result = store.purge(days, unfinished_days)
    finally:
        store.close()
    echo(f"Finished runs ({days} d): {result.finished}")
    echo(f"Unfinished runs ({unfinished_days} d): {result.unfinished}")


@cli.group()
def db() -> None:
    """The audit database."""


@db.command()
@click.pass_context
def upgrade(ctx: click.Context) -> None:
    """Bring the audit database's schema to the version this nrllm ships."""
    from nrllm_core.store import Store

    config = _config(ctx)
    store = Store.connect(config.store.url, lease_seconds=config.store.lease_seconds)
    try:
        store.upgrade()
    finally:
        store.close()
    echo("the audit database is up to date")


@runs.command("cancel")
@click.argument("run_id")
@click.option("--as", "by", default=None, help="Who cancels (default: the configured actor).")
@click.pass_context
def cancel(ctx: click.Context, run_id: str, by: str | None) -> None:
    """End a run that waits for an approval: its sealed state is destroyed, the audit records
    who cancelled it, and a later approval is refused. Exits 1 when it waits for none."""
    from nrllm_core._suspension import ApprovalRefused
    from nrllm_core.cli._common import check_text, open_host

    check_text("--as", by)
    host = open_host(ctx)
    try:
        cancelled = host.cancel(run_id, by=by)
    except ApprovalRefused as exc:
        echo(f"not cancelled: {exc}", err=True)
        ctx.exit(1)
    finally:
        host.store.close()
    if not cancelled:
        echo(f'not cancelled: run "{run_id}" is not awaiting approval', err=True)
        ctx.exit(1)
    echo(f'run "{run_id}" cancelled')

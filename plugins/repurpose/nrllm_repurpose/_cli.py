"""``nrllm repurpose``: list jobs, show one, run the worker."""

from __future__ import annotations

import os
from typing import Any

import click

from nrllm_core import HostConfig, load_config
from nrllm_core.cli import BadInput, echo, echo_json, host_config
from nrllm_repurpose._records import ArtifactInfo, JobInfo
from nrllm_repurpose._settings import SettingsError
from nrllm_repurpose._start import display_url

__all__ = ["repurpose"]


def _open(ctx: click.Context) -> tuple[HostConfig, Any]:
    from nrllm_core.store import default_data_dir
    from nrllm_repurpose._store import JobStore
    from nrllm_repurpose._worker import settings_for

    config = host_config(ctx)
    try:
        settings = settings_for(config)
    except SettingsError as exc:
        raise BadInput(f"invalid configuration: {exc}") from None
    store = JobStore.open(settings.store_url, data_dir=default_data_dir())
    ctx.call_on_close(store.close)
    return config, store


def _visible(config: HostConfig, job: JobInfo) -> bool:
    actor = config.actor()
    # Seeing a job is granted, so ids are compared exactly: the skeleton would show Kim's
    # jobs to Kirn.
    return actor.admin or actor.same_id_for_grant(job.owner)


def _job_dict(job: JobInfo) -> dict[str, Any]:
    return {
        "uid": job.uid,
        "status": job.status.value,
        "source_url": display_url(job.source_url),
        "formats": list(job.formats),
        "owner": job.owner,
        "created_at": job.created_at.isoformat(),
        "message": job.message,
    }


def _artifact_dict(artifact: ArtifactInfo) -> dict[str, Any]:
    return {"format": artifact.format, "status": artifact.status.value, "error": artifact.error}


@click.group()
def repurpose() -> None:
    """Repurpose jobs: list them, show one, run the worker."""


@repurpose.group(invoke_without_command=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def jobs(ctx: click.Context, as_json: bool) -> None:
    """List the jobs you may see (an admin sees every job), newest first."""
    if ctx.invoked_subcommand is not None:
        return
    config, store = _open(ctx)
    visible = [job for job in store.jobs() if _visible(config, job)]
    if as_json:
        echo_json([_job_dict(job) for job in visible])
        return
    if not visible:
        echo("no repurpose jobs")
    for job in visible:
        line = f"#{job.uid}  {job.status.value:<14}  {display_url(job.source_url)}"
        echo(f"{line}  ({', '.join(job.formats)})  by {job.owner}")
        if job.message:
            echo(f"    {job.message}")


@jobs.command()
@click.argument("uid", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def show(ctx: click.Context, uid: int, as_json: bool) -> None:
    """Show one job and its artifacts."""
    config, store = _open(ctx)
    job = store.job(uid)
    if job is None or not _visible(config, job):
        raise click.ClickException(f"no repurpose job #{uid} that you may see")
    artifacts = store.artifacts(uid)
    if as_json:
        echo_json({**_job_dict(job), "artifacts": [_artifact_dict(a) for a in artifacts]})
        return
    echo(f"job #{job.uid}: {job.status.value}")
    echo(f"  source:  {display_url(job.source_url)} ({job.source_type})")
    echo(f"  owner:   {job.owner}")
    echo(f"  created: {job.created_at.isoformat()}")
    if job.message:
        echo(f"  message: {job.message}")
    for artifact in artifacts:
        echo(f"  {artifact.format}: {artifact.status.value}")
        if artifact.error:
            echo(f"    error: {artifact.error}")
        if artifact.file_path:
            echo(f"    file:  {artifact.file_path}")


@repurpose.command()
@click.option("--once", is_flag=True, help="Process the queued jobs, then exit.")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=64),
    default=1,
    show_default=True,
    help="Jobs processed at the same time, one thread each.",
)
@click.pass_context
def worker(ctx: click.Context, once: bool, concurrency: int) -> None:
    """Process queued jobs: fetch each source, then generate its formats."""
    from nrllm_core import make_plugin_manager
    from nrllm_core.store import default_data_dir
    from nrllm_repurpose._worker import Worker

    _, store = _open(ctx)
    root = ctx.find_root().obj or {}
    config_path = root.get("config_path")
    runner = Worker(
        store=store,
        pm=make_plugin_manager(),
        load_config=lambda: load_config(config_path),
        data_dir=default_data_dir(),
        environ=os.environ,
    )
    try:
        done = runner.run(once=once, concurrency=concurrency)
    except KeyboardInterrupt:
        return
    echo(f"processed {done} job(s)")

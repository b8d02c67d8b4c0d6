"""The whole flow: a model asks for a job, a person approves, the worker makes the formats."""

from __future__ import annotations

import json
from pathlib import Path

import click
from click.testing import CliRunner

import nrllm_repurpose
from nrllm_core._host import Host

FAQ = "## What causes tides?\n\nThe moon and the sun."
HANDOUT = "# Tides\n\n- Two high tides a day"
DIAGRAM = "mindmap\n  Tides\n    Moon\n    Sun"

CONFIG = """
[providers.chat]
kind = "scripted"
script = "chat.json"

[providers.writer]
kind = "scripted"
script = "writer.toml"
trust_zone = "externalEu"

[defaults]
provider = "chat"

[tools]
enabled = ["start_repurpose_job"]

[actor]
id = "editor"
permissions = ["repurpose"]

[repurpose]
provider = "writer"
allow_hosts = ["127.0.0.1"]
"""


def commands() -> click.Group:
    group = click.Group("nrllm")
    nrllm_repurpose.nrllm_register_commands(cli=group)
    return group


def arguments_for(page_server) -> dict[str, object]:
    url = f"{page_server.base}/tides?session=s3cret"
    return {"source_url": url, "artifacts": ["faq", "handout", "schaubild", "faq"]}


def write_host(home: Path, page_server, tmp_path: Path) -> tuple[Host, Path]:
    arguments = arguments_for(page_server)
    chat = {
        "turns": [
            {
                "tool_calls": [
                    {"id": "call_1", "name": "start_repurpose_job", "arguments": arguments}
                ]
            },
            {"content": "The job is queued."},
        ]
    }
    (tmp_path / "chat.json").write_text(json.dumps(chat), encoding="utf-8")
    (tmp_path / "writer.toml").write_text(
        "".join(f"[[turns]]\ncontent = {json.dumps(a)}\n" for a in (FAQ, HANDOUT, DIAGRAM)),
        encoding="utf-8",
    )
    config = tmp_path / "nrllm.toml"
    config.write_text(CONFIG, encoding="utf-8")
    host = Host.from_config(
        config, plugins=[nrllm_repurpose], load_entry_points=False, data_dir=home, environ={}
    )
    return host, config


# Host.approve resumes as ``Actor(id=state.initiator)`` (nrllm_core/_host.py), dropping the
# initiator's permissions, so the tool refuses the approved call. Strict: it fails once fixed.
def test_a_scripted_run_queues_a_job_that_the_worker_completes(home, page_server, tmp_path):
    host, config = write_host(home, page_server, tmp_path)
    suspended = host.run("Turn the tides article into a FAQ, a handout and a diagram.")
    assert suspended.status == "awaiting_approval"
    (pending,) = suspended.pending
    assert pending.name == "start_repurpose_job"
    assert pending.requires_approval is True
    assert pending.preview[0] == f"Source: {page_server.base}/tides (url)"
    runner = CliRunner()
    listed = runner.invoke(
        commands(), ["repurpose", "jobs", "--json"], obj={"config_path": str(config)}
    )
    assert json.loads(listed.output) == []

    done = host.approve(suspended.run_id, approver="lead", turn_digest=suspended.turn_digest)
    assert done.status == "completed"
    assert done.final_content == "The job is queued."
    work_and_show(home, page_server, config)


def test_a_gated_call_queues_a_job_that_the_worker_completes(home, page_server, tmp_path):
    host, config = write_host(home, page_server, tmp_path)
    wire = host.invoke("start_repurpose_job", arguments_for(page_server), provider="chat")
    assert wire.is_error is False
    assert wire.content.startswith(f"Started repurpose job #1 for {page_server.base}/tides (")
    work_and_show(home, page_server, config)


def work_and_show(home: Path, page_server, config: Path) -> None:
    runner = CliRunner()
    listed = runner.invoke(
        commands(), ["repurpose", "jobs", "--json"], obj={"config_path": str(config)}
    )
    (job,) = json.loads(listed.output)
    assert job["uid"] == 1
    assert job["status"] == "queued"
    assert job["source_url"] == f"{page_server.base}/tides"
    assert job["formats"] == ["faq", "handout", "schaubild"]
    assert job["owner"] == "editor"
    assert job["message"] is None
    assert set(job) == {"uid", "status", "source_url", "formats", "owner", "created_at", "message"}

    worked = runner.invoke(
        commands(),
        ["repurpose", "worker", "--once"],
        obj={"config_path": str(config)},
        env={"NRLLM_LOAD_PLUGINS": "repurpose"},
    )
    assert worked.exit_code == 0, worked.output
    assert worked.output.splitlines()[-1] == "processed 1 job(s)"
    assert page_server.hits == {"/tides?session=s3cret": 1}

    shown = runner.invoke(
        commands(), ["repurpose", "jobs", "show", "1", "--json"], obj={"config_path": str(config)}
    )
    report = json.loads(shown.output)
    assert report["status"] == "done"
    assert report["message"] is None
    assert report["artifacts"] == [
        {"format": "faq", "status": "done", "error": None},
        {"format": "handout", "status": "done", "error": None},
        {"format": "schaubild", "status": "done", "error": None},
    ]
    text = runner.invoke(
        commands(), ["repurpose", "jobs", "show", "1"], obj={"config_path": str(config)}
    )
    pdf = home / "repurpose" / "job-1" / "handout.pdf"
    assert f"file:  {pdf}" in text.output
    assert pdf.read_bytes().startswith(b"%PDF")
    assert "s3cret" not in text.output + shown.output + listed.output


def test_jobs_of_others_are_hidden_unless_the_actor_is_an_admin(home, tmp_path):
    from nrllm_repurpose._store import JobStore

    with JobStore.open(None, data_dir=home) as store:
        store.create_job(
            owner="someone", source_type="url", source_url="https://e.com/", formats=["faq"]
        )
    config = tmp_path / "nrllm.toml"
    config.write_text('[actor]\nid = "editor"\n', encoding="utf-8")
    runner = CliRunner()
    listed = runner.invoke(
        commands(), ["repurpose", "jobs", "--json"], obj={"config_path": str(config)}
    )
    assert json.loads(listed.output) == []
    hidden = runner.invoke(
        commands(), ["repurpose", "jobs", "show", "1"], obj={"config_path": str(config)}
    )
    assert hidden.exit_code == 1
    assert "no repurpose job #1 that you may see" in hidden.output
    config.write_text('[actor]\nid = "root"\nadmin = true\n', encoding="utf-8")
    listed = runner.invoke(
        commands(), ["repurpose", "jobs", "--json"], obj={"config_path": str(config)}
    )
    assert [job["owner"] for job in json.loads(listed.output)] == ["someone"]


def test_the_commands_refuse_a_jobs_database_other_than_the_audits(home, tmp_path):
    config = tmp_path / "nrllm.toml"
    config.write_text('[repurpose]\nstore_url = "sqlite:///other.db"\n', encoding="utf-8")
    result = CliRunner().invoke(commands(), ["repurpose", "jobs"], obj={"config_path": str(config)})
    assert result.exit_code == 2  # bad input, as for every nrllm command
    assert "repurpose.store_url: must be the same as [store] url" in result.output


def test_the_commands_refuse_a_configuration_core_refuses(home, tmp_path):
    config = tmp_path / "nrllm.toml"
    config.write_text('[providers.odd]\nkind = "weird"\n', encoding="utf-8")
    result = CliRunner().invoke(commands(), ["repurpose", "jobs"], obj={"config_path": str(config)})
    assert result.exit_code == 2
    assert 'providers.odd.kind: unknown kind "weird"' in result.output

"""A job's owner is compared with the actor as four-eyes compares people: one helper,
``Actor.same_as`` (NFKC, case folding, the characters that never tell people apart removed, the
UTS #39 confusable skeleton)."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

import nrllm_repurpose


def commands() -> click.Group:
    group = click.Group("nrllm")
    nrllm_repurpose.nrllm_register_commands(cli=group)
    return group


@pytest.mark.parametrize("actor", ["Editor", " editor", "EDITOR"])
def test_the_owner_sees_their_job_however_their_id_is_spelled(home, tmp_path, actor):
    from nrllm_repurpose._store import JobStore

    with JobStore.open(None, data_dir=home) as store:
        store.create_job(
            owner="editor", source_type="url", source_url="https://e.com/", formats=["faq"]
        )
    config = tmp_path / "nrllm.toml"
    config.write_text(f"[actor]\nid = {json.dumps(actor)}\n", encoding="utf-8")

    listed = CliRunner().invoke(
        commands(), ["repurpose", "jobs", "--json"], obj={"config_path": str(config)}
    )

    assert listed.exit_code == 0, listed.output
    assert [job["owner"] for job in json.loads(listed.output)] == ["editor"]


@pytest.mark.parametrize(
    "owner", ["editor\u200b", "\u0435ditor", "\u00adEDITOR", "edi\u2800tor\x7f"]
)
def test_an_owner_spelled_with_invisible_or_lookalike_letters_is_the_same_person(
    home, tmp_path, owner
):
    from nrllm_repurpose._store import JobStore

    with JobStore.open(None, data_dir=home) as store:
        store.create_job(
            owner=owner, source_type="url", source_url="https://e.com/", formats=["faq"]
        )
    config = tmp_path / "nrllm.toml"
    config.write_text('[actor]\nid = "editor"\n', encoding="utf-8")

    listed = CliRunner().invoke(
        commands(), ["repurpose", "jobs", "--json"], obj={"config_path": str(config)}
    )

    assert listed.exit_code == 0, listed.output
    assert [job["owner"] for job in json.loads(listed.output)] == [owner]

"""The tutorial, the README and the how-to guides say what is true, and what they show works."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TUTORIAL = DOCS / "tutorial" / "writing-a-plugin.md"
EXAMPLE = DOCS / "examples" / "nrllm-hello"
NRLLM = Path(sys.executable).with_name("nrllm")


def test_the_readme_and_the_tutorial_say_how_to_reach_the_command():
    for text in (
        (ROOT / "README.md").read_text(encoding="utf-8"),
        TUTORIAL.read_text(encoding="utf-8"),
    ):
        assert ". .venv/bin/activate" in text
        assert ".venv/bin/nrllm" in text


def test_the_tutorial_says_where_pytest_comes_from():
    text = TUTORIAL.read_text(encoding="utf-8")
    assert "`make test`" in text
    assert 'pip install -e ".[dev]"' in text


def test_the_how_to_guides_import_only_public_names():
    private = {
        path.name: re.findall(r"nrllm_core\._\w+", path.read_text(encoding="utf-8"))
        for path in sorted((DOCS / "how-to").glob("*.md"))
    }
    assert {name: found for name, found in private.items() if found} == {}


def test_the_json_audit_example_is_the_real_default_audit_payload(nrllm):
    text = TUTORIAL.read_text(encoding="utf-8")
    section = text[text.index("## 4. See exactly") : text.index("## 5.")]
    shown = json.loads(re.search(r"```json\n(.*?)```", section, re.DOTALL).group(1))
    nrllm.load(EXAMPLE / "nrllm_hello")

    call = nrllm.invoke("word_count", text="the cat saw the other cat")

    real = dict(call.audit.payload)
    varying = {"duration_ms", "tool_call_id"}
    shown_payload = shown["audit"]["payload"]
    assert set(shown_payload) == set(real)
    assert {k: v for k, v in shown_payload.items() if k not in varying} == {
        k: v for k, v in real.items() if k not in varying
    }
    assert shown["wire"]["content"] == call.content


def installed_copy(tmp_path: Path) -> dict[str, str]:
    """The example installed as its entry point (in a folder on PYTHONPATH), run from its own
    folder with its nrllm.toml and notebook.json."""
    site = tmp_path / "site"
    shutil.copytree(EXAMPLE / "nrllm_hello", site / "nrllm_hello")
    info = site / "nrllm_hello-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: nrllm-hello\nVersion: 0.1.0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text("[nrllm]\nhello = nrllm_hello\n", encoding="utf-8")
    for name in ("nrllm.toml", "notebook.json"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRLLM_")}
    env.update(NRLLM_HOME=str(tmp_path / "home"), NRLLM_LOAD_PLUGINS="hello", PYTHONPATH=str(site))
    return env


def test_the_tutorials_run_suspends_and_its_approval_writes_the_note(tmp_path):
    env = installed_copy(tmp_path)

    def nrllm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(NRLLM), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
        )

    ran = nrllm("run", "Note that I like oolong.")
    assert ran.returncode == 0, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[1:4] == [
        '  save_note (needs approval) {"title":"Tea","text":"Oolong, not too hot."}',
        "    | Write notes/tea.txt",
        "    | 4 words",
    ]
    assert not (tmp_path / "notes").exists()
    approve = next(line for line in lines if line.startswith("approve: "))
    approved = nrllm(*approve.removeprefix("approve: nrllm ").split())
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.splitlines()[-1] == "I saved your note as tea.txt."
    assert (tmp_path / "notes" / "tea.txt").read_text(encoding="utf-8") == "Oolong, not too hot.\n"
    bad = tmp_path / "bad.toml"
    bad.write_text("[hello]\nmax_note_words = 0\n", encoding="utf-8")
    checked = nrllm("--config", "bad.toml", "config", "check")
    assert checked.stderr.strip() == (
        "Error: invalid configuration: bad.toml: hello.max_note_words: expected an integer of "
        "1 or more"
    )


def test_the_demos_closing_hint_lists_the_demos_runs(tmp_path):
    from nrllm_core import Host
    from nrllm_core.demo import closing_hint

    home = tmp_path / "demo home"
    (home).mkdir()
    (home / "nrllm.toml").write_text('[actor]\nid = "demo"\n', encoding="utf-8")
    host = Host.from_config(home / "nrllm.toml", load_entry_points=False, data_dir=home)
    try:
        host.invoke("no_such_tool", {})
        [run] = host.runs()
    finally:
        host.store.close()

    hint = closing_hint(home)
    [command] = [line.strip() for line in hint.splitlines() if line.strip().endswith(" runs")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRLLM_")}
    env["HOME"] = str(tmp_path / "elsewhere")
    listed = subprocess.run(
        ["sh", "-c", command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith(run.run_id)
    assert not (tmp_path / "elsewhere").exists()

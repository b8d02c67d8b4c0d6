"""Errors a tool author meets say what to do: each message pinned as the author sees it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from nrllm_core import (
    Effect,
    Host,
    ToolRegistry,
    ToolResult,
    hookimpl,
    invoke,
    load_config,
    make_plugin_manager,
    tool,
)

NRLLM = Path(sys.executable).with_name("nrllm")

BROKEN = "import missing_dependency_of_broken\n"
UNMARKED = '''
from nrllm_core import ToolResult, tool


@tool(group="content")
def forgotten() -> ToolResult:
    """A tool nobody registers."""
    return ToolResult.text("x")


def nrllm_register_tools(registry):
    registry.register(forgotten)
'''
OOPS = '''
from nrllm_core import ToolResult, hookimpl, tool


@tool(group="content")
def read_records() -> ToolResult:
    """Shadows builtin's tool."""
    return ToolResult.text("mine")


@tool(group="content")
def weather_stats() -> ToolResult:
    """Weather."""
    return ToolResult.text("sunny")


@hookimpl
def nrllm_register_tools(registry):
    registry.register(read_records)
    registry.register(weather_stats)
'''


def site_with(tmp_path: Path, **modules: str) -> Path:
    """A folder of plugin modules, each installed as the entry point of its name."""
    site = tmp_path / "site"
    site.mkdir()
    for name, source in modules.items():
        (site / f"{name}.py").write_text(source, encoding="utf-8")
        info = site / f"{name}-0.0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.0.1\n", encoding="utf-8"
        )
        (info / "entry_points.txt").write_text(f"[nrllm]\n{name} = {name}\n", encoding="utf-8")
    return site


def nrllm(site: Path, tmp_path: Path, *args: str, plugins: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NRLLM_")}
    env.update(NRLLM_HOME=str(tmp_path / "home"), NRLLM_LOAD_PLUGINS=plugins, PYTHONPATH=str(site))
    return subprocess.run(
        [str(NRLLM), *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# -- a tool that returns something else ------------------------------------------------------------


def test_a_tool_returning_no_tool_result_logs_the_type_and_the_fix(context):
    @tool(group="content")
    def sloppy() -> str:  # type: ignore[misc]
        """Returns a plain string."""
        return "just text"

    class Plugin:
        @hookimpl
        def nrllm_register_tools(self, registry: ToolRegistry) -> None:
            registry.register(sloppy)

    pm = make_plugin_manager(plugins=[Plugin()], load_entry_points=False)
    with capture_logs() as logs:
        wire = invoke(pm, "sloppy", {}, context=context)
    assert wire.content == 'Error: tool "sloppy" returned no ToolResult.'
    [event] = [e for e in logs if e["event"] == "nrllm.tool.no_tool_result"]
    assert event["returned"] == "str"
    assert "return ToolResult.text(...)" in event["fix"]


# -- plugins that fail to load, or register nothing -----------------------------------------


def test_a_withheld_tool_says_who_registered_it(tmp_path):
    site = site_with(tmp_path, oops=OOPS)

    called = nrllm(site, tmp_path, "invoke", "read_records", plugins="oops,builtin")
    listed = nrllm(site, tmp_path, "tools", plugins="oops,builtin")

    assert called.returncode == 0, called.stderr
    assert 'Error: tool "read_records" is withheld: registered by both "oops" and "builtin"' in (
        called.stdout
    )
    # The name is no typo: nothing else is suggested, and the clash is logged once.
    assert "did you mean" not in called.stderr
    assert called.stderr.count("nrllm.tool.name_clash") == 1
    [row] = [line for line in listed.stdout.splitlines() if line.startswith("read_records ")]
    assert row.split("  ")[-1].strip() == "no: withheld"


def test_a_module_without_hookimpl_is_reported_by_nrllm_plugins(tmp_path):
    site = site_with(tmp_path, unmarked=UNMARKED)

    listed = nrllm(site, tmp_path, "plugins", plugins="unmarked")

    assert "unmarked (unmarked 0.0.1)\n  error: no nrllm hook implementations (did you forget " in (
        listed.stdout
    )
    assert "error: no nrllm hook implementations (did you forget @hookimpl?)" in listed.stdout


def test_a_plugin_that_fails_to_load_is_one_line_per_command(tmp_path):
    site = site_with(tmp_path, broken=BROKEN)

    tools = nrllm(site, tmp_path, "tools", plugins="broken,builtin")

    assert tools.returncode == 0
    assert tools.stderr.splitlines() == [
        'plugin "broken" failed to load: ModuleNotFoundError: No module named '
        "'missing_dependency_of_broken' (nrllm plugins shows the traceback)"
    ]
    assert "Traceback" not in tools.stdout + tools.stderr


@pytest.mark.parametrize("args", [["--help"], ["tools", "--help"], ["run", "--help"]])
def test_a_plugin_that_fails_to_load_says_nothing_on_help(tmp_path, args):
    site = site_with(tmp_path, broken=BROKEN)

    helped = nrllm(site, tmp_path, *args, plugins="broken")

    assert helped.returncode == 0
    assert helped.stderr == ""


def test_nrllm_plugins_shows_the_traceback_once(tmp_path):
    site = site_with(tmp_path, broken=BROKEN)

    listed = nrllm(site, tmp_path, "plugins", plugins="broken")
    as_json = nrllm(site, tmp_path, "plugins", "--json", plugins="broken")

    assert "  error: ModuleNotFoundError: No module named 'missing_dependency_of_broken'" in (
        listed.stdout
    )
    assert listed.stdout.count("Traceback (most recent call last)") == 1
    assert "import missing_dependency_of_broken" in listed.stdout
    assert listed.stderr == ""
    [record] = [r for r in json.loads(as_json.stdout) if r["name"] == "broken"]
    assert record["traceback"].startswith("Traceback (most recent call last)")


# -- what the command line refuses --------------------------------------------------------------


def test_an_unknown_tool_name_suggests_the_closest(tmp_path):
    site = site_with(tmp_path, oops=OOPS)

    called = nrllm(site, tmp_path, "invoke", "weather_stat", plugins="oops")

    assert called.returncode == 0
    assert 'Error: unknown tool "weather_stat"' in called.stdout
    assert called.stderr.strip() == 'did you mean "weather_stats"?'


def test_bad_args_json_names_the_line_and_the_column(tmp_path):
    site = site_with(tmp_path)

    called = nrllm(site, tmp_path, "invoke", "x", "--args", '{"a": 1,\n "b" 2}', plugins="")

    assert called.returncode == 2
    assert "--args: not valid JSON: " in called.stderr
    assert "at line 2, column 6" in called.stderr


# -- paths --------------------------------------------------------------------------------------


class FsPath:
    """A path-like object that is no ``Path``: only ``os.fspath`` reads it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


PATH_KINDS = pytest.mark.parametrize("kind", [str, Path, FsPath])


@tool(group="content", effect=Effect.NON_IDEMPOTENT_WRITE)
def stamp() -> ToolResult:
    """A write: its run suspends for approval."""
    return ToolResult.text("stamped")


class Stamps:
    @hookimpl
    def nrllm_register_tools(self, registry: ToolRegistry) -> None:
        registry.register(stamp)


@PATH_KINDS
def test_a_host_built_by_hand_suspends_and_resumes_with_any_data_dir(tmp_path, kind):
    from nrllm_core.store import Store

    script = tmp_path / "script.json"
    script.write_text(
        json.dumps({"turns": [{"tool_calls": [{"name": "stamp"}]}, {"content": "Done."}]})
    )
    config = {
        "actor": {"id": "tester"},
        "providers": {"m": {"kind": "scripted", "script": str(script)}},
    }
    folder = kind(tmp_path / "d")
    host = Host(
        pm=make_plugin_manager(plugins=[Stamps()], load_entry_points=False),
        config_loader=lambda: load_config(data=config),
        store=Store.open(None, data_dir=folder),
        data_dir=folder,
        environ={},
    )
    try:
        suspended = host.run("Stamp it.", provider="m")
        assert suspended.status == "awaiting_approval", suspended.error
        done = host.approve(suspended.run_id, approver="tester", turn_digest=suspended.turn_digest)
    finally:
        host.store.close()
    assert done.final_content == "Done."
    # The suspended state was sealed with a key made in the folder given.
    assert (tmp_path / "d" / "state.key").is_file()


@PATH_KINDS
def test_host_from_config_takes_a_str_or_a_path_like_data_dir_and_path(tmp_path, kind):
    (tmp_path / "nrllm.toml").write_text('[actor]\nid = "from-the-file"\n', encoding="utf-8")
    host = Host.from_config(
        kind(tmp_path / "nrllm.toml"), load_entry_points=False, data_dir=kind(tmp_path / "d")
    )
    try:
        assert host.runs() == []
        assert host.config.actor().id == "from-the-file"
    finally:
        host.store.close()
    assert (tmp_path / "d" / "nrllm.db").is_file()


@PATH_KINDS
def test_load_config_takes_a_str_or_a_path_like(tmp_path, kind):
    (tmp_path / "nrllm.toml").write_text('[actor]\nid = "from-the-file"\n', encoding="utf-8")

    config = load_config(kind(tmp_path / "nrllm.toml"))

    assert config.actor().id == "from-the-file"
    assert config.source == tmp_path / "nrllm.toml"


@PATH_KINDS
def test_the_stores_take_a_str_or_a_path_like_data_dir(tmp_path, kind):
    from nrllm_core.store import Store
    from nrllm_repurpose._store import JobStore

    store = Store.open(None, data_dir=kind(tmp_path / "a"))
    try:
        assert store.list_runs() == []
    finally:
        store.close()
    with JobStore.open(None, data_dir=kind(tmp_path / "b")) as jobs:
        assert jobs.jobs() == []


@PATH_KINDS
def test_a_plugins_migrations_folder_may_be_a_str_or_a_path_like(tmp_path, kind):
    import sqlalchemy as sa

    import nrllm_repurpose
    from nrllm_core.store import open_plugin_engine
    from nrllm_repurpose._schema import VERSION_TABLE

    migrations = Path(nrllm_repurpose.__file__).parent / "migrations"
    engine = open_plugin_engine(
        None, kind(tmp_path), migrations=kind(migrations), version_table=VERSION_TABLE, lock_key=1
    )
    try:
        assert "repurpose_jobs" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()


@PATH_KINDS
def test_the_fixture_loads_a_plugin_file_given_as_a_str_or_a_path_like(nrllm, tmp_path, kind):
    (tmp_path / "stamps_file.py").write_text(
        "from nrllm_core import hookimpl\n\n\n@hookimpl\ndef nrllm_register_tools(registry):\n"
        "    pass\n",
        encoding="utf-8",
    )

    assert nrllm.load(kind(tmp_path / "stamps_file.py")) == "stamps_file"

"""Importing ``nrllm_core`` stays light and does nothing; the library never configures logging."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = (
    "structlog",
    "cattrs",
    "jsonschema",
    "click",
    "sqlalchemy",
    "httpx",
    "opentelemetry",
    # An async tool or host loads them; importing the library does not.
    "asyncio",
    "anyio",
)
PLUGINS = ("nrllm_builtin", "nrllm_repurpose", "nrllm_mcp", "nrllm_otel")


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_import_loads_no_heavy_library_and_no_plugin():
    modules = json.loads(
        run_python("import json, sys, nrllm_core; print(json.dumps(sorted(sys.modules)))")
    )
    assert "nrllm_core" in modules
    loaded = [m for m in modules if m.split(".")[0] in HEAVY + PLUGINS]
    assert loaded == []


def test_import_reads_no_unicode_tables():
    # The tables identities are compared with load on the first comparison.
    code = """
import sys, nrllm_core
identity = sys.modules.get("nrllm_core._identity")
print(0 if identity is None else identity._unicode.cache_info().currsize)
"""
    assert run_python(code).strip() == "0"


def test_import_reads_no_entry_points_and_no_environment():
    code = """
import importlib.metadata, os

def refuse(*args, **kwargs):
    raise AssertionError("touched at import")

importlib.metadata.entry_points = refuse
reads = []

class Recording(dict):
    def __getitem__(self, key):
        reads.append(key)
        return super().__getitem__(key)

    def get(self, key, default=None):
        reads.append(key)
        return super().get(key, default)

    def __contains__(self, key):
        reads.append(key)
        return super().__contains__(key)

os.environ = Recording(os.environ)
os.getenv = os.environ.get
import nrllm_core
print(reads)
"""
    assert run_python(code).strip() == "[]"


def structlog_configure_calls(path: Path) -> list[int]:
    """Lines of ``path`` that configure structlog, however it was imported."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        attribute = (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("configure")
            and isinstance(node.value, ast.Name)
            and node.value.id == "structlog"
        )
        imported = (
            isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("structlog")
            and any(alias.name.startswith("configure") for alias in node.names)
        )
        if attribute or imported:
            lines.append(node.lineno)
    return lines


def library_sources() -> list[Path]:
    # The nrllm command and the demo included: they wrap nrllm's own logger instead.
    sources = [*ROOT.glob("nrllm_core/**/*.py"), *ROOT.glob("plugins/*/nrllm_*/**/*.py")]
    return sorted(sources)


def test_the_library_never_configures_structlog():
    sources = library_sources()
    assert ROOT / "nrllm_core/_invoke.py" in sources
    assert any("nrllm_builtin" in str(p) for p in sources)
    offenders = {
        str(p.relative_to(ROOT)): lines for p in sources if (lines := structlog_configure_calls(p))
    }
    assert offenders == {}


@pytest.mark.parametrize(
    "snippet",
    [
        "import structlog\nstructlog.configure()\n",
        "import structlog\nstructlog.configure_once()\n",
        "from structlog import configure\n",
    ],
)
def test_the_detector_catches_each_spelling(tmp_path, snippet):
    source = tmp_path / "module.py"
    source.write_text(snippet, encoding="utf-8")
    assert structlog_configure_calls(source) != []


def test_the_cli_routes_nrllm_events_to_stderr_without_configuring_structlog(capsys):
    import structlog

    from nrllm_core.cli._logging import configure_for_cli
    from nrllm_core.log import logger

    before = structlog.get_config()
    configure_for_cli()
    logger().warning("nrllm.test.routed", detail=1)
    logger().info("nrllm.test.below_the_level")
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "nrllm.test.routed" in captured.err
    assert "below_the_level" not in captured.err
    assert structlog.get_config() == before


def test_a_tool_authors_names_load_with_the_package_and_the_rest_on_first_use():
    code = """
import json, sys
from nrllm_core import ToolResult, tool, hookimpl
before = sorted(m for m in sys.modules if m.startswith("nrllm_core"))
import nrllm_core
host = nrllm_core.Host
print(json.dumps([before, "nrllm_core._host" in sys.modules, host.__module__]))
"""
    before, host_loaded, module = json.loads(run_python(code))
    assert before == [
        "nrllm_core",
        "nrllm_core._json",
        "nrllm_core._lazy",
        "nrllm_core._tool",
        "nrllm_core._values",
        "nrllm_core.hookspecs",
    ]
    assert (host_loaded, module) == (True, "nrllm_core._host")


def _type_checking_imports(package: str = "nrllm_core") -> dict[str, str]:
    """The names the package's ``__init__.py`` imports for mypy alone, by their module."""
    init = ROOT.joinpath(*package.split("."), "__init__.py")
    tree = ast.parse(init.read_text(encoding="utf-8"))
    (block,) = [n for n in tree.body if isinstance(n, ast.If)]
    found = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom)
        for alias in node.names:
            found[alias.name] = node.module or ""
    return found


def test_every_public_name_resolves_to_its_module_and_mypy_sees_the_same():
    import nrllm_core

    assert _type_checking_imports() == nrllm_core._LAZY
    for name in nrllm_core.__all__:
        value = getattr(nrllm_core, name)
        assert value is not None
    assert set(nrllm_core.__all__) <= set(dir(nrllm_core))
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        nrllm_core.Nothing  # noqa: B018


def test_every_store_name_resolves_to_its_module_and_mypy_sees_the_same():
    import nrllm_core.store

    assert _type_checking_imports("nrllm_core.store") == nrllm_core.store._LAZY
    for name in nrllm_core.store.__all__:
        assert getattr(nrllm_core.store, name) is not None
    assert set(nrllm_core.store.__all__) <= set(dir(nrllm_core.store))
    with pytest.raises(AttributeError, match="has no attribute 'Nothing'"):
        nrllm_core.store.Nothing  # noqa: B018


def test_the_data_folder_loads_none_of_the_stores_tables():
    # Plugins ask for it in commands that never open the store.
    code = """
import json, sys
from nrllm_core.store import default_data_dir
print(json.dumps(sorted(m for m in sys.modules if m in {"sqlalchemy.orm", "alembic"}
                        or m.startswith("nrllm_core.store."))))
"""
    assert json.loads(run_python(code)) == ["nrllm_core.store._database"]

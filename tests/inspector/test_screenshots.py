"""``make screenshots`` (scripts/screenshots.py) makes its three images, here into a temporary
folder: the docs' own images are left alone."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path
from types import ModuleType

import pytest

from .test_browser import chromium  # noqa: F401 - the fixture: skips locally, fails under CI

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "screenshots.py"
PNG = b"\x89PNG\r\n\x1a\n"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nrllm_screenshots", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG), f"{path.name} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def test_the_script_writes_three_pngs_of_the_demo_into_out(
    chromium,  # noqa: F811 - the fixture imported above
    tmp_path,
    monkeypatch,
    capsys,
):
    from nrllm_core import demo

    # The demo's `nrllm` commands (a repurpose worker, the MCP server's tools) each start a
    # Python process; they take most of its time and none of its runs is shown. The demo's
    # own runs, the suspended one and the browser are the script's, as `make screenshots` has
    # them.
    monkeypatch.setattr(demo, "_nrllm", lambda home, *args: "")
    docs_images = {p.name: p.stat().st_mtime_ns for p in (ROOT / "docs" / "images").glob("*")}
    out = tmp_path / "out"
    script = load_script()

    assert script.main(["--out", str(out), "--chromium", str(chromium)]) == 0

    written = capsys.readouterr().out
    for name in ("playground.png", "inbox.png", "runs.png"):
        path = out / name
        assert f"wrote {path}" in written
        width, height = png_size(path)
        assert width == 1200
        assert height >= 900
        assert 20_000 < path.stat().st_size < 5_000_000
    # The runs image is cut at the top of a long page.
    assert png_size(out / "runs.png")[1] <= script.RUNS_HEIGHT
    assert sorted(p.name for p in out.iterdir()) == ["inbox.png", "playground.png", "runs.png"]
    assert {
        p.name: p.stat().st_mtime_ns for p in (ROOT / "docs" / "images").glob("*")
    } == docs_images


def test_a_home_without_the_demo_is_refused(tmp_path):
    script = load_script()
    with pytest.raises(SystemExit, match="holds no demo configuration"):
        script.main(["--home", str(tmp_path), "--out", str(tmp_path / "out"), "--chromium", "/"])

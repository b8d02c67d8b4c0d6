"""How long the ``nrllm`` command takes to answer, wall clock, each run a fresh process.

Times ``nrllm --help``, ``nrllm runs`` on the demo's store and ``nrllm tools`` on the demo's
configuration without its MCP server, and prints each median beside the target of issue 35.
The demo (``python -m nrllm_core.demo``) runs once first, in a temporary ``NRLLM_HOME``.

    python benchmarks/bench_cli.py
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Final

REPEATS: Final = 7
# The console script the venv installs, as a user runs it; ``-m`` where there is none.
_NRLLM: Final = Path(sys.executable).with_name("nrllm")
COMMAND: Final = [str(_NRLLM)] if _NRLLM.exists() else [sys.executable, "-m", "nrllm_core"]


def seconds(args: list[str], env: dict[str, str], cwd: Path) -> float:
    """The median wall time of ``nrllm *args`` over ``REPEATS`` fresh processes, after one
    that is not counted (it writes the bytecode of sources that have changed)."""
    times = []
    for _ in range(REPEATS + 1):
        started = time.perf_counter()
        subprocess.run([*COMMAND, *args], env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
    return statistics.median(times[1:])


def without_mcp(config: str) -> str:
    """The configuration without its ``[mcp...]`` tables: no server to start."""
    return re.sub(r"^\[mcp[^\n]*\n(?:(?!\[)[^\n]*\n?)*", "", config, flags=re.MULTILINE)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        home = Path(folder)
        env = {**os.environ, "NRLLM_HOME": str(home)}
        env.pop("NRLLM_CONFIG", None)
        # An installed nrllm has its bytecode: without it, compiling the sources is timed too.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run(
            [sys.executable, "-m", "nrllm_core.demo"],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        demo = home / "nrllm.toml"
        no_mcp = home / "no-mcp.toml"
        no_mcp.write_text(without_mcp(demo.read_text(encoding="utf-8")), encoding="utf-8")
        cases = [
            ("nrllm --help", ["--help"], 0.3),
            ("nrllm runs (demo store)", ["--config", str(demo), "runs"], 0.5),
            ("nrllm tools (no MCP server)", ["--config", str(no_mcp), "tools"], 0.5),
        ]
        print(f"wall clock, median of {REPEATS} fresh processes")
        for name, args, target in cases:
            took = seconds(args, env, home)
            print(f"  {name:<30} {took:6.3f} s   target <= {target} s")


if __name__ == "__main__":
    main()

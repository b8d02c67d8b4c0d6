"""How often the redactor changes a line that holds no secret; run with ``make bench``.

Every line of the installed sources of a few well-known packages (their ``.py`` files) goes
through ``mask_secrets`` alone. Published library code holds no live credentials, so a line
that comes back changed is counted as a false alarm (a handful are documentation examples
that look like credentials on purpose, and masking them is right: the examples show which).
``--examples N`` prints up to N changed lines per package.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path
from typing import Final

from nrllm_core.redact import mask_secrets

PACKAGES: Final = ("click", "requests", "httpx", "sqlalchemy", "pydantic", "mcp")
TARGET_PERCENT: Final = 0.05


def package_root(name: str) -> Path | None:
    """The directory of the installed package ``name``, or ``None`` when it is not installed."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def changed_lines(root: Path) -> tuple[int, list[tuple[str, str, str]]]:
    """The number of lines under ``root`` and, for each line the redactor changes, its file,
    the line and what it became."""
    total = 0
    changed: list[tuple[str, str, str]] = []
    for path in sorted(root.rglob("*.py")):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            total += 1
            masked = mask_secrets(line)
            if masked != line:
                changed.append((str(path.relative_to(root.parent)), line.strip(), masked.strip()))
    return total, changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=3, help="changed lines shown per package")
    examples = parser.parse_args().examples
    all_lines = all_changed = 0
    started = time.perf_counter()
    for name in PACKAGES:
        root = package_root(name)
        if root is None:
            print(f"{name}: not installed, skipped")
            continue
        lines, changed = changed_lines(root)
        all_lines += lines
        all_changed += len(changed)
        print(
            f"{name}: {len(changed)} of {lines} lines changed ({100 * len(changed) / lines:.3f} %)"
        )
        for file, line, masked in changed[:examples]:
            print(f"    {file}: {line[:110]}\n      -> {masked[:110]}")
    if all_lines == 0:
        print("no package installed: nothing measured")
        return
    seconds = time.perf_counter() - started
    print(
        f"false alarms: {all_changed} of {all_lines} lines changed, "
        f"{100 * all_changed / all_lines:.3f} % (target {TARGET_PERCENT} %), "
        f"{all_lines / seconds:,.0f} lines/s"
    )


if __name__ == "__main__":
    main()

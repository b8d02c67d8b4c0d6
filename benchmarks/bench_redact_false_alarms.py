"""How often the redactor changes a line that holds no secret; run with ``make bench``.

Every line of the installed sources of a few well-known packages (their ``.py`` files) goes
through ``mask_secrets`` alone. Published library code holds no live credentials, but its
documentation shows what credentials and addresses look like, and masking those is the
redactor's job. So each changed line is sorted by a referee that is not the redactor:

- **credential-shaped**: detect-secrets' own detectors (its default plugins, line by line)
  report a secret on it (``postgresql://scott:tiger@localhost``, ``password="tiger"``);
- **address**: it changes only in its e-mail addresses (masked by design, like credentials);
- **false alarm**: anything else (``token: The token to revoke.``), which the target is for.

``--examples N`` prints up to N false alarms per package.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any, Final

from detect_secrets.settings import default_settings, get_plugins

from nrllm_core.redact import mask_secrets

PACKAGES: Final = ("click", "requests", "httpx", "sqlalchemy", "pydantic", "mcp")
TARGET_PERCENT: Final = 0.05
# An address as the redactor reads one, local part possibly empty (``LIKE '%@gmail.com'``).
ADDRESS: Final = re.compile(r"[A-Za-z0-9_.%+\-]*@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}")


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


def verdict(plugins: list[Any], file: str, line: str) -> str:
    """Why the redactor changed ``line``, as the referee sees it (see the module's doc)."""
    if any(p.analyze_line(filename=file, line=line, line_number=1) for p in plugins):
        return "credential-shaped"
    without = ADDRESS.sub("", line)
    if mask_secrets(without) == without:
        return "address"
    return "false alarm"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=3, help="false alarms shown per package")
    examples = parser.parse_args().examples
    all_lines = 0
    totals: Counter[str] = Counter()
    started = time.perf_counter()
    with default_settings():
        plugins = list(get_plugins())
        for name in PACKAGES:
            root = package_root(name)
            if root is None:
                print(f"{name}: not installed, skipped")
                continue
            lines, changed = changed_lines(root)
            all_lines += lines
            sorted_out = [(verdict(plugins, *c[:2]), c) for c in changed]
            counts = Counter(kind for kind, _ in sorted_out)
            totals.update(counts)
            alarm_rate = 100 * counts["false alarm"] / lines
            print(
                f"{name}: {len(changed)} of {lines} lines changed; "
                f"{counts['credential-shaped']} credential-shaped, {counts['address']} addresses, "
                f"{counts['false alarm']} false alarms ({alarm_rate:.3f} %)"
            )
            alarms = [c for kind, c in sorted_out if kind == "false alarm"]
            for file, line, masked in alarms[:examples]:
                print(f"    {file}: {line[:110]}\n      -> {masked[:110]}")
    if all_lines == 0:
        print("no package installed: nothing measured")
        return
    seconds = time.perf_counter() - started
    print(
        f"lines changed: {sum(totals.values())} of {all_lines} "
        f"({100 * sum(totals.values()) / all_lines:.3f} %): "
        f"{totals['credential-shaped']} credential-shaped, {totals['address']} addresses"
    )
    print(
        f"false alarms: {totals['false alarm']} of {all_lines} lines, "
        f"{100 * totals['false alarm'] / all_lines:.3f} % (target {TARGET_PERCENT} %), "
        f"{all_lines / seconds:,.0f} lines/s"
    )


if __name__ == "__main__":
    main()

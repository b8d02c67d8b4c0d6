"""Make the documentation's screenshots of the inspector from the demo's data.

    make screenshots
    python scripts/screenshots.py [--home DIR] [--out DIR] [--chromium PATH]

It runs the demo (``python -m nrllm_core.demo``) into a fresh temporary ``NRLLM_HOME``, or reuses
the home given with ``--home`` when it already holds the demo's configuration (``make demo``
leaves one in ``.demo``). The demo settles every run it starts, so one more run on its
``cloud_writer`` provider is left suspended for the approvals inbox. The inspector is served in
this process on a loopback port, and Debian's Chromium, driven by Playwright at a fixed
viewport, device scale, locale and time zone, writes three full-page images into ``--out``
(``docs/images`` by default):

- ``playground.png``: a prompt run on the demo's ``cloud`` provider, streamed in the
  playground, with its read tool's table artifact open;
- ``inbox.png``: the approvals inbox with the suspended run;
- ``runs.png``: the Runs view with the demo's steered run open (totals, audit chain verdict,
  waterfall, its first steps; the page's top 1700 pixels): its call to ``probe_url`` refused
  by the egress rule.

Relative times ("3 minutes ago") and the run ids differ from one making to the next; the rest
follows the code and the demo.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import secrets
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
IMAGES = ROOT / "docs" / "images"
CHROMIUM = Path("/usr/bin/chromium")
# As the browser tests launch it (tests/inspector/test_browser.py).
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    "--font-render-hinting=none",
]
WIDTH, HEIGHT = 1200, 900
DEVICE_SCALE = 1
NAMES = ("playground.png", "inbox.png", "runs.png")
# The demo's write prompt (its step 4): on ``cloud_writer`` it suspends before the write.
SUSPENDED_PROMPT = "Draft a page with our opening hours."
PLAYGROUND_PROMPT = "Which pages are published?"
TIMEOUT_MS = 30_000
RUNS_HEIGHT = 1700


def prepare(home: Path, *, run_demo: bool) -> Any:
    """The demo's host on ``home``, after the demo (with ``run_demo``), with a run awaiting
    approval. The demo's own output is kept quiet; its errors still go to stderr.

    ``NRLLM_HOME`` must be ``home`` meanwhile, as ``make demo`` sets it: the demo's commands and
    the built-in tools' sample database find their files there."""
    from nrllm_core import demo
    from nrllm_core._host import Host
    from nrllm_core._status import RunStatus

    if run_demo:
        with contextlib.redirect_stdout(io.StringIO()):
            status = demo.main(home)
        if status != 0:
            raise SystemExit(f"the demo failed (exit status {status})")
    config = home / "nrllm.toml"
    if not config.exists():
        raise SystemExit(f"{home} holds no demo configuration: run `make demo` or omit --home")
    host = Host.from_config(config, data_dir=home)
    if not host.store.list_runs(RunStatus.AWAITING_APPROVAL):
        outcome = host.run(SUSPENDED_PROMPT, provider="cloud_writer")
        if outcome.turn_digest is None:
            raise SystemExit(f"the run on cloud_writer did not suspend: {outcome.status}")
    return host


@contextlib.contextmanager
def serve(host: Any, token: str) -> Iterator[str]:
    """The inspector on a free loopback port in a thread of this process; its base address."""
    import uvicorn

    from nrllm_core.inspector import create_app

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(
        create_app(host, token=token), log_level="warning", access_log=False, lifespan="off"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise SystemExit("the inspector did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()


def settle(page: Any) -> None:
    """Nothing in flight, fonts loaded, no focus ring or caret: the page as a reader sees it."""
    page.wait_for_load_state("networkidle")
    page.evaluate("document.fonts.ready.then(() => document.activeElement?.blur())")
    page.mouse.move(0, 0)


def snap(page: Any, path: Path, *, max_height: int | None = None) -> None:
    """The whole page, or its top ``max_height`` pixels."""
    settle(page)
    clip = None
    if max_height is not None:
        height = min(max_height, page.evaluate("document.documentElement.scrollHeight"))
        clip = {"x": 0, "y": 0, "width": WIDTH, "height": height}
    page.screenshot(path=str(path), full_page=True, clip=clip, animations="disabled", caret="hide")


def shoot_playground(page: Any, path: Path) -> None:
    page.click("nav a[data-view=playground]")
    page.select_option("#provider", "cloud")
    page.fill("#prompt", PLAYGROUND_PROMPT)
    page.click("#run-button")
    page.wait_for_selector("[data-outcome=done]")
    step = page.locator(".step[data-kind=tool]").filter(has_text="read_records").first
    step.get_by_role("tab", name="Artifacts").click()
    step.locator(".artifacts table").wait_for()
    snap(page, path)


def shoot_inbox(page: Any, path: Path) -> None:
    page.click("nav a[data-view=approvals]")
    page.locator(".inbox .entry").first.wait_for()
    page.locator(".inbox .entry time").first.wait_for()
    snap(page, path)


def shoot_runs(page: Any, path: Path) -> None:
    # The demo's last run: a read, a call refused by the egress rule, an answer.
    page.goto(page.url.split("#")[0] + "#runs?provider=cloud_steered")
    page.wait_for_selector("#runs-list table")
    page.locator("#runs-list button.link").first.click()
    for part in ("svg.timeline", ".verdict", "table.totals", ".step"):
        page.locator(f"#run-detail {part}").first.wait_for()
    # The listing, the run's totals, verdict and waterfall, and its first steps: the rest of
    # its eleven steps look like those.
    snap(page, path, max_height=RUNS_HEIGHT)


def shoot(base: str, token: str, out: Path, chromium: Path) -> list[Path]:
    from playwright.sync_api import sync_playwright

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / name for name in NAMES]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=ARGS)
        try:
            context = browser.new_context(
                viewport={"width": WIDTH, "height": HEIGHT},
                device_scale_factor=DEVICE_SCALE,
                locale="en-GB",
                timezone_id="UTC",
                color_scheme="light",
                reduced_motion="reduce",
            )
            context.set_default_timeout(TIMEOUT_MS)
            page = context.new_page()
            problems: list[str] = []
            page.on("pageerror", lambda error: problems.append(f"pageerror: {error}"))
            page.on(
                "console",
                lambda m: problems.append(f"{m.type}: {m.text}") if m.type == "error" else None,
            )
            page.goto(f"{base}/?token={token}")
            page.wait_for_selector("#provider option[value=cloud]", state="attached")
            shoot_playground(page, paths[0])
            shoot_inbox(page, paths[1])
            shoot_runs(page, paths[2])
            context.close()
        finally:
            browser.close()
    if problems:
        raise SystemExit("the page reported problems:\n" + "\n".join(problems))
    return paths


@contextlib.contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--home",
        type=Path,
        help="reuse this NRLLM_HOME (e.g. .demo after `make demo`) instead of a fresh demo",
    )
    parser.add_argument("--out", type=Path, default=IMAGES, help="where the PNGs go")
    parser.add_argument("--chromium", type=Path, default=CHROMIUM, help="the browser to drive")
    args = parser.parse_args(argv)
    if not args.chromium.exists():
        message = f"no browser at {args.chromium}: install the Debian package chromium"
        print(message, file=sys.stderr)
        return 2
    token = secrets.token_urlsafe(16)
    with contextlib.ExitStack() as stack:
        if args.home is None:
            home = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="nrllm-shots-")))
            run_demo = True
        else:
            home, run_demo = args.home.resolve(), False
        stack.enter_context(_environ("NRLLM_HOME", str(home)))
        host = prepare(home, run_demo=run_demo)
        stack.callback(host.store.close)
        base = stack.enter_context(serve(host, token))
        for path in shoot(base, token, args.out, args.chromium):
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    from nrllm_core.cli._logging import configure_for_cli

    # As the demo and the CLI: warnings and errors only (not the gate's every decision).
    configure_for_cli()
    sys.exit(main())

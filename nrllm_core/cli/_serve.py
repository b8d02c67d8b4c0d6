"""``nrllm serve``: the inspector on a local port, behind a token printed at start."""

from __future__ import annotations

import ipaddress
import secrets
import signal
import socket
from collections.abc import Callable
from types import FrameType

import click

from nrllm_core.cli import _main
from nrllm_core.cli._common import BadInput, open_host
from nrllm_core.cli._otel import otel_console_option, start_otel_console
from nrllm_core.cli._terminal import echo


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        # A name may resolve anywhere; only a loopback address literal counts as local.
        return False


def _shut_down_on_sigterm(shutdown: Callable[[], None]) -> None:
    """Call ``shutdown`` before a SIGTERM ends the server.

    uvicorn stops gracefully on SIGTERM, puts back the handler it found (this one) and raises
    the signal again; the handler calls ``shutdown``, then lets the signal end the process as
    it would have (a supervisor still sees a process ended by SIGTERM).
    """

    def handler(signum: int, frame: FrameType | None) -> None:
        shutdown()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, handler)


@_main.cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True)
@click.option("--allow-remote", is_flag=True, help="Allow an address other machines can reach.")
@otel_console_option
@click.pass_context
def serve(ctx: click.Context, host: str, port: int, allow_remote: bool, otel_console: bool) -> None:
    """Serve the inspector: playground, live run stream, runs and the approvals inbox."""
    if not _loopback(host) and not allow_remote:
        raise BadInput(
            f"--host {host} is reachable from other machines; pass --allow-remote to serve there"
        )
    import uvicorn

    from nrllm_core.inspector import PageQuestions, create_app

    # A tool's question to a person in a live run is asked on the page that runs it.
    questions = PageQuestions()
    nrllm = open_host(ctx, on_elicitation=questions)
    if otel_console:
        _shut_down_on_sigterm(start_otel_console(nrllm.pm.has_plugin("otel")))
    app = create_app(nrllm, token=(token := secrets.token_urlsafe(32)), questions=questions)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
    except OSError as exc:
        listener.close()
        raise BadInput(f"cannot listen on {host}:{port} ({exc.strerror})") from None
    # Listening before the address is printed: a client that reads it at once is not refused
    # while uvicorn starts.
    listener.listen(2048)
    bound = listener.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    echo("nrllm inspector: open this address (it holds the access token):")
    echo(f"http://{shown}:{bound}/?token={token}")
    # No access log: the first request's address carries the token.
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[listener])

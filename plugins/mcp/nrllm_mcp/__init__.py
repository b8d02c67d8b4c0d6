"""MCP servers' tools under nrllm's governance, and nrllm's governed tools for MCP clients.

Importing this package loads neither the MCP SDK nor SQLAlchemy nor click, reads no
configuration and starts no thread: the servers are read and connected when the tool catalog
is built, and the commands load when they are used.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from nrllm_core import ToolRegistry, hookimpl

if TYPE_CHECKING:
    import click

__all__: list[str] = []


@hookimpl
def nrllm_register_tools(registry: ToolRegistry) -> None:
    """Register the pinned tools of every ``[mcp.servers.NAME]``; withhold the others."""
    from nrllm_mcp._client import register_servers
    from nrllm_mcp._config import current_config

    register_servers(registry, current_config(), os.environ)


@hookimpl
def nrllm_register_commands(cli: click.Group) -> None:
    """Add ``nrllm mcp``."""
    from nrllm_mcp._cli import mcp

    cli.add_command(mcp)

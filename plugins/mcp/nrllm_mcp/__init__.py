"""MCP servers' tools under nrllm's governance, and nrllm's governed tools for MCP clients.

Importing this package loads neither the MCP SDK nor SQLAlchemy nor click, reads no
configuration and starts no thread: the servers are read and connected when the tool catalog
is built, from the host's own ``[mcp]`` section, and the commands load when they are used.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from nrllm_core import ToolRegistry, hookimpl

if TYPE_CHECKING:
    import click

    from nrllm_core import StoreConfig

__all__: list[str] = []


@hookimpl
def nrllm_register_tools(
    registry: ToolRegistry, settings: Mapping[str, Any], store: StoreConfig
) -> None:
    """Register the pinned tools of every ``[mcp.servers.NAME]``; withhold the others."""
    from nrllm_mcp._client import register_servers
    from nrllm_mcp._settings import load_settings

    register_servers(registry, load_settings(settings), store.url, os.environ)


@hookimpl
def nrllm_register_commands(cli: click.Group) -> None:
    """Add ``nrllm mcp``."""
    from nrllm_mcp._cli import mcp

    cli.add_command(mcp)

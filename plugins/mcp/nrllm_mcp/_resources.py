"""A server's resources and prompts: listed for a person (``nrllm mcp resources``,
``nrllm mcp prompts``), and read by a model through one governed tool,
``PREFIX__read_resource``, when the server's ``resources = true``.

Everything a server lists is hostile: what a person is shown is cleaned and bounded, and the
tool reads only a URI the server listed.
"""

from __future__ import annotations

from typing import Any, Final

from nrllm_core import DataClass, Effect, Integrity, Tool, ToolContext, ToolResult
from nrllm_core.log import logger
from nrllm_mcp._connection import Connection, ConnectionFailed
from nrllm_mcp._definition import clean_description, clean_text

__all__ = ["ReadResource", "shown_prompts", "shown_resources"]

# A URI, a name or a MIME type as shown: longer than any real one, short enough to read.
_SHORT_MAX_BYTES: Final = 512
_URI_MAX_BYTES: Final = 2048


def shown_resources(listed: list[Any]) -> list[dict[str, str | None]]:
    """The listed resources as a person is shown them, every text cleaned and bounded."""
    return [
        {
            "uri": clean_text(str(r.uri), _URI_MAX_BYTES),
            "name": clean_text(r.name, _SHORT_MAX_BYTES),
            "mimeType": None if r.mime_type is None else clean_text(r.mime_type, _SHORT_MAX_BYTES),
            "description": None if r.description is None else clean_description(r.description),
        }
        for r in listed
    ]


def shown_prompts(listed: list[Any]) -> list[dict[str, Any]]:
    """The listed prompts as a person is shown them, every text cleaned and bounded."""
    return [
        {
            "name": clean_text(p.name, _SHORT_MAX_BYTES),
            "description": None if p.description is None else clean_description(p.description),
            "arguments": [
                {
                    "name": clean_text(a.name, _SHORT_MAX_BYTES),
                    "description": None
                    if a.description is None
                    else clean_description(a.description),
                    "required": bool(a.required),
                }
                for a in p.arguments or ()
            ],
        }
        for p in listed
    ]


class ReadResource(Tool):
    """``PREFIX__read_resource``: nrllm's own tool, not the server's, so it has no pin; it
    exists only for a server that started and whose ``resources = true``."""

    def __init__(self, connection: Connection) -> None:
        server = connection.settings
        self.name = f"{server.tool_prefix}read_resource"[:64]
        self.description = (
            f"Read a resource of the MCP server {server.name} by its URI; only a URI the "
            "server lists can be read."
        )
        self.group = server.group
        self.parameters = {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "The resource's URI."}},
            "required": ["uri"],
            "additionalProperties": False,
        }
        self.data_class: DataClass | None = server.data_class
        self.integrity: Integrity | None = server.integrity
        self.effect = Effect.READ_ONLY
        self._connection = connection

    def execute(self, arguments: dict[str, Any], context: ToolContext) -> ToolResult:
        from nrllm_mcp._results import resource_artifact

        server = self._connection.settings.name
        uri = arguments["uri"]
        try:
            self._connection.open_for_request()
            listed = {str(r.uri) for r in self._connection.list_resources()}
            if uri not in listed:
                logger().warning("nrllm.mcp.resource_unlisted", server=server)
                return ToolResult.error(
                    f'Error: MCP server "{server}" lists no such resource; read only a URI '
                    "it lists."
                )
            result = self._connection.read_resource(uri)
        except ConnectionFailed:
            return ToolResult.error(f'Error: MCP server "{server}" cannot be reached.')
        except TimeoutError:
            self._connection.close(wait=False)
            logger().warning("nrllm.mcp.resource_timeout", server=server)
            return ToolResult.error(f'Error: MCP server "{server}" did not answer in time.')
        except Exception:
            # The text of what failed is the server's: logged, never shown to the model.
            logger().warning("nrllm.mcp.resource_failed", server=server, exc_info=True)
            return ToolResult.error(f'Error: MCP server "{server}" could not read the resource.')
        texts = []
        artifacts = []
        for contents in result.contents:
            text = getattr(contents, "text", None)
            if isinstance(text, str):
                texts.append(text)
            else:
                # A blob is for the run only: the model never reads bytes it cannot check.
                artifacts.append(resource_artifact(contents, self.name))
        return ToolResult.text("\n".join(texts), *artifacts)

"""An MCP server (Model Context Protocol) over one agent's memory tools; the ``mcp`` extra.

    engramdb --db memory.db --agent researcher mcp                     # stdio
    engramdb --db memory.db --agent researcher mcp --transport http    # streamable HTTP

or from Python: ``serve(engine.agent("researcher"), transport="stdio")``. The agent, its tenant,
cap and floor are fixed when the server is made; see ``docs/mcp.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engramdb.errors import MissingExtra

if TYPE_CHECKING:
    from engramdb.agent import Agent
    from engramdb.tools.toolbox import ToolLimits


def _require() -> None:
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise MissingExtra("the MCP server", "mcp") from None


def build_server(agent: Agent, *, limits: ToolLimits | None = None) -> Any:
    """The MCP `Server` (the SDK's low-level server) serving `agent`'s tools and resources."""
    _require()
    from engramdb.mcp.server import build

    return build(agent, limits=limits)


def serve(
    agent: Agent,
    *,
    transport: str = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    limits: ToolLimits | None = None,
) -> None:
    """Serve `agent`'s memory tools until the client goes away (stdio) or the process is stopped (HTTP)."""
    _require()
    from engramdb.mcp.server import run

    run(agent, transport=transport, host=host, port=port, limits=limits)


__all__ = ["build_server", "serve"]

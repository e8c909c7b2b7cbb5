"""An MCP server (Model Context Protocol) over one agent's memory tools; the ``mcp`` extra.

    engramdb --db memory.db --agent researcher mcp                     # stdio
    engramdb --db memory.db --agent researcher mcp --transport http    # streamable HTTP

or from Python: ``serve(engine.agent("researcher"), transport="stdio")``. Over stdio the agent, its
tenant, cap and floor are fixed when the server is made. Over HTTP every request needs a bearer
token (`StaticToken`, or `JwtTokens` whose claims name the agent) unless the server listens on
loopback only; Host and Origin are checked on every request. See ``docs/mcp.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engramdb.errors import MissingExtra

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from engramdb.agent import Agent
    from engramdb.mcp.auth import Identity, Verifier
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
    verifier: Verifier | None = None,
    agents: Callable[[Identity], Agent] | None = None,
    allowed_hosts: Sequence[str] = (),
    allowed_origins: Sequence[str] = (),
) -> None:
    """Serve `agent`'s memory tools until the client goes away (stdio) or the process is stopped (HTTP).

    HTTP: `verifier` checks each request's bearer token (required to listen beyond loopback);
    with `JwtTokens`, `agents` makes the handle of the identity a token names (e.g.
    ``lambda who: engine.agent(who.agent_id, tenant=who.tenant, cap=who.cap)``).
    `allowed_hosts` / `allowed_origins` add Host names and browser origins to the loopback ones."""
    _require()
    from engramdb.mcp.server import run

    run(
        agent, transport=transport, host=host, port=port, limits=limits, verifier=verifier, agents=agents,
        allowed_hosts=allowed_hosts, allowed_origins=allowed_origins,
    )  # fmt: skip


__all__ = ["build_server", "serve"]

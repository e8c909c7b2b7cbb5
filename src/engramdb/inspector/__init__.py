"""A local, read-only web inspector over one agent's memory; the ``inspect`` extra.

    engramdb --db memory.db --agent researcher inspect            # prints http://127.0.0.1:PORT/?token=…

or from Python::

    from engramdb.inspector import InspectorServer
    server = InspectorServer(engine.agent("researcher", cap=Confidentiality.INTERNAL))
    print(server.start())        # in a background thread; server.stop() ends it

Every page reads through that one `Agent` handle, so it shows exactly what that agent may see
(its tenant, shared and own memories, its cap) and changes nothing: no remember, update, forget
or link, no access logged, no reinforcement (the recall playground is `Agent.explain`'s dry run).
It listens on 127.0.0.1 only, and every request needs the random token of the printed address.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engramdb.errors import MissingExtra

if TYPE_CHECKING:
    from engramdb.agent import Agent
    from engramdb.inspector.app import Inspector
    from engramdb.inspector.server import InspectorServer as InspectorServer


def _require() -> None:
    try:
        import jinja2  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise MissingExtra("the web inspector", "inspect") from None


def create_app(agent: Agent, *, token: str | None = None) -> Inspector:
    """The inspector for `agent` (its ASGI app is ``.app``, its access token ``.token``; a
    fresh random one unless given)."""
    _require()
    from engramdb.inspector.app import Inspector

    return Inspector(agent, token=token)


def __getattr__(name: str) -> object:
    # `InspectorServer` needs uvicorn: import it on first use, so that importing this package
    # without the extra still works and only using it says which extra is missing.
    if name == "InspectorServer":
        _require()
        from engramdb.inspector.server import InspectorServer

        return InspectorServer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["InspectorServer", "create_app"]

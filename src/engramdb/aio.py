"""The one way engramdb's handles are awaitable: each async method runs its sync twin in a worker
thread (`asyncio.to_thread`).

The engine is synchronous and keeps a connection per thread, so a worker thread is all an async
caller needs: the event loop is never blocked and there is one copy of the logic.
`engramdb.AsyncAgent` (``agent.aio``) forwards each `Agent` method with `forwarded`;
`NamespacedMemory` and `MemoryToolbox` derive their ``a…`` methods with `in_thread`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, Concatenate, ParamSpec, TypeVar

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S")


def in_thread(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], Coroutine[Any, Any, _R]]:
    """The async mirror of a sync method: the same call, run in a worker thread.

    The method is looked up on the instance at call time, so a subclass that overrides the sync
    method gets a matching async one for free. Use it in a class body::

        class MyStore:
            def store(self, scope: TenantScope, entry: MemoryEntry) -> Memory: ...
            astore = in_thread(store)
    """
    name = method.__name__

    async def mirror(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        bound: Callable[_P, _R] = getattr(self, name)
        return await asyncio.to_thread(bound, *args, **kwargs)

    mirror.__name__ = mirror.__qualname__ = f"a{name}"
    mirror.__doc__ = f"Awaitable `{name}`: runs it in a worker thread (`asyncio.to_thread`)."
    return mirror


def forwarded(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[Any, _P], Coroutine[Any, Any, _R]]:
    """The awaitable form of `method` on a wrapper class whose ``sync`` attribute is the object
    that has it: the same name, the same arguments, run in a worker thread. Looked up on
    ``self.sync`` at call time. Use it in the wrapper's class body (``recall = forwarded(Agent.recall)``)."""
    name = method.__name__

    async def mirror(self: Any, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        bound: Callable[_P, _R] = getattr(self.sync, name)
        return await asyncio.to_thread(bound, *args, **kwargs)

    mirror.__name__ = name
    mirror.__qualname__ = f"forwarded.{name}"
    mirror.__doc__ = f"Awaitable `{method.__qualname__}`, run in a worker thread; its arguments and result."
    mirror.__wrapped__ = method  # type: ignore[attr-defined]  # (inspect.signature shows the method's)
    return mirror


__all__ = ["forwarded", "in_thread"]

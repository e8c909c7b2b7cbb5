"""Async handles: `AsyncAgent` (``agent.aio``) forwards every Agent method one way; NamespacedMemory
and MemoryToolbox get their a… methods one way."""

from __future__ import annotations

import asyncio
import inspect
import threading

import pytest

from engramdb import AsyncAgent, DynamicMemoryEngine, MemoryToolbox, NamespacedMemory, ValidationError
from engramdb.agent import Agent
from engramdb.aio import forwarded, in_thread

#: public names of Agent that deliberately have no awaitable form (fixed state, or the form itself)
_NO_TWIN = {"cap", "floor", "shared", "private", "aio"}


def test_every_agent_method_is_awaitable_on_the_async_handle() -> None:
    public = {n for n, v in vars(Agent).items() if not n.startswith("_") and callable(v)}
    for name in sorted(public - _NO_TWIN):
        twin = getattr(AsyncAgent, name, None)
        assert twin is not None, f"Agent.{name} has no awaitable form on AsyncAgent"
        assert inspect.iscoroutinefunction(twin), name
        assert twin.__code__ is forwarded(getattr(Agent, name)).__code__, f"AsyncAgent.{name} is not forwarded"
        assert inspect.signature(twin) == inspect.signature(getattr(Agent, name)), name
    extra = {n for n in vars(AsyncAgent) if not n.startswith("_")} - public - {"sync", "agent_id", "tenant"}
    assert not extra, f"AsyncAgent methods with no Agent method: {extra}"
    assert NamespacedMemory.arecall.__code__ is MemoryToolbox.acall.__code__  # one mechanism for all
    assert not [n for n in vars(Agent) if n.startswith("a") and n not in {"accesses", "agent_id", "aio"}]


def test_the_async_handle_is_fixed_and_wraps_only_an_agent(eng: DynamicMemoryEngine) -> None:
    me = eng.agent("alice", tenant="acme").aio
    assert isinstance(me.sync, Agent) and (me.agent_id, me.tenant) == ("alice", "acme")
    assert AsyncAgent(me.sync).sync is me.sync
    with pytest.raises(AttributeError, match="fixed"):
        me._sync = eng.agent("bob")
    with pytest.raises(ValidationError, match="wraps an Agent"):
        AsyncAgent("alice")  # type: ignore[arg-type]


def test_async_calls_run_off_the_loop_and_agree_with_sync(eng: DynamicMemoryEngine) -> None:
    me = eng.agent("alice").aio
    box = MemoryToolbox(me.sync)

    async def main() -> None:
        m = await me.remember("The release train leaves on Thursdays", importance=7)
        many = await me.remember_many([{"content": f"note {i} about trains"} for i in range(5)], dedup=False)
        assert len(many) == 5
        hits, text = await asyncio.gather(
            me.recall("release train", k=3), box.acall("recall", {"query": "release train"})
        )
        assert hits[0].memory.id == m.id and m.id in text
        why = await me.explain(hits.recall_id)
        assert why.hits[0].memory_id == m.id
        assert (await me.get(m.id, touch=False)).content == m.content
        todo = await me.remember("Renew the certificate", type="todo")
        assert [t.id for t in await me.todos()] == [todo.id]
        await me.complete(todo.id)
        stone = await me.forget(m.id)
        assert stone.memory_id == m.id
        report = await me.reflect(steps=["rescore"])
        assert report.steps[0].step == "rescore"

        class Probe:
            def where(self) -> int:
                return threading.get_ident()

            awhere = in_thread(where)

        assert await Probe().awhere() != threading.get_ident()  # the work runs in a worker thread
        # The loop stays responsive while a sync twin runs in its worker thread.
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            for _ in range(5):
                ticks += 1
                await asyncio.sleep(0)

        await asyncio.gather(me.remember_many([{"content": f"bulk {i}"} for i in range(200)], dedup=False), tick())
        assert ticks == 5

    asyncio.run(main())

"""Async handles: Agent, NamespacedMemory and MemoryToolbox get their a… methods one way."""

from __future__ import annotations

import asyncio
import inspect
import threading

from engramdb import DynamicMemoryEngine, MemoryToolbox, NamespacedMemory
from engramdb.agent import Agent
from engramdb.aio import in_thread

#: sync methods of Agent that deliberately have no async twin (cheap reads of fixed state)
_NO_TWIN = {"agent_id", "tenant", "cap", "floor", "principal", "runtime", "shared", "private"}


def test_every_agent_method_has_an_async_twin() -> None:
    public = {n for n, v in vars(Agent).items() if not n.startswith("_") and callable(v) and not n.startswith("a")}
    public |= {"accesses"}  # starts with "a" but is a sync method
    for name in sorted(public - _NO_TWIN):
        twin = getattr(Agent, f"a{name}", None)
        assert twin is not None, f"Agent.{name} has no async twin a{name}"
        assert inspect.iscoroutinefunction(twin), name
        assert twin.__code__ is in_thread(getattr(Agent, name)).__code__, f"a{name} is not made by in_thread"
    assert NamespacedMemory.arecall.__code__ is Agent.arecall.__code__  # one mechanism for all
    assert MemoryToolbox.acall.__code__ is Agent.arecall.__code__


def test_async_calls_run_off_the_loop_and_agree_with_sync(eng: DynamicMemoryEngine) -> None:
    me = eng.agent("alice")
    box = MemoryToolbox(me)

    async def main() -> None:
        m = await me.aremember("The release train leaves on Thursdays", importance=7)
        many = await me.aremember_many([{"content": f"note {i} about trains"} for i in range(5)], dedup=False)
        assert len(many) == 5
        hits, text = await asyncio.gather(
            me.arecall("release train", k=3), box.acall("recall", {"query": "release train"})
        )
        assert hits[0].memory.id == m.id and m.id in text
        why = await me.aexplain(hits.recall_id)
        assert why.hits[0].memory_id == m.id
        assert (await me.aget(m.id, touch=False)).content == m.content
        todo = await me.aremember("Renew the certificate", type="todo")
        assert [t.id for t in await me.atodos()] == [todo.id]
        await me.acomplete(todo.id)
        stone = await me.aforget(m.id)
        assert stone.memory_id == m.id
        report = await me.areflect(steps=["rescore"])
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

        await asyncio.gather(me.aremember_many([{"content": f"bulk {i}"} for i in range(200)], dedup=False), tick())
        assert ticks == 5

    asyncio.run(main())

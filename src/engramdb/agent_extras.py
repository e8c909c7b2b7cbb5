"""The agent handle's delegating methods: reflection, prospective memory and live references.

They live apart from `engramdb.agent` to keep that module within the house size; each one hands
the agent to the module that does the work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from engramdb.memories.model import Memory, TodoStatus
from engramdb.retrieval.results import Recall

if TYPE_CHECKING:
    from engramdb.agent import Agent


def _agent(handle: AgentExtras) -> Agent:
    return cast("Agent", handle)


class AgentExtras:
    """Mixed into `engramdb.agent.Agent`; not used on its own."""

    def reflect(
        self,
        *,
        config: Any = None,
        reconciler: Any = None,
        reasoner: Any = None,
        steps: Sequence[str] | None = None,
        should_stop: Any = None,
    ) -> Any:
        """Consolidate in the stated order — merge near-duplicates, reconcile (with a `Reconciler`),
        link neighbours, rescore importance, abstract episodes (with a `Reasoner`), prune — and
        return a `ReflectionReport`. Each item commits on its own; `should_stop` (a callable or a
        `threading.Event`) interrupts between items. One run per tenant at a time
        (`TransactionError`). See `engramdb.memories.reflection`."""
        from engramdb.memories.reflection import reflect

        return reflect(
            _agent(self), config=config, reconciler=reconciler, reasoner=reasoner, steps=steps, should_stop=should_stop
        )

    # -- prospective memory and live references -----------------------------------------------

    def intend(self, content: str, **trigger: Any) -> Memory:
        """Store an intent with one trigger: ``when=`` (a time; ``every=`` seconds to repeat),
        ``on_event=`` (an event name) or ``cue=`` (a phrase); ``repeat=True`` keeps it firing.
        Also takes ``importance``, ``title``, ``tags``, ``refs``. See `engramdb.memories.prospective.intend`."""
        from engramdb.memories import prospective

        return prospective.intend(_agent(self), content, **trigger)

    def due(
        self,
        *,
        now: float | None = None,
        event: str | None = None,
        text: str | None = None,
        trace_ref: str | None = None,
    ) -> list[Memory]:
        """Fire and return this agent's intents whose trigger matches (time ≤ now, the event, or the
        cue phrase in `text`); one-shot intents fire once, and every firing is logged."""
        from engramdb.memories import prospective

        return prospective.due(_agent(self), now=now, event=event, text=text, trace_ref=trace_ref)

    def todos(self, status: TodoStatus | str | None = TodoStatus.OPEN) -> list[Memory]:
        """Todos this agent can see with `status` (None: all), most important first."""
        from engramdb.memories import prospective

        return prospective.todos(_agent(self), status)

    def complete(self, memory_id: str) -> Memory:
        """Move a todo to done."""
        from engramdb.memories import prospective

        return prospective.complete(_agent(self), memory_id)

    def drop(self, memory_id: str) -> Memory:
        """Move a todo to dropped."""
        from engramdb.memories import prospective

        return prospective.drop(_agent(self), memory_id)

    def reopen(self, memory_id: str) -> Memory:
        """Move a done or dropped todo back to open."""
        from engramdb.memories import prospective

        return prospective.reopen(_agent(self), memory_id)

    def ride_along(self, recall_or_query: Recall | str, **options: Any) -> Any:
        """Due intents and open todos to inject beside a recall, logged on the ``injected`` channel
        (never reinforcing). Returns an `Injection` with ``as_evidence()``."""
        from engramdb.memories import prospective

        return prospective.ride_along(_agent(self), recall_or_query, **options)

    def resolve_refs(self, recall: Recall, *, max_chars: int = 2000) -> Recall:
        """The recall with each hit's references resolved live by `engine.resolvers` (or its
        preview, marked stale, when a resolver is missing or fails), as notes on the hits."""
        from engramdb.memories.references import resolve_refs

        me = _agent(self)
        return resolve_refs(me, recall, me.engine.resolvers, max_chars=max_chars)

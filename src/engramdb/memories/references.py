"""References resolved live: a memory points at something outside it, and recall reads it now.

A `MemoryRef(kind, key, preview, captured_at)` names an external artifact (a file, a ticket, a
URL) and keeps a preview captured when the memory was written. At recall time `resolve_refs`
asks the resolver registered for each ref's kind for the live text, so the agent answers from the
current state rather than from a stale copy. When no resolver is registered for the kind, or the
resolver fails (raises, returns something other than text), the preview is used instead and the
note says it is **stale**, when it was captured, and why the live read failed.

The text lands in each hit's `notes` (``"ref file:notes/plan.md (live): …"``), so
`Recall.as_evidence` renders it, cleaned and neutralised, inside the untrusted-evidence wrapper.
Every resolution is logged on the ``deref`` channel of the memory's access stream with the
recall's id; it is logged only — the recall itself already did (or, when injected, deliberately
did not) reinforce the memory, and resolving a pointer must not count as a second use.

Trigger refs (kind ``"trigger"``, see `engramdb.memories.prospective`) are engine state and are
never resolved.

Example::

    resolvers = ReferenceResolvers()
    resolvers.register("file", FileResolver("/srv/agent-workspace"))
    resolvers.register("ticket", lambda key: tracker.get(key).summary)
    hits = resolve_refs(me, me.recall("what is the plan?"), resolvers)
    print(hits.as_evidence(600))
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from engramdb.errors import NotFound, ValidationError
from engramdb.memories.model import Channel
from engramdb.memories.resolvers import (
    RESERVED_KINDS,
    FileResolver,
    ReferenceResolvers,
    ResolvedRef,
    Resolver,
    _check_max,
    resolve_hit,
)
from engramdb.retrieval.results import Hit, Recall
from engramdb.storage.ports import Touch

if TYPE_CHECKING:
    from engramdb.memories.runtime import Acting


def resolve_refs(agent: Acting, recall: Recall, resolvers: ReferenceResolvers, *, max_chars: int = 2000) -> Recall:
    """`recall` with each hit's references read live (or their previews, marked stale) in its notes.

    Every hit must be a memory `agent` can see (else `NotFound`, nothing read or logged). The
    resolvers run outside any transaction; then one ``deref`` access per resolved reference is
    appended to the memory's access stream with the recall's id and the query
    ``"ref <kind>:<key> live|stale"``. These records do not reinforce (see the module docstring).
    """
    if not isinstance(recall, Recall):
        raise ValidationError(f"resolve_refs() takes a Recall, got {type(recall).__name__}")
    if not isinstance(resolvers, ReferenceResolvers):
        raise ValidationError(f"resolvers must be a ReferenceResolvers, got {type(resolvers).__name__}")
    _check_max(max_chars)
    ids = sorted({h.memory.id for h in recall.hits if any(r.kind not in RESERVED_KINDS for r in h.memory.refs)})
    if not ids:
        return recall
    rt, who = agent._runtime, agent._principal
    ns = rt.store.memories.visible_ids(who.visibility(include_archived=True), ids)
    missing = [mid for mid in ids if mid not in ns]
    if missing:
        raise NotFound(f"no memory {missing[0]!r} is visible to agent {who.agent_id}")
    hits: list[Hit] = []
    logs: list[tuple[int, str]] = []
    for hit in recall.hits:
        new, resolved = resolve_hit(hit, resolvers, max_chars=max_chars)
        hits.append(new)
        logs += [(ns[hit.memory.id], f"ref {r.ref.kind}:{r.ref.key} {'live' if r.live else 'stale'}") for r in resolved]
    now = rt.clock()
    with rt.store.atomic():
        for n, query in logs:
            rt.store.accesses.append(
                [Touch(n, Channel.DEREF)], now=now, tenant=who.tenant, reader=who.agent_id, query=query,
                recall_id=recall.recall_id,
            )  # fmt: skip
    return replace(recall, hits=tuple(hits))


__all__ = [
    "RESERVED_KINDS",
    "FileResolver",
    "ReferenceResolvers",
    "ResolvedRef",
    "Resolver",
    "resolve_hit",
    "resolve_refs",
]

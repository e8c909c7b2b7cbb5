"""The agent handle: what one agent may do with memories and tables in its tenant.

``engine.agent("researcher")`` bundles the agent's private and shared table scopes with its typed
memories. The handle is a thin facade: each method checks nothing the services do not, and calls
one service (`engramdb.memories.writing`, `reading`, `prospective`, `reflection`, `references`, the
recall pipeline) as the handle's `Principal` — tenant, agent, confidentiality cap and floor, fixed
when the handle is made. A handle given to an LLM tool cannot be widened by setting an attribute.
"""

from __future__ import annotations

import datetime as dt
import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, overload

from engramdb.aio import forwarded
from engramdb.errors import NotFound, ValidationError
from engramdb.memories import prospective, reading, transfer, writing
from engramdb.memories.conversation import remember_messages
from engramdb.memories.filters import Where
from engramdb.memories.model import (
    AccessRecord,
    Channel,
    Confidentiality,
    Edge,
    EdgeType,
    Memory,
    MemoryPage,
    MemoryRef,
    MemoryType,
    MemoryVersion,
    Principal,
    TodoStatus,
    Tombstone,
    check_many,
)
from engramdb.memories.prospective import Injection
from engramdb.memories.reading import MemoryRecord
from engramdb.memories.reembed import reembed
from engramdb.memories.references import resolve_refs
from engramdb.memories.reflection import Reasoner, Reconciler, ReflectionConfig, ReflectionReport, StopSignal, reflect
from engramdb.memories.runtime import Runtime
from engramdb.memories.writing import MemoryFields
from engramdb.observability import otel
from engramdb.observability.stats import Stats
from engramdb.progress import Progress, check_progress
from engramdb.retrieval.results import Explanation, Recall
from engramdb.retrieval.when import When
from engramdb.storage.ports import MemoryScope
from engramdb.tenancy.contract import check_level
from engramdb.tenancy.ids import check_agent_id, check_tenant

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Agent", "AsyncAgent", "MemoryFields", "MemoryRecord", "MemoryVersion"]


class Agent:
    """One agent's view of the engine: its table scopes and the memories it may see.

    Example::

        me = engine.agent("researcher")
        m = me.remember("The deploy key rotates every Monday", type="info", importance=7, tags=["ops"])
        hits = me.recall("when does the key rotate?", k=5)
        print(hits.as_evidence(token_budget=300))
        print(me.explain(hits.recall_id))
    """

    __slots__ = ("_principal", "_private", "_private_lock", "_private_scope", "_runtime", "_shared")
    _principal: Principal
    _private: Callable[[], MemoryScope]
    _private_lock: threading.Lock
    _private_scope: MemoryScope | None
    _runtime: Runtime
    _shared: MemoryScope | Callable[[], MemoryScope]

    def __init__(
        self,
        runtime: Runtime,
        agent_id: str,
        *,
        tenant: str = "default",
        cap: Confidentiality = Confidentiality.RESTRICTED,
        floor: Confidentiality = Confidentiality.PUBLIC,
        shared: MemoryScope | Callable[[], MemoryScope],
        private: Callable[[], MemoryScope],
    ) -> None:
        # The handle is fixed once made (no attribute can be set afterwards, see __setattr__), so
        # one given to an LLM tool cannot be widened; hence object.__setattr__ here.
        put = object.__setattr__
        put(self, "_runtime", runtime)
        principal = Principal(
            check_tenant(tenant), check_agent_id(agent_id), check_level(cap, "cap"), check_level(floor, "floor")
        )
        put(self, "_principal", principal)
        put(self, "_shared", shared)
        put(self, "_private", private)
        put(self, "_private_scope", None)
        put(self, "_private_lock", threading.Lock())

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(
            f"an agent handle is fixed at construction; cannot set {name!r} "
            "(ask the engine for another handle: engine.agent(agent_id, tenant=…, cap=…, floor=…))"
        )

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an agent handle is fixed at construction; cannot delete {name!r}")

    def __repr__(self) -> str:
        p = self._principal
        return f"Agent({p.agent_id!r}, tenant={p.tenant!r}, cap={p.cap.name}, floor={p.floor.name})"

    # -- who this is (read-only) ----------------------------------------------------------------

    @property
    def agent_id(self) -> str:
        return self._principal.agent_id

    @property
    def tenant(self) -> str:
        return self._principal.tenant

    @property
    def cap(self) -> Confidentiality:
        """The most confidential level this handle may read (fixed at construction)."""
        return self._principal.cap

    @property
    def floor(self) -> Confidentiality:
        """The least confidential level this handle stores at (fixed at construction)."""
        return self._principal.floor

    @property
    def aio(self) -> AsyncAgent:
        """This handle for async code: the same methods, awaitable (`AsyncAgent`)."""
        return AsyncAgent(self)

    @property
    def shared(self) -> MemoryScope:
        """The team-wide ``shared_*`` table scope (made on first use when given as a callable)."""
        scope = self._shared
        if isinstance(scope, MemoryScope):
            return scope
        with self._private_lock:
            made = self._shared
            if not isinstance(made, MemoryScope):
                made = made()
                object.__setattr__(self, "_shared", made)
            return made

    @property
    def private(self) -> MemoryScope:
        """This agent's ``private_<agent_id>_*`` table scope."""
        scope = self._private_scope
        if scope is None:
            with self._private_lock:
                scope = self._private_scope or self._private()
                object.__setattr__(self, "_private_scope", scope)
        return scope

    # -- writing ------------------------------------------------------------------------------

    @overload
    def remember(
        self,
        content: str,
        *,
        type: MemoryType | str = ...,
        importance: float | None = ...,
        salience: float = ...,
        confidence: float = ...,
        tags: Iterable[str] | None = ...,
        entities: Iterable[str] | None = ...,
        title: str = ...,
        refs: Iterable[MemoryRef] | None = ...,
        valid_from: float | None = ...,
        valid_to: float | None = ...,
        shared: bool = ...,
        status: str | None = ...,
        created_at: float | None = ...,
        confidentiality: Confidentiality | int | None = ...,
        session: str | None = ...,
        metadata: Mapping[str, object] | None = ...,
        dedup: bool = ...,
        force: bool = ...,
    ) -> Memory: ...

    @overload
    def remember(
        self,
        content: None = ...,
        *,
        messages: Iterable[object],
        importance: float | None = ...,
        tags: Iterable[str] | None = ...,
        shared: bool = ...,
        confidentiality: Confidentiality | int | None = ...,
        session: str | None = ...,
        metadata: Mapping[str, object] | None = ...,
        force: bool = ...,
        extract: bool | None = ...,
    ) -> list[Memory]: ...

    def remember(
        self,
        content: str | None = None,
        *,
        messages: Iterable[object] | None = None,
        type: MemoryType | str = MemoryType.INFO,
        importance: float | None = None,
        salience: float = 0.0,
        confidence: float = 1.0,
        tags: Iterable[str] | None = None,
        entities: Iterable[str] | None = None,
        title: str = "",
        refs: Iterable[MemoryRef] | None = None,
        valid_from: float | None = None,
        valid_to: float | None = None,
        shared: bool = False,
        status: str | None = None,
        created_at: float | None = None,
        confidentiality: Confidentiality | int | None = None,
        session: str | None = None,
        metadata: Mapping[str, object] | None = None,
        dedup: bool = True,
        force: bool = False,
        extract: bool | None = None,
    ) -> Memory | list[Memory]:
        """Store one memory and return it. Private to this agent unless `shared`.

        `session` names the conversation or run it came from and `metadata` is any JSON object
        of the caller's (at most ``Limits.metadata_chars`` as JSON); both come back on every read
        and filter `recall`, `search`, `browse` and `forget_where` inside the store's query
        (`engramdb.memories.filters`). Given `messages` instead of `content` — chat messages in
        the OpenAI / LangChain shape, ``[{"role": "user", "content": "…"}, …]`` — it stores one
        ``episode`` per turn, speaker as entity, linked ``precedes`` in order, in one
        transaction, and returns them in order (`engramdb.memories.conversation`). On an engine
        with extraction on (``extractor=`` or ``queue_extraction=True``) — or with `extract` True —
        the same transaction queues the turns for the extraction worker (`engramdb.llm.worker`);
        the model never runs inside this call. `extract` False stores them without queueing.

        With `dedup` (default), a memory within cosine `engine.dedup_threshold` (0.92) of a visible
        one of the same type, owner and tenant, at or above its confidentiality, *that makes the same
        statement* (the same words, numbers and order, case, punctuation, articles and contractions
        aside, and no entity the other lacks) reinforces that one (logged ``reinforced``) and that
        one is returned. Anything else, a correction ("not allergic") included, is stored. Without
        an embedder the candidates are texts that are the same but for case, white space and
        punctuation. Content that was deliberately forgotten raises `Forgotten` unless `force`.

        Dedup reinforces only a memory of the same session and metadata: the same words said in
        another conversation are a memory of that conversation.

        Raises `ValidationError` (nothing written) for empty content, an unknown type, scores out
        of range, a status on a non-todo, validity that ends before it starts, or metadata that is
        not a JSON object of checked keys.
        """
        if messages is not None:
            if content is not None:
                raise ValidationError("give content (one memory) or messages (a conversation), not both")
            given = {
                "type": type != MemoryType.INFO, "salience": salience != 0.0, "confidence": confidence != 1.0,
                "entities": entities is not None, "title": title != "", "refs": refs is not None,
                "valid_from": valid_from is not None, "valid_to": valid_to is not None, "status": status is not None,
                "created_at": created_at is not None, "dedup": dedup is not True,
            }  # fmt: skip
            odd = [name for name, set_ in given.items() if set_]
            if odd:
                raise ValidationError(
                    f"{', '.join(odd)} cannot be given with messages: each turn is an episode with its own "
                    "speaker and time (give created_at per message)"
                )
            return remember_messages(
                self._runtime, self._principal, messages, session=session, metadata=metadata, shared=shared,
                confidentiality=confidentiality, importance=importance, tags=tags, force=force, extract=extract,
            )  # fmt: skip
        if content is None:
            raise ValidationError("remember needs content (a str) or messages (a list of chat messages)")
        if extract is not None:
            raise ValidationError("extract applies to messages (a conversation); one memory is stored as given")
        fields: MemoryFields = {
            "content": content, "type": type, "importance": importance, "salience": salience,
            "confidence": confidence, "tags": tags, "entities": entities, "title": title, "refs": refs,
            "valid_from": valid_from, "valid_to": valid_to, "shared": shared, "status": status,
            "created_at": created_at, "confidentiality": confidentiality, "session": session, "metadata": metadata,
        }  # fmt: skip
        return self.remember_many([fields], dedup=dedup, force=force)[0]

    def remember_many(
        self,
        items: Iterable[MemoryFields | Mapping[str, object]],
        *,
        dedup: bool = True,
        force: bool = False,
        progress: Progress | None = None,
    ) -> list[Memory]:
        """Store many memories in one transaction (all or nothing); each item takes `remember`'s
        arguments. Dedup and tombstones apply per item as in `remember`; the result keeps the
        order of `items` (a deduplicated item returns the memory it reinforced). `progress`
        (``callable(stage, done, total)``, see `engramdb.progress`) hears stages ``embed`` and
        ``store``."""
        items = check_many("items", items, "a list of memory field mappings")
        return writing.remember_many(
            self._runtime, self._principal, items, dedup=dedup, force=force, progress=check_progress(progress)
        )

    def get(self, memory_id: str, *, touch: bool = True) -> Memory:
        """The memory `memory_id` if this agent may see it, else `NotFound`.

        A get is a deliberate read (channel ``deref``): it is logged and reinforces the memory,
        unless `touch` is False.
        """
        return reading.get(self._runtime, self._principal, memory_id, touch=touch)

    def update(
        self,
        memory_id: str,
        *,
        content: str | None = None,
        title: str | None = None,
        importance: float | None = None,
        salience: float | None = None,
        confidence: float | None = None,
        status: str | None = None,
        tags: Iterable[str] | None = None,
        confidentiality: Confidentiality | int | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> Memory:
        """Change a memory this agent may write (its own, or a shared one of its tenant).

        A content or title change keeps the previous version reachable through `history`. A new
        confidentiality may never be below this agent's floor (`ValidationError`). `metadata`
        replaces the memory's whole metadata (``{}`` clears it).
        """
        return writing.update(
            self._runtime, self._principal, memory_id, content=content, title=title, importance=importance,
            salience=salience, confidence=confidence, status=status, tags=tags, confidentiality=confidentiality,
            metadata=metadata,
        )  # fmt: skip

    def history(self, memory_id: str) -> list[MemoryVersion]:
        """Earlier versions of a memory, oldest first (the current one is `get`)."""
        return reading.history(self._runtime, self._principal, memory_id)

    def link(self, source: str, target: str, edge_type: EdgeType | str = EdgeType.RELATED, weight: float = 1.0) -> Edge:
        """Add a typed edge between two memories this agent can see (same tenant). Linking raises
        the less confidential end to the other's level (confidentiality travels)."""
        return writing.link(self._runtime, self._principal, source, target, edge_type, weight)

    def edges(self, memory_id: str) -> list[Edge]:
        """The edges touching a memory whose other end this agent can also see."""
        return reading.edges(self._runtime, self._principal, memory_id)

    # -- lifecycle ----------------------------------------------------------------------------

    def forget(self, memory_id: str, *, reason: str = "") -> Tombstone:
        """Remove a memory for good and leave a value-level tombstone (fingerprint, who, when, why).

        The text, its vector, index entries, versions and edges are deleted (archival alone is not
        forgetting); the access stream keeps its records. Remembering the same content again
        raises `Forgotten` unless forced. An archived memory can be forgotten too; forgetting it
        again returns the same tombstone; an id that never was (or is invisible) is `NotFound`.
        """
        return writing.forget(self._runtime, self._principal, memory_id, reason=reason)

    def forget_where(
        self,
        *,
        session: str | Sequence[str] | None = None,
        where: Mapping[str, object] | None = None,
        everything: bool = False,
        dry_run: bool = False,
        reason: str = "",
    ) -> writing.ForgetReport:
        """Forget, as `forget` does, every memory this agent may write (its own and the tenant's
        shared ones, archived ones too) of `session` and matching `where` (a metadata filter, see
        `engramdb.memories.filters`); with `everything` and no filter, all of them. Each leaves
        a tombstone; text, vectors, versions, edges and recall-log mentions are erased. A
        `dry_run` counts and names them and changes nothing.

            agent.forget_where(session="chat-42", dry_run=True).count
            agent.forget_where(where={"user_id": "u-7"}, reason="GDPR erasure request")
        """
        filt = Where.of(where, session=session)
        if not isinstance(everything, bool):
            raise ValidationError(f"everything must be True or False, got {everything!r}")
        if filt is None and not everything:
            raise ValidationError(
                "forget_where needs a session or a where filter; to forget every memory this agent may "
                "write, pass everything=True"
            )
        if filt is not None and everything:
            raise ValidationError("give a filter or everything=True, not both")
        return writing.forget_where(self._runtime, self._principal, filt, dry_run=dry_run, reason=reason)

    def prune(self, *, include_shared: bool = False) -> list[str]:
        """Archive this agent's memories whose retention fell below the threshold; return their ids.

        Guarded, whatever the clock says: never younger than the minimum age, never a protected
        type (skill), never an open todo, never importance ≥ 8 (see `ForgettingPolicy`). Prunes
        only this agent's own namespace unless `include_shared`.
        """
        return writing.prune(self._runtime, self._principal, include_shared=include_shared)

    def restore(self, memory_id: str) -> Memory:
        """Bring back a memory that `prune`, a merge or reflection archived (this agent's own or a
        shared one), so it is listed and recalled again; a memory that is not archived is returned
        as it is. A forgotten memory cannot be restored: its text is gone (`NotFound`)."""
        return writing.restore(self._runtime, self._principal, memory_id)

    def supersede(self, old_id: str, new_id: str) -> Edge:
        """Close the old fact (its `valid_to` becomes the new one's `valid_from`, or now) and link the
        new one to it with `refines`. Both must belong to the same owner."""
        return writing.supersede(self._runtime, self._principal, old_id, new_id)

    # -- reading ------------------------------------------------------------------------------

    def recall(
        self,
        query: str,
        *,
        k: int = 5,
        hops: int = 1,
        types: Iterable[MemoryType | str] | None = None,
        channel: Channel | str = Channel.RECALLED,
        trace_ref: str | None = None,
        as_of: float | None = None,
        when: When = "auto",
        include_archived: bool = False,
        min_relevance: float | None = None,
        session: str | Sequence[str] | None = None,
        where: Mapping[str, object] | None = None,
    ) -> Recall:
        """The `k` memories most worth recalling for `query`, with spreading over `hops` edges.

        `session` (an id or a list of them) and `where` (a metadata filter: ``{"project":
        "apollo", "priority": {"$gte": 2}}``, see `engramdb.memories.filters`) restrict what is
        considered inside the store's queries, before anything is ranked: every hit, near miss
        and memory reached by spreading matches them.

        Deliberate channels (``recalled``, ``searched``) log the access and reinforce the hits;
        ``injected`` logs without reinforcing. `as_of` recalls what was valid at that time;
        `include_archived` also considers memories that were archived (pruned, merged away).
        Each hit carries an absolute `Hit.relevance` in [0, 1], comparable across queries;
        `min_relevance` keeps only hits at or above it, so a recall can return fewer than `k`
        (none when nothing answers the query).
        `when` lifts memories made inside a time window (``ScoringConfig.w_when``; a lift, not a
        filter): ``"auto"`` reads the dates the query names ("on 13 March, 2023", "in May 2023"),
        None reads none, and ``(start, end)`` — epoch seconds, dates or aware datetimes — or a
        list of such pairs is used as given. A memory one of whose ``entities`` the query names
        (whole words, any case) is lifted by ``ScoringConfig.w_entity``, and one made close in
        time to a strong candidate by ``w_ctx`` (temporal context); ``explain`` shows both.
        """
        if not isinstance(query, str):
            raise ValidationError(f"query must be a str, got {type(query).__name__}")
        reading.check_k(k, hops)
        reading.check_trace_ref(trace_ref)
        try:
            ch = Channel(channel)
        except ValueError:
            raise ValidationError(f"unknown channel {channel!r}; use recalled, searched or injected") from None
        if ch not in (Channel.RECALLED, Channel.SEARCHED, Channel.INJECTED):
            raise ValidationError(f"recall logs on recalled, searched or injected, not {ch.value}")
        if not isinstance(include_archived, bool):
            raise ValidationError(f"include_archived must be True or False, got {include_archived!r}")
        vis = self._principal.visibility(
            as_of=as_of, include_archived=include_archived, where=Where.of(where, session=session)
        )
        recall, _ = self._runtime.recaller.run(
            query, vis=vis, k=k, hops=hops, types=reading.check_types(types),
            channel=ch, trace_ref=trace_ref, dry_run=False, when=when, min_relevance=min_relevance,
        )  # fmt: skip
        return recall

    def search(
        self,
        query: str,
        *,
        k: int = 5,
        types: Iterable[MemoryType | str] | None = None,
        trace_ref: str | None = None,
        as_of: float | None = None,
        when: When = "auto",
        min_relevance: float | None = None,
        session: str | Sequence[str] | None = None,
        where: Mapping[str, object] | None = None,
    ) -> Recall:
        """Like `recall` without spreading activation, logged on the ``searched`` channel."""
        return self.recall(
            query, k=k, hops=0, types=types, channel=Channel.SEARCHED, trace_ref=trace_ref, as_of=as_of, when=when,
            min_relevance=min_relevance, session=session, where=where,
        )  # fmt: skip

    def explain(
        self,
        recall_or_query: Recall | str,
        *,
        k: int = 5,
        hops: int = 1,
        types: Iterable[MemoryType | str] | None = None,
        as_of: float | None = None,
        when: When = "auto",
        session: str | Sequence[str] | None = None,
        where: Mapping[str, object] | None = None,
    ) -> Explanation:
        """Why a recall ranked what it did.

        Given a `Recall` or a recall id (``"rc_…"``) made by this agent, replays it from the
        access stream. Given any other text, runs a dry recall for it that touches nothing.
        Both include the best candidates just below the cut.
        """
        if not isinstance(recall_or_query, (Recall, str)):
            raise ValidationError(
                f"explain() takes a Recall or a str (recall id or query), got {type(recall_or_query).__name__}"
            )
        with otel.span("engramdb.explain", tenant=self.tenant, agent=self.agent_id) as span:
            explanation = self._explain(
                recall_or_query,
                k=k,
                hops=hops,
                types=types,
                as_of=as_of,
                when=when,
                filt=Where.of(where, session=session),
            )
            explanation = reading.with_origins(self._runtime, self._principal, explanation)
            otel.set_attributes(
                span, recall_id=explanation.recall_id, replayed=explanation.recall_id is not None,
                hits=len(explanation.hits), near_misses=len(explanation.near_misses),
            )  # fmt: skip
            return explanation

    def _explain(
        self,
        recall_or_query: Recall | str,
        *,
        k: int,
        hops: int,
        types: Iterable[MemoryType | str] | None,
        as_of: float | None,
        when: When,
        filt: Where | None = None,
    ) -> Explanation:
        rid = recall_or_query.recall_id if isinstance(recall_or_query, Recall) else recall_or_query
        if isinstance(rid, str) and (isinstance(recall_or_query, Recall) or reading.looks_like_recall_id(rid)):
            found = reading.replay(self._runtime, self._principal, rid)
            if found is not None:
                return found
            if isinstance(recall_or_query, Recall):
                raise NotFound("that recall was a dry run or belongs to another agent; nothing to replay")
            raise NotFound(
                f"no recall {rid!r} of this agent is on record (an unknown id, or another agent's); "
                "to explain a query instead, pass its text"
            )
        if isinstance(recall_or_query, Recall):
            raise NotFound("that recall was a dry run or belongs to another agent; nothing to replay")
        reading.check_k(k, hops)
        _, explanation = self._runtime.recaller.run(
            recall_or_query, vis=self._principal.visibility(as_of=as_of, where=filt), k=k, hops=hops,
            types=reading.check_types(types), channel=Channel.RECALLED, trace_ref=None, dry_run=True, when=when,
        )  # fmt: skip
        return explanation

    def accesses(self, memory_id: str) -> list[AccessRecord]:
        """The full access stream of a memory, oldest first.

        Another agent's accesses to a shared memory show who, when, how and how it scored, but not
        that agent's query text or trace reference: a query can say more than the memory it found.
        """
        return reading.accesses(self._runtime, self._principal, memory_id)

    def stats(self) -> Stats:
        """Usage statistics over the memories this agent can see (see `Stats`)."""
        return reading.stats(self._runtime, self._principal)

    def export(self, *, include_archived: bool = False) -> list[MemoryRecord]:
        """Every memory this agent can see, as JSON-ready dicts, with the edges whose two ends it
        can also see (oldest first; no access is logged). Suitable for backup or migration."""
        return reading.export(self._runtime, self._principal, include_archived=include_archived)

    def export_jsonl(self, out: IO[str] | str | os.PathLike[str], *, progress: Progress | None = None) -> int:
        """Write everything this agent can see — memories (archived too) with their access
        history summary and earlier versions, edges, tombstones — as JSON Lines to a path or a
        text stream; the number of lines. `import_jsonl` reads it back losslessly (see
        `engramdb.memories.transfer`). `progress` hears stage ``export`` (lines)."""
        return transfer.export_jsonl(self, out, progress=check_progress(progress))

    def import_jsonl(
        self, source: IO[str] | str | os.PathLike[str], *, progress: Progress | None = None
    ) -> transfer.ImportReport:
        """Import a JSON Lines export as this agent (its tenant; its own and shared records);
        idempotent: what is already in the store is skipped. Every record is checked before the
        first write, so a refusal (`ValidationError`) stores nothing. An export of another tenant
        is copied under new ids, its links kept (`ImportReport.reidentified`). `progress` hears
        stage ``import``.

        Example::

            engine.agent("alice", tenant="acme").export_jsonl("acme.jsonl")
            engine.agent("alice", tenant="globex").import_jsonl("acme.jsonl").reidentified
        """
        return transfer.import_jsonl(self, source, progress=check_progress(progress))

    def import_records(
        self, records: Iterable[Mapping[str, object]], *, progress: Progress | None = None
    ) -> transfer.ImportReport:
        """Import export records — the lines of `export_jsonl` as dicts, or what `export` returns
        — as this agent; see `import_jsonl`."""
        records = check_many("records", records, "a list of export records")
        return transfer.import_records(self, records, progress=check_progress(progress))

    def reembed(self, *, missing_only: bool = True, progress: Progress | None = None) -> int:
        """Embed the memories this agent can see that lack a vector of the engine's current
        embedder (all of them without `missing_only`); how many. `progress` hears ``embed``."""
        return reembed(self, missing_only=missing_only, progress=check_progress(progress))

    def memories(
        self,
        *,
        types: Sequence[MemoryType | str] | None = None,
        include_archived: bool = False,
        session: str | Sequence[str] | None = None,
        where: Mapping[str, object] | None = None,
    ) -> list[Memory]:
        """Every memory this agent can see (of `session`, matching `where`), oldest first (no
        access is logged). The archived husk a `forget` leaves (for the access stream's sake) is
        not a memory and is never listed."""
        return reading.memories(
            self._runtime, self._principal, types=types, include_archived=include_archived,
            where=Where.of(where, session=session),
        )  # fmt: skip

    def browse(
        self,
        *,
        contains: str | None = None,
        types: Sequence[MemoryType | str] | None = None,
        tag: str | None = None,
        status: str = "active",
        offset: int = 0,
        limit: int = 50,
        session: str | Sequence[str] | None = None,
        where: Mapping[str, object] | None = None,
    ) -> MemoryPage:
        """One page of the memories this agent can see, newest first, for listing them: those
        whose title, content or tags hold `contains` (letters compared case-insensitively, ASCII
        only), of `types`, carrying `tag`; `status` is ``active`` (default), ``archived`` or
        ``all``; `limit` up to 1,000. The filters and the count run inside the store's query, so a
        page costs the same at a million memories as at a hundred. No access is logged.

            page = agent.browse(contains="fsync", limit=20)
            page.total, [m.title for m in page.memories], page.has_more
        """
        return reading.browse(
            self._runtime,
            self._principal,
            contains=contains,
            types=types,
            tag=tag,
            status=status,
            offset=offset,
            limit=limit,
            where=Where.of(where, session=session),
        )

    def tombstones(self) -> list[Tombstone]:
        """What this agent has forgotten, and what was forgotten of the shared memories, at or
        below its cap, oldest first: each a fingerprint, who, when and why — never the text."""
        return reading.tombstones(self._runtime, self._principal)

    def tags(self) -> dict[str, int]:
        """Every tag on a memory this agent can see, with how many memories carry it (no access is
        logged)."""
        return reading.tags(self._runtime, self._principal)

    # -- consolidation ---------------------------------------------------------------------------

    def reflect(
        self,
        *,
        config: ReflectionConfig | None = None,
        reconciler: Reconciler | None = None,
        reasoner: Reasoner | None = None,
        steps: Sequence[str] | None = None,
        should_stop: StopSignal | None = None,
        progress: Progress | None = None,
    ) -> ReflectionReport:
        """Consolidate in the stated order — merge near-duplicates, reconcile (with a `Reconciler`),
        link neighbours, rescore importance, abstract episodes (with a `Reasoner`), prune — and
        return a `ReflectionReport`. Each item commits on its own; `should_stop` (a callable or a
        `threading.Event`) interrupts between items; `progress` (``callable(stage, done, total)``)
        hears ``reflect:<step>`` as each step starts and ends, counting steps, and ``<step>`` (``merge``,
        ``link`` …) counting the items that step examines (its total when known up front). One run per tenant
        at a time (`TransactionError`). See `engramdb.memories.reflection`."""
        return reflect(
            self, config=config, reconciler=reconciler, reasoner=reasoner, steps=steps, should_stop=should_stop,
            progress=check_progress(progress),
        )  # fmt: skip

    # -- prospective memory and live references -----------------------------------------------

    def intend(
        self,
        content: str,
        *,
        when: float | str | dt.datetime | None = None,
        every: float | None = None,
        on_event: str | None = None,
        cue: str | None = None,
        trigger: str | None = None,
        repeat: bool = False,
        importance: float | None = None,
        title: str = "",
        tags: Iterable[str] | None = None,
        refs: Iterable[MemoryRef] | None = None,
    ) -> Memory:
        """Store an intent with one trigger: `when` (a time; `every` seconds to repeat),
        `on_event` (an event name), `cue` (a phrase) or `trigger` (a spec); `repeat` keeps an
        event or cue intent firing. See `engramdb.memories.prospective.intend`."""
        return prospective.intend(
            self, content, when=when, every=every, on_event=on_event, cue=cue, trigger=trigger, repeat=repeat,
            importance=importance, title=title, tags=tags, refs=refs,
        )  # fmt: skip

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
        return prospective.due(self, now=now, event=event, text=text, trace_ref=trace_ref)

    def todos(self, status: TodoStatus | str | None = TodoStatus.OPEN) -> list[Memory]:
        """Todos this agent can see with `status` (None: all), oldest first."""
        return prospective.todos(self, status)

    def complete(self, memory_id: str) -> Memory:
        """Move a todo to done."""
        return prospective.complete(self, memory_id)

    def drop(self, memory_id: str) -> Memory:
        """Move a todo to dropped."""
        return prospective.drop(self, memory_id)

    def reopen(self, memory_id: str) -> Memory:
        """Move a done or dropped todo back to open."""
        return prospective.reopen(self, memory_id)

    def ride_along(
        self,
        recall_or_query: Recall | str,
        *,
        now: float | None = None,
        event: str | None = None,
        max_todos: int = 5,
        trace_ref: str | None = None,
    ) -> Injection:
        """Due intents and open todos to inject beside a recall, logged on the ``injected`` channel
        (never reinforcing). Returns an `Injection` with ``as_evidence()``."""
        return prospective.ride_along(
            self, recall_or_query, now=now, event=event, max_todos=max_todos, trace_ref=trace_ref
        )

    def resolve_refs(self, recall: Recall, *, max_chars: int = 2000) -> Recall:
        """The recall with each hit's references resolved live by `engine.resolvers` (or its
        preview, marked stale, when a resolver is missing or fails), as notes on the hits."""
        return resolve_refs(self, recall, self._runtime.resolvers, max_chars=max_chars)


class AsyncAgent:
    """An `Agent` for async code: every method of the handle, awaitable, run in a worker thread
    (the engine is synchronous and keeps a connection per thread, so the event loop never blocks).

    Example::

        me = engine.agent("researcher").aio          # or AsyncAgent(engine.agent("researcher"))
        await me.remember("The deploy key rotates every Monday")
        hits = await me.recall("when does the key rotate?", k=5)
    """

    __slots__ = ("_sync",)
    _sync: Agent

    def __init__(self, agent: Agent) -> None:
        if not isinstance(agent, Agent):
            raise ValidationError(f"AsyncAgent wraps an Agent (engine.agent(...)), got {type(agent).__name__}")
        object.__setattr__(self, "_sync", agent)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"an agent handle is fixed at construction; cannot set {name!r}")

    def __repr__(self) -> str:
        return f"Async{self._sync!r}"

    @property
    def sync(self) -> Agent:
        """The synchronous handle this wraps."""
        return self._sync

    @property
    def agent_id(self) -> str:
        """The agent this handle acts as."""
        return self._sync.agent_id

    @property
    def tenant(self) -> str:
        """The tenant this handle acts in."""
        return self._sync.tenant

    remember = forwarded(Agent.remember)
    remember_many = forwarded(Agent.remember_many)
    get = forwarded(Agent.get)
    update = forwarded(Agent.update)
    history = forwarded(Agent.history)
    link = forwarded(Agent.link)
    edges = forwarded(Agent.edges)
    forget = forwarded(Agent.forget)
    forget_where = forwarded(Agent.forget_where)
    prune = forwarded(Agent.prune)
    restore = forwarded(Agent.restore)
    supersede = forwarded(Agent.supersede)
    recall = forwarded(Agent.recall)
    search = forwarded(Agent.search)
    explain = forwarded(Agent.explain)
    accesses = forwarded(Agent.accesses)
    stats = forwarded(Agent.stats)
    export = forwarded(Agent.export)
    export_jsonl = forwarded(Agent.export_jsonl)
    import_jsonl = forwarded(Agent.import_jsonl)
    import_records = forwarded(Agent.import_records)
    memories = forwarded(Agent.memories)
    browse = forwarded(Agent.browse)
    tags = forwarded(Agent.tags)
    tombstones = forwarded(Agent.tombstones)
    reembed = forwarded(Agent.reembed)
    reflect = forwarded(Agent.reflect)
    intend = forwarded(Agent.intend)
    due = forwarded(Agent.due)
    todos = forwarded(Agent.todos)
    complete = forwarded(Agent.complete)
    drop = forwarded(Agent.drop)
    reopen = forwarded(Agent.reopen)
    ride_along = forwarded(Agent.ride_along)
    resolve_refs = forwarded(Agent.resolve_refs)

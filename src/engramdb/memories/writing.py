"""Writing memories: remember (with dedup and tombstones), update, link, supersede, forget, prune.

Every function takes the engine's `Runtime` and the `Principal` that acts, validates what it is
given (a `ValidationError` changes nothing), and writes through the storage ports inside one unit
of work. What a principal may write: its own memories and the tenant's shared ones, visible
under its cap; any other id answers `NotFound`, exactly like a missing one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np

from engramdb.errors import Forgotten, NotFound, ValidationError
from engramdb.memories import model as mm
from engramdb.memories.access import log_accesses
from engramdb.memories.filters import Where, check_metadata, check_session, context_of
from engramdb.memories.forgetting import prunable
from engramdb.memories.model import (
    Channel,
    Confidentiality,
    Edge,
    EdgeType,
    Memory,
    MemoryRef,
    MemoryType,
    MemoryVersion,
    Principal,
    Tombstone,
)
from engramdb.memories.runtime import Runtime
from engramdb.memories.text import content_hash, id_tokens, pack_times, same_statement, speaker_of
from engramdb.memories.triggers import TRIGGER_KIND, parse_trigger
from engramdb.observability import otel
from engramdb.progress import Progress, report
from engramdb.retrieval.budget import approx_tokens
from engramdb.retrieval.keywords import cue_terms, entity_token
from engramdb.retrieval.vector_channel import near_matches_among
from engramdb.storage.ports import ContentChange, NewMemory, RecallRecord, Stored, Touch, VectorRow


class MemoryFields(TypedDict, total=False):
    """The fields of one memory to remember (`Agent.remember_many`); only ``content`` is required.

    See `Agent.remember` for what each means and its default.
    """

    content: str
    type: MemoryType | str
    importance: float | None  # None: nobody scored it (5.0; reflection may rescore it)
    salience: float
    confidence: float
    tags: Iterable[str] | None
    entities: Iterable[str] | None
    title: str
    refs: Iterable[MemoryRef] | None
    valid_from: float | None
    valid_to: float | None
    shared: bool
    status: str | None
    created_at: float | None
    confidentiality: Confidentiality | int | None
    session: str | None
    metadata: Mapping[str, Any] | None


_KNOWN = frozenset(MemoryFields.__annotations__)


def not_found(who: Principal, memory_id: object) -> NotFound:
    """The one answer for an id that is missing, invisible, or not the principal's to write."""
    return NotFound(f"no memory {memory_id!r} is visible to agent {who.agent_id}")


def visible(rt: Runtime, who: Principal, memory_id: object, *, archived: bool = True) -> Stored:
    """The memory `memory_id` as `who` sees it (archived ones too, with `archived`), else `NotFound`."""
    if not isinstance(memory_id, str):
        raise not_found(who, memory_id)
    found = rt.store.memories.get(who.visibility(include_archived=archived), memory_id)
    if found is None:
        raise not_found(who, memory_id)
    return found


def check_level(value: object) -> Confidentiality:
    try:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError
        return Confidentiality(value)
    except ValueError:
        raise ValidationError(f"unknown confidentiality level {value!r}; use 0–3 or a Confidentiality") from None


# -- remember ------------------------------------------------------------------------------------


def _prepare(who: Principal, item: Mapping[str, Any], now: float, limits: mm.Limits) -> dict[str, Any]:
    if not isinstance(item, Mapping):
        raise ValidationError(f"each memory must be a mapping of fields, got {type(item).__name__}")
    unknown = set(item) - _KNOWN
    if unknown:
        raise ValidationError(f"unknown memory field(s): {', '.join(sorted(unknown))}")
    content = mm.check_content(item.get("content"), limits)
    mtype = mm.check_type(item.get("type", MemoryType.INFO))
    given = item.get("importance")
    imp, sal, conf = mm.check_scores(
        5.0 if given is None else given, item.get("salience", 0.0), item.get("confidence", 1.0)
    )
    status = mm.check_status(mtype, item.get("status"))
    vfrom, vto = mm.check_validity(item.get("valid_from"), item.get("valid_to"))
    title = mm.check_text("title", item.get("title") or "", limits.title_chars)
    shared = item.get("shared", False)
    if not isinstance(shared, bool):
        raise ValidationError(f"shared must be True or False, got {shared!r}")
    refs = tuple(mm.check_many("refs", item.get("refs") or (), "a list of MemoryRef values"))
    if any(not isinstance(r, MemoryRef) for r in refs):
        raise ValidationError("refs must be MemoryRef values")
    if any(r.kind == TRIGGER_KIND for r in refs):
        if mtype is not MemoryType.INTENT:
            raise ValidationError("a trigger belongs on an intent memory")
        for r in refs:
            if r.kind == TRIGGER_KIND:
                parse_trigger(r.key)
    created = item.get("created_at")
    created = now if created is None else mm.check_time("created_at", created)
    level = item.get("confidentiality")
    level = who.floor if level is None else check_level(level)
    session = item.get("session")
    return {
        "session": None if session is None else check_session(session),
        "metadata": (meta := check_metadata(item.get("metadata"), limits.metadata_chars)),
        "context": context_of(None if session is None else str(session), meta),
        "content": content,
        "type": mtype,
        "scores": (imp, sal, conf),
        # nobody scored it: reflection may rescore it from salience and use
        "importance_source": "default" if given is None else "caller",
        "status": status,
        "validity": (vfrom, vto),
        "title": title,
        "tags": mm.check_labels("tags", item.get("tags"), limits),
        "entities": mm.check_labels("entities", _entities(item.get("entities"), content), limits),
        "refs": refs,
        "owner": "" if shared else who.agent_id,
        "created_at": float(created),
        "level": max(level, who.floor),
        "hash": content_hash(content),
    }


#: Texts embedded per call when progress is reported (small enough for a lively bar, large
#: enough that the per-call overhead does not show).
EMBED_CHUNK = 512


def embed_texts(rt: Runtime, texts: Sequence[str], progress: Progress | None = None) -> Any:
    """The memory embedder's vectors of `texts` (None without an embedder), in chunks when
    `progress` is given, reported as stage ``"embed"``."""
    embedder = rt.embedder
    if embedder is None:
        return None
    if progress is None or len(texts) <= EMBED_CHUNK:
        report(progress, "embed", 0, len(texts))
        vectors = embedder.embed(list(texts))
        report(progress, "embed", len(texts), len(texts))
        return vectors
    parts = []
    report(progress, "embed", 0, len(texts))
    for start in range(0, len(texts), EMBED_CHUNK):
        parts.append(embedder.embed(list(texts[start : start + EMBED_CHUNK])))
        report(progress, "embed", min(start + EMBED_CHUNK, len(texts)), len(texts))
    return np.concatenate(parts)


def remember_many(
    rt: Runtime,
    who: Principal,
    items: Iterable[Mapping[str, Any]],
    *,
    dedup: bool = True,
    force: bool = False,
    progress: Progress | None = None,
    keys: list[int] | None = None,
) -> list[Memory]:
    """Store many memories in one transaction (all or nothing); see `Agent.remember_many`.
    `keys`, when given, receives each item's row key (in the items' order), for a caller that
    links them in the same transaction without looking them up again."""
    with otel.span("engramdb.remember", tenant=who.tenant, agent=who.agent_id, dedup=dedup) as span:
        now = rt.clock()
        prepared = [_prepare(who, item, now, rt.limits) for item in items]
        otel.set_attributes(span, items=len(prepared))
        if not prepared:
            return []
        vectors = embed_texts(
            rt, [p["content"] if not p["title"] else f"{p['title']}. {p['content']}" for p in prepared], progress
        )
        report(progress, "store", 0, len(prepared))
        out = _remember_prepared(rt, who, prepared, vectors, now, dedup=dedup, force=force, keys=keys)
        report(progress, "store", len(prepared), len(prepared))
        otel.set_attributes(span, stored=len({m.id for m in out}))
        return out


def _remember_prepared(
    rt: Runtime,
    who: Principal,
    prepared: list[dict[str, Any]],
    vectors: Any,
    now: float,
    *,
    dedup: bool,
    force: bool,
    keys: list[int] | None = None,
) -> list[Memory]:
    store = rt.store
    if (
        keys is None
        and not dedup
        and len(prepared) == 1
        and store.memories.has_fresh_step
        and not store.in_transaction()
    ):
        # Nothing to look up before: one statement reads the sequence and the tombstones and
        # writes (PostgreSQL: one round trip). Refused by a tombstone, or another writer in
        # between: nothing written, and the path below looks again and says why.
        vector = None if vectors is None else vectors[0]
        fresh_one = _insert_fresh(rt, who, prepared[0], vector, now, None, unless=None if force else who.cap)
        if fresh_one is not None:
            return [fresh_one]
    # The tombstones and the dedup lookup are read before the write lock is taken (at 1M memories a
    # lookup is a large share of a write, a batch's above all: not under the lock every writer waits for).
    # `latest` is the change sequence they read at; inside the transaction, a write that finds the
    # sequence moved on (another writer committed in between) checks again what those writers did.
    if force:
        latest = store.changes.current(who.tenant)
    else:  # (one read: the sequence and the tombstones as of it)
        latest, stones = store.tombstones.find_at(
            who.tenant, [p["owner"] for p in prepared], [p["hash"] for p in prepared], who.cap
        )
        _refuse(prepared, stones)
    stored: dict[int, int] = {}
    earlier: dict[int, int] = {}
    if dedup:
        stored, earlier = (
            _duplicates(rt, who, prepared, vectors, latest) if vectors is not None else _same_text(rt, who, prepared)
        )
    if keys is None and dedup and len(prepared) == 1 and not stored and not earlier and not store.in_transaction():
        # Nothing to reinforce and no caller's transaction: one step where the store has one
        # (PostgreSQL: one statement, one round trip), else the general path below.
        fresh_one = _insert_fresh(rt, who, prepared[0], None if vectors is None else vectors[0], now, latest)
        if fresh_one is not None:
            return [fresh_one]
    with store.atomic():
        # The write lock first (PostgreSQL: the change counter's row; SQLite holds it already).
        change = store.changes.next(who.tenant)
        if change != latest + 1:
            _caught_up(rt, who, prepared, vectors, latest, stored, earlier, dedup=dedup, force=force)
        kept = [i for i in range(len(prepared)) if i not in stored and i not in earlier]
        if stored:
            # The stored matches were found before this transaction: one forgotten (or archived)
            # since is nobody's match, and its item is written as new, unless a tombstone now
            # refuses its text (else a remember racing a forget returned the forgotten husk).
            live = store.memories.many(who.visibility(), sorted(set(stored.values())))
            lost = [j for j, n in stored.items() if n not in live]
            if lost:
                if not force:
                    _refuse_forgotten(rt, who, [prepared[j] for j in lost])
                for j in lost:
                    del stored[j]
                kept = sorted([*kept, *lost])
        new_keys, fresh = (
            _insert(rt, who, [prepared[i] for i in kept], None if vectors is None else vectors[kept], now, change)
            if kept
            else ([], [])
        )
        key_of = dict(zip(kept, new_keys, strict=True))
        target = {**stored, **{j: key_of[i] for j, i in earlier.items()}}
        reread: dict[int, Memory] = {}
        reinforced: tuple[int, Any] | None = None
        if target:
            # One transaction: the new memories, then the reinforcement of what the others
            # duplicate (stored memories, or new ones of this batch).
            reinforced = log_accesses(
                store, [Touch(n, Channel.REINFORCED) for n in sorted(set(target.values()))], now=now,
                tenant=who.tenant, reader=who.agent_id, ring_size=rt.scoring.ring_size,
            )  # fmt: skip
            # The reinforced memories as this transaction leaves them, in one read.
            reread = store.memories.many(who.visibility(include_archived=True), sorted(set(target.values())))
    if vectors is not None and rt.started and not store.in_transaction():
        # Committed (not a savepoint of the caller's): the vector cache takes the new memories as
        # written instead of reading them back (`VectorChannel.written`), and passes over the
        # reinforcement, which changed only access state (ring, counts), nothing it holds. A batch
        # of 1,000 with duplicates at 1M memories read its ~1,000 rows back in the next call's
        # refresh, a measurable share of that call.
        channel = rt.held_vectors(who.tenant)
        if channel is not None:
            rows = [
                _vector_row(n, change, m, vectors[i].tobytes()) for i, n, m in zip(kept, new_keys, fresh, strict=True)
            ]
            channel.written(store, change, rows)
            if reinforced is not None:
                channel.passed(reinforced[0])
    if keys is not None:
        keys.extend(key_of[i] if i in key_of else target[i] for i in range(len(prepared)))
    by_index = dict(zip(kept, fresh, strict=True))
    again = {n: rt.annotate(m) for n, m in reread.items()}
    for n in set(target.values()) - set(again):  # not visible to the writer any more: as stored
        found = store.memories.get_key(n)
        assert found is not None
        again[n] = rt.annotate(found.memory)
    return [by_index[i] if i in by_index else again[target[i]] for i in range(len(prepared))]


def _caught_up(
    rt: Runtime,
    who: Principal,
    prepared: list[dict[str, Any]],
    vectors: Any,
    latest: int,
    stored: dict[int, int],
    earlier: dict[int, int],
    *,
    dedup: bool,
    force: bool,
) -> None:
    """Inside the write's transaction, holding the write lock: what other writers committed since
    the tombstones and the dedup lookup were read at change `latest`. A tombstone made since
    refuses its text (`Forgotten`, nothing written); with dedup, a memory stored since that an
    item repeats is its match, as if the item had been remembered after it (else two writers of
    one text at the same moment both stored it). Updates `stored` and `earlier` in place."""
    if not force:
        _refuse_forgotten(rt, who, prepared)
    if not dedup:
        return
    if vectors is None:  # by text: the lookup is an index read, made again whole
        again_stored, again_earlier = _same_text(rt, who, prepared)
        stored.clear()
        stored.update(again_stored)
        earlier.clear()
        earlier.update(again_earlier)
        return
    embedder = rt.embedder
    if embedder is None:
        return
    rows = rt.store.vectors.cache_rows(embedder.name, latest, who.tenant)
    # A stored match changed since (updated, archived, its vector replaced) may no longer say what
    # its item does: that item is decided again among the changed rows (else an update of the match
    # in between made the write reinforce a memory that no longer holds its text, which was lost).
    changed = {int(r[0]) for r in rows}
    for i in [i for i, n in stored.items() if n in changed]:
        del stored[i]
    asked = [
        i for i, p in enumerate(prepared) if p["type"] not in _NEVER_MERGED and i not in stored and i not in earlier
    ]
    if not asked:
        return
    filters = [(prepared[i]["type"].value, prepared[i]["owner"], int(prepared[i]["level"])) for i in asked]
    found = near_matches_among(rows, vectors[asked], who.visibility(), filters, rt.dedup_threshold, DEDUP_MATCHES)
    matches = {i: [ref for _, _, ref in _options(hits, [])] for i, hits in zip(asked, found, strict=True) if hits}
    if not matches:
        return
    texts = rt.store.memories.contents(sorted({n for ns in matches.values() for n in ns}))
    for i, ns in matches.items():
        n = next((n for n in ns if n in texts and _repeats(prepared[i], *texts[n])), None)
        if n is not None:
            stored[i] = n
            # the later items of the batch that repeat this one reinforce that memory instead
            for j in [j for j, e in earlier.items() if e == i]:
                del earlier[j]
                stored[j] = n


def _refuse_forgotten(rt: Runtime, who: Principal, prepared: list[dict[str, Any]]) -> None:
    # Only tombstones the writer could have seen the memory of apply: one above its cap would tell
    # it that someone more trusted stored (and forgot) exactly this text.
    stones = rt.store.tombstones.find(
        who.tenant, [p["owner"] for p in prepared], [p["hash"] for p in prepared], who.cap
    )
    _refuse(prepared, stones)


def _refuse(prepared: list[dict[str, Any]], stones: Mapping[tuple[str, str], Tombstone]) -> None:
    """`Forgotten` for the first item of `prepared` a tombstone of `stones` refuses."""
    for p in prepared:
        stone = stones.get((p["owner"], p["hash"]))
        if stone is not None:
            raise Forgotten(
                f"this content was forgotten by {stone.forgotten_by} (memory {stone.memory_id}, reason: "
                f"{stone.reason or 'none given'}); to store it again on purpose, remember it with force "
                '(force=True; the remember tool\'s "force": true)',
                stone,
            )


#: The most matches dedup tries for an item (`_duplicates`): the most similar, and the memories
#: tied with it (the same vector, up to float32 rounding: within `DEDUP_TIE`), stored ones first,
#: oldest first. The best alone let a restatement be stored again on every call: the same text in
#: capitals has the lower-case memory's vector, that older memory came first on the tie, and its
#: words are not the capitalised "names" the restatement writes, so the earlier capitalised copy,
#: which it repeats, was never tried. Now a text remembered again meets its own earlier copy
#: unless more than this many memories share its vector (the same words about 16 other people).
#: Matches that are merely near are not tried: each is one more row read, and in the benchmark
#: corpus most items have several within 0.01 of the best (at 1M memories, trying them made
#: single writes markedly slower).
DEDUP_MATCHES = 16
DEDUP_TIE = 1e-5

#: A todo or an intent is a commitment: stating it again is a new one (the old may be done).
_NEVER_MERGED = (MemoryType.TODO, MemoryType.INTENT)


def _duplicates(
    rt: Runtime, who: Principal, prepared: list[dict[str, Any]], vectors: Any, latest: int
) -> tuple[dict[int, int], dict[int, int]]:
    """Which items add nothing new, as if they were remembered one call at a time, in order:
    ({item: key of the stored memory it duplicates}, {item: earlier item of this batch it
    duplicates}). An item's matches are the visible memories of its type, owner and tenant at or
    above its level (stored, or earlier kept items of the batch) at cosine ≥ `dedup_threshold`: the
    most similar, and those tied with it, at most `DEDUP_MATCHES` (`_options`); it duplicates the
    first of them (stored ones before items of the batch, older first) whose statement it repeats
    (`_repeats`)."""
    channel = rt.dedup_vectors(who.tenant)
    if channel is None:
        return {}, {}
    asked = [i for i, p in enumerate(prepared) if p["type"] not in _NEVER_MERGED]
    if not asked:
        return {}, {}
    channel.refresh(rt.store, latest)  # at least what the caller read at `latest`
    rt.settle_caches(who.tenant)  # (a first write of a tenant loaded its caches: within the budget)
    threshold = rt.dedup_threshold
    filters = [(prepared[i]["type"].value, prepared[i]["owner"], int(prepared[i]["level"])) for i in asked]
    found = dict(
        zip(
            asked,
            channel.near_matches(vectors[asked], who.visibility(), filters, threshold, DEDUP_MATCHES),
            strict=True,
        )
    )
    batch = _BatchMatches(prepared, vectors, asked, who, threshold, channel.stored_form)
    # The texts of each item's most similar stored match; the others' only when they are tried.
    texts = rt.store.memories.contents(sorted({hits[0][0] for hits in found.values() if hits}))
    gone: set[int] = set()  # matches no longer there to read (forgotten since the lookup)
    stored: dict[int, int] = {}
    earlier: dict[int, int] = {}
    for j in asked:  # in order: an item merged into an earlier one is not there for later ones
        options = _options(found[j], batch.matches(j))
        for at, (_, kind, ref) in enumerate(options):
            if kind == 0:
                if ref not in texts and ref not in gone:  # a near-tie tried after the best: read now
                    unread = {r for _, k, r in options[at:] if k == 0 and r not in texts}
                    texts.update(rt.store.memories.contents(sorted(unread)))
                    gone |= unread - texts.keys()
                if ref in texts and _repeats(prepared[j], *texts[ref]):
                    stored[j] = ref
                    break
            elif _repeats(prepared[j], prepared[ref]["content"], prepared[ref]["entities"], prepared[ref]["context"]):
                earlier[j] = ref
                break
        if j in stored or j in earlier:
            batch.merged(j)
    return stored, earlier


def _options(stored: list[tuple[int, float]], batch: list[tuple[int, float]]) -> list[tuple[float, int, int]]:
    """An item's matches to try, in order: (cosine, 0 for a stored memory / 1 for an earlier item
    of the batch, its key / item): the most similar and those tied with it (within `DEDUP_TIE`),
    stored memories first, oldest (lowest key) first, then the batch's items in their order; at
    most `DEDUP_MATCHES`."""
    if not batch and len(stored) <= 1:  # the common case: one match or none
        return [(c, 0, n) for n, c in stored]
    options = [(c, 0, n) for n, c in stored] + [(c, 1, i) for i, c in batch]
    best = max(o[0] for o in options)
    return sorted((o for o in options if o[0] >= best - DEDUP_TIE), key=lambda o: (o[1], o[2]))[:DEDUP_MATCHES]


def _repeats(item: dict[str, Any], content: str, entities: Sequence[str], context: str) -> bool:
    """True when the new `item` repeats a memory of `content`, `entities` and `context` (its
    session and metadata, `filters.context_of`): it makes the same statement (`same_statement`:
    the same words, numbers and order; case, punctuation, articles and contractions aside), every
    entity it names is one the memory names (case, white space and punctuation aside) — the same
    words about another person are another fact — and it comes from the same session with the
    same metadata (a restatement in another conversation is found by that conversation's filter)."""
    if item["context"] != context or not same_statement(item["content"], content):
        return False
    held = {entity_token(e) for e in entities}
    return all(token is None or token in held for token in map(entity_token, item["entities"]))


def _same_text(rt: Runtime, who: Principal, prepared: list[dict[str, Any]]) -> tuple[dict[int, int], dict[int, int]]:
    """`_duplicates` without vectors (no embedder): an item's match is a visible memory of its
    type, owner and tenant at or above its level whose text is the same but for case, white
    space and punctuation (`content_hash`), the oldest first, else an earlier kept item of the
    batch; the same result as its cosine-1 match would give. Texts that only mean the same are
    not matched: that takes an embedder."""
    asked = [i for i, p in enumerate(prepared) if p["type"] not in _NEVER_MERGED]
    if not asked:
        return {}, {}
    # (hash, type, owner): (key, level, text, entities, context)
    found: dict[tuple[str, str, str], list[tuple[int, int, str, tuple[str, ...], str]]] = {}
    for n, digest, mtype, owner, level, text, entities, context in rt.store.memories.same_content(
        who.visibility(), [prepared[i]["hash"] for i in asked]
    ):
        found.setdefault((digest, mtype, owner), []).append((n, level, text, entities, context))
    stored: dict[int, int] = {}
    earlier: dict[int, int] = {}
    kept: dict[tuple[str, str, str], list[int]] = {}  # earlier items of the batch not merged
    for j in asked:  # in order, as one call at a time: the stored memory first (older), then the batch
        p = prepared[j]
        key = (p["hash"], p["type"].value, p["owner"])
        level = int(p["level"])
        match = next(
            (n for n, lvl, text, ents, ctx in found.get(key, ()) if lvl >= level and _repeats(p, text, ents, ctx)), None
        )
        if match is not None:
            stored[j] = match
            continue
        twin = next(
            (
                i
                for i in kept.get(key, ())
                if level <= int(prepared[i]["level"]) <= int(who.cap)
                and _repeats(p, prepared[i]["content"], prepared[i]["entities"], prepared[i]["context"])
            ),
            None,
        )
        if twin is not None:
            earlier[j] = twin
        else:
            kept.setdefault(key, []).append(j)
    return stored, earlier


class _BatchMatches:
    """Cosines between the items of one batch, for dedup within it: per (type, owner) group, a
    matrix whose entry [b, a] is the cosine of item b with the earlier item a, or -inf where a
    cannot be b's match (a not earlier, below b's level, above the writer's cap, or merged)."""

    def __init__(
        self,
        prepared: list[dict[str, Any]],
        vectors: Any,
        asked: list[int],
        who: Principal,
        threshold: float,
        stored_form: Callable[[Any], Any] | None = None,
    ) -> None:
        self.threshold = threshold
        groups: dict[tuple[str, str], list[int]] = {}
        for i in asked:
            groups.setdefault((prepared[i]["type"].value, prepared[i]["owner"]), []).append(i)
        self.members: list[list[int]] = []
        self.sims: list[Any] = []
        self.where: dict[int, tuple[int, int]] = {}  # item: (group, position)
        for members in groups.values():
            if len(members) < 2:
                continue
            g = len(self.members)
            idx = np.asarray(members, dtype=np.int64)
            vecs = np.asarray(vectors[idx], dtype=np.float32)
            # Each item against the earlier ones as they will be stored (int8 once the index is
            # compact), as a later call would compare it with them: else a stored memory (its
            # int8 cosine ~1e-3 lower) lost the tie to an earlier item of the same vector. Only
            # for groups of two or more: a single write quantised its vector twice for nothing.
            sims = vecs @ (vecs if stored_form is None else np.asarray(stored_form(vecs), dtype=np.float32)).T
            levels = np.asarray([int(prepared[i]["level"]) for i in members])
            ok = np.tril(np.ones((len(members), len(members)), dtype=np.bool_), k=-1)  # ok[b, a]: a before b
            ok &= levels[None, :] >= levels[:, None]
            ok &= (levels <= int(who.cap))[None, :]
            sims[~ok] = -np.inf
            self.members.append(members)
            self.sims.append(sims)
            self.where.update({i: (g, b) for b, i in enumerate(members)})

    def matches(self, item: int) -> list[tuple[int, float]]:
        """The earlier, unmerged item most similar to `item` at cosine ≥ the threshold and those
        tied with it (within `DEDUP_TIE`), earlier first, at most `DEDUP_MATCHES`, with their
        cosines."""
        at = self.where.get(item)
        if at is None:
            return []
        g, b = at
        row = self.sims[g][b]
        a = int(np.argmax(row))
        best = float(row[a])
        if best < self.threshold:
            return []
        near = np.flatnonzero(row >= max(self.threshold, best - DEDUP_TIE))[:DEDUP_MATCHES].tolist()  # best, ties
        return [(self.members[g][i], float(row[i])) for i in near]

    def merged(self, item: int) -> None:
        """`item` was merged into another memory: it is nobody's match from now on."""
        at = self.where.get(item)
        if at is not None:
            g, a = at
            self.sims[g][:, a] = -np.inf


def _insert(
    rt: Runtime, who: Principal, prepared: list[dict[str, Any]], vectors: Any, now: float, change: int | None = None
) -> tuple[list[int], list[Memory]]:
    """Store `prepared` as new memories in the caller's transaction, at write
    sequence `change` (the caller's, taken under the write lock; else a new one)."""
    embedder = rt.embedder
    store = rt.store
    items, out = _new_memories(who, prepared, now)
    # Inside the caller's unit of work (`_remember_prepared`, its one caller): all or nothing with
    # it, and no savepoint of its own (on PostgreSQL a savepoint pair is two more round trips).
    assert store.in_transaction(), "_insert runs inside its caller's unit of work"
    keys = store.memories.insert(items, store.changes.next(who.tenant) if change is None else change)
    if vectors is not None and embedder is not None:
        store.vectors.put([(n, embedder.name, vectors[i].tobytes()) for i, n in enumerate(keys)])
    store.accesses.append([Touch(n, Channel.CREATED) for n in keys], now=now, tenant=who.tenant, reader=who.agent_id)
    return keys, [rt.annotate(m, now) for m in out]


def _new_memories(who: Principal, prepared: list[dict[str, Any]], now: float) -> tuple[list[NewMemory], list[Memory]]:
    """The rows of `prepared` as new memories written by `who` at `now`, and the memories."""
    ring = pack_times([now])  # creation is the first deliberate access
    out: list[Memory] = []
    items: list[NewMemory] = []
    # One read of the system's randomness for the whole batch (one per id was a measurable cost of a batch).
    tokens = id_tokens(now, len(prepared))
    for i, p in enumerate(prepared):
        memory = Memory(
            id=f"{who.agent_id}:{tokens[i]}", tenant=who.tenant, owner=p["owner"], author=who.agent_id,
            type=p["type"], title=p["title"], content=p["content"], tags=p["tags"], entities=p["entities"],
            n_chars=len(p["content"]), n_tokens=approx_tokens(p["content"]), n_sentences=mm.count_sentences(p["content"]),
            importance=p["scores"][0], salience=p["scores"][1], confidence=p["scores"][2],
            confidentiality=p["level"], created_at=p["created_at"], recorded_at=now, valid_from=p["validity"][0],
            valid_to=p["validity"][1], status=p["status"], refs=p["refs"], last_access=now, access_count=1,
            recent_accesses=(now,), importance_source=p["importance_source"], session=p["session"],
            metadata=p["metadata"],
        )  # fmt: skip
        items.append(NewMemory(memory, p["hash"], cue_terms(memory.title, memory.content, *memory.tags), ring))
        out.append(memory)
    return items, out


def _insert_fresh(
    rt: Runtime,
    who: Principal,
    prepared: dict[str, Any],
    vector: Any,
    now: float,
    latest: int | None,
    *,
    unless: mm.Confidentiality | None = None,
) -> Memory | None:
    """One new memory in one atomic step of the store's (`MemoryRows.insert_fresh`) when nothing
    was written since change `latest`, at which its tombstones and duplicates were looked up
    (None: the step reads the sequence itself, and refuses a tombstone at or below `unless`);
    the memory, its vector handed to the held vector cache. None: nothing written (the sequence
    moved on, a tombstone, or the store has no such step), take the general path."""
    store, embedder = rt.store, rt.embedder
    (item,), (memory,) = _new_memories(who, [prepared], now)
    blob = vector.tobytes() if vector is not None and embedder is not None else None
    model = None if blob is None or embedder is None else (embedder.name, blob)
    done = store.memories.insert_fresh(
        item, latest, model, now, who.agent_id, Channel.CREATED.value, unless_forgotten=unless
    )
    if done is None:
        return None
    key, change = done
    if blob is not None and rt.started:
        channel = rt.held_vectors(who.tenant)
        if channel is not None:  # as after the general path's commit (`VectorChannel.written`)
            channel.written(store, change, [_vector_row(key, change, memory, blob)])
    return rt.annotate(memory, now)


def _vector_row(n: int, change: int, m: Memory, blob: bytes) -> VectorRow:
    """The `VectorRow` of a memory just inserted, as `MemoryVectors.cache_rows` reads it back (a
    new row is not archived)."""
    return (n, change, m.tenant, m.owner, int(m.confidentiality), 0, m.valid_from, m.valid_to, m.type.value, blob)


# -- changing one memory -----------------------------------------------------------------------------


def update(
    rt: Runtime,
    who: Principal,
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
    metadata: Mapping[str, Any] | None = None,
) -> Memory:
    """Change a memory `who` may write; see `Agent.update`."""
    now = rt.clock()
    current = visible(rt, who, memory_id).memory
    if current.owner not in ("", who.agent_id):
        raise not_found(who, memory_id)
    imp, sal, conf = mm.check_scores(
        current.importance if importance is None else importance,
        current.salience if salience is None else salience,
        current.confidence if confidence is None else confidence,
    )
    new_status = current.status if status is None else mm.check_status(current.type, status)
    level = current.confidentiality if confidentiality is None else check_level(confidentiality)
    if level < max(who.floor, current.confidentiality):
        # Lowering would expose what the memory held (its earlier versions too) to lower caps.
        raise ValidationError(
            f"confidentiality {level.name} is below the memory's {current.confidentiality.name} "
            f"(or this agent's floor {who.floor.name}); an update can raise a level, never lower it"
        )
    if status is not None and current.type is not MemoryType.TODO:
        mm.check_status(current.type, status)
    new_content = current.content if content is None else mm.check_content(content, rt.limits)
    new_title = current.title if title is None else mm.check_text("title", title, rt.limits.title_chars)
    new_tags = current.tags if tags is None else mm.check_labels("tags", tags, rt.limits)
    new_meta = None if metadata is None else check_metadata(metadata, rt.limits.metadata_chars)
    embedder = rt.embedder
    vec = None
    if embedder is not None and (new_content != current.content or new_title != current.title):
        vec = embedder.embed([new_content if not new_title else f"{new_title}. {new_content}"])[0]
    store = rt.store
    with store.atomic():
        # Read again under the write lock: a level raised (by an update or a link) since the read
        # above must not be written back lower, and the version kept is the one being replaced.
        # Taking the change sequence takes that lock on PostgreSQL too (its counter row), so it
        # comes first: read before it, two concurrent updates kept the same version (a duplicate
        # key error for the second).
        stamp = store.changes.next(who.tenant)
        fresh = visible(rt, who, memory_id)
        n, now_level = fresh.key, fresh.memory.confidentiality
        level = max(level, now_level)
        if level > now_level:
            _check_may_raise(who, fresh.memory, level)
        version = fresh.memory.version
        if new_content != fresh.memory.content or new_title != fresh.memory.title:
            store.versions.add(
                n, MemoryVersion(fresh.memory.version, fresh.memory.title, fresh.memory.content, now, who.agent_id)
            )
            version += 1
        change = ContentChange(
            content=new_content, title=new_title, tags=new_tags, importance=imp, salience=sal, confidence=conf,
            importance_source=fresh.memory.importance_source if importance is None else "caller", status=new_status, version=version, n_chars=len(new_content), n_tokens=approx_tokens(new_content),
            n_sentences=mm.count_sentences(new_content), content_hash=content_hash(new_content),
            terms=cue_terms(new_title, new_content, *new_tags), confidentiality=level,
            metadata=fresh.memory.metadata if new_meta is None else new_meta,
        )  # fmt: skip
        store.memories.update(n, change, stamp)
        if vec is not None and embedder is not None:
            store.vectors.put([(n, embedder.name, vec.tobytes())], replace=True)
        return rt.annotate(visible(rt, who, memory_id).memory, now)


def _check_may_raise(who: Principal, memory: Memory, level: Confidentiality) -> None:
    """Raising a shared memory hides it from the team's readers below the new level, so only its
    author may do that (by an update, or by linking it into a more confidential memory); an
    agent's own memories it may raise as it likes."""
    if memory.owner == "" and memory.author != who.agent_id:
        raise ValidationError(
            f"this would raise the shared memory {memory.id} from {memory.confidentiality.name} to {level.name}, "
            f"hiding it from the team's readers below {level.name}; only its author ({memory.author}) may raise "
            "a shared memory — link memories of one level, or ask its author"
        )


def link(
    rt: Runtime,
    who: Principal,
    source: str,
    target: str,
    edge_type: EdgeType | str = EdgeType.RELATED,
    weight: float = 1.0,
) -> Edge:
    """Add a typed edge between two memories `who` can see; see `Agent.link`."""
    etype = mm.check_edge_type(edge_type)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight <= 1:
        raise ValidationError(f"weight must be a number in (0, 1], got {weight!r}")
    if source == target:
        raise ValidationError("a memory cannot be linked to itself")
    now = rt.clock()
    store = rt.store
    with store.atomic():
        a, b = visible(rt, who, source), visible(rt, who, target)
        # Confidentiality travels: what is linked into a more confidential memory rises to its level.
        level = max(a.memory.confidentiality, b.memory.confidentiality)
        for end in (a, b):
            if end.memory.confidentiality < level:
                _check_may_raise(who, end.memory, level)
        store.edges.put(
            who.tenant, [(a.key, b.key, etype.value, float(weight))], now=now, by=who.agent_id, replace=True
        )
        store.memories.raise_level([a.key, b.key], level, store.changes.next(who.tenant))
    return Edge(source, target, etype, float(weight), now)


def supersede(rt: Runtime, who: Principal, old_id: str, new_id: str) -> Edge:
    """Close the old fact and link the new one to it with `refines`; see `Agent.supersede`."""
    now = rt.clock()
    old = visible(rt, who, old_id).memory
    new = visible(rt, who, new_id).memory
    if old.id == new.id:
        raise ValidationError("a memory cannot supersede itself")
    if old.owner != new.owner or old.owner not in ("", who.agent_id):
        raise ValidationError("supersede works within one owner: both memories must be yours, or both shared")
    until = new.valid_from if new.valid_from is not None else now
    if old.valid_from is not None and until < old.valid_from:
        raise ValidationError("the new fact starts before the old one did; nothing to supersede")
    store = rt.store
    with store.atomic():
        store.memories.close_validity(who.tenant, old.id, until, store.changes.next(who.tenant))
    return link(rt, who, new.id, old.id, EdgeType.REFINES)


# -- forgetting and pruning ---------------------------------------------------------------------------


def _tombstone_of(rt: Runtime, who: Principal, memory_id: object) -> Tombstone | None:
    """The tombstone `who` may see that a forget of `memory_id` left (its own or a shared one)."""
    if not isinstance(memory_id, str):
        return None
    stones = rt.store.tombstones.listing(who.tenant, ["", who.agent_id])
    return next((s for s in reversed(stones) if s.memory_id == memory_id and s.confidentiality <= who.cap), None)


def forget(rt: Runtime, who: Principal, memory_id: str, *, reason: str = "") -> Tombstone:
    """Remove a memory for good and leave a value-level tombstone; see `Agent.forget`."""
    if not isinstance(reason, str):
        raise ValidationError("reason must be a str")
    now = rt.clock()
    store = rt.store
    rt.load_saved_caches()  # so that close can write the side files this drops again (see there)
    # Erasing: the pages this frees (a long text's overflow pages, a rewritten recall record's) are
    # overwritten as well, not only the cells, before the transaction commits (a wipe that fails, on
    # a full disk say, takes the forget back with it).
    with store.atomic(), store.erasing():
        stamp = store.changes.next(who.tenant)  # first: the write lock on PostgreSQL too (see `update`)
        try:
            found = visible(rt, who, memory_id)  # an archived memory can be forgotten too
        except NotFound:
            # Forgetting twice is harmless: the tombstone of the first time is the answer (if this
            # handle may see it; otherwise the id reads as missing, as any hidden one does).
            earlier = _tombstone_of(rt, who, memory_id)
            if earlier is None:
                raise
            return earlier
        memory = found.memory
        if memory.owner not in ("", who.agent_id):
            raise not_found(who, memory_id)
        twins = _merged_twins(rt, who, found)  # before its edges go: they are how they are found
        stone = _erase(rt, who, found, reason, now, stamp)
        for twin in twins:
            _erase(rt, who, twin, reason, now, stamp)
    rt.drop_vector_file()
    store.after_forget()
    return stone


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """What a bulk forget did (or, as a dry run, would do): how many memories, their ids, and
    whether anything was written."""

    count: int
    ids: tuple[str, ...]
    dry_run: bool


#: the most memories one bulk forget takes in one transaction (more are forgotten in several,
#: each all or nothing; a crash between two leaves the rest for a second call to finish)
FORGET_CHUNK = 2_000


def forget_where(
    rt: Runtime,
    who: Principal,
    where: Where | None,
    *,
    owners: Sequence[str] | None = None,
    dry_run: bool = False,
    reason: str = "",
) -> ForgetReport:
    """Forget every memory `who` may write (its own and the tenant's shared ones, or those of
    `owners`) that `where` admits — archived ones too — exactly as `forget` forgets one: a
    tombstone each, the text, vector, versions, edges and recall-log mentions erased, with their
    merged twins. `where` None is every such memory (a whole agent or tenant). A dry run counts
    and names them and writes nothing."""
    if not isinstance(reason, str):
        raise ValidationError("reason must be a str")
    if not isinstance(dry_run, bool):
        raise ValidationError(f"dry_run must be True or False, got {dry_run!r}")
    allowed = ("", who.agent_id) if owners is None else tuple(owners)
    vis = who.visibility(include_archived=True, where=where)
    listed = [m for m in rt.store.memories.listing(vis) if m.owner in allowed]
    ids = tuple(m.id for m in listed)
    if dry_run or not ids:
        return ForgetReport(len(ids), ids, dry_run)
    store = rt.store
    rt.load_saved_caches()  # as `forget`: close writes the side files this drops again
    done: list[str] = []
    for start in range(0, len(ids), FORGET_CHUNK):
        now = rt.clock()
        with store.atomic(), store.erasing():
            stamp = store.changes.next(who.tenant)
            every = who.visibility(include_archived=True)
            for mid in ids[start : start + FORGET_CHUNK]:
                found = store.memories.get(every, mid)
                if found is None:  # forgotten meanwhile (or a twin of one forgotten above)
                    continue
                twins = _merged_twins(rt, who, found)
                _erase(rt, who, found, reason, now, stamp)
                done.append(mid)
                for twin in twins:
                    if twin.memory.owner in allowed:
                        _erase(rt, who, twin, reason, now, stamp)
        rt.drop_vector_file()
        store.after_forget()
    return ForgetReport(len(done), tuple(done), False)


def _merged_twins(rt: Runtime, who: Principal, found: Stored) -> list[Stored]:
    """The archived memories reflection merged into `found`, and those merged into them: each is
    archived, of its owner and type, linked ``refines`` to the memory it went into, and carries
    the merge's own access record ("merge <its id> into <that id>", channel reflected). Forgetting
    a memory forgets them too: a merge archives the duplicate with its text, and forgetting only
    the survivor left that text in the store. Found by that record, not by comparing texts, so
    a survivor updated since still finds its copies, and a memory linked ``refines`` for another
    reason (a supersede, a user's link) is never taken for one."""
    vis = who.visibility(include_archived=True)
    out: list[Stored] = []
    seen = {found.key}
    todo = [found]
    while todo:
        into = todo.pop()
        for edge in rt.store.edges.touching(vis, into.key):
            if edge.type is not EdgeType.REFINES or edge.target != into.memory.id:
                continue
            twin = rt.store.memories.get(vis, edge.source)
            if twin is None or twin.key in seen or not twin.memory.archived:
                continue
            m = twin.memory
            if m.owner != into.memory.owner or m.type is not into.memory.type:
                continue
            record = f"merge {m.id} into {into.memory.id}"[:200]  # as the access stream keeps queries
            if any(r.channel is Channel.REFLECTED and r.query == record for r in rt.store.accesses.records(twin.key)):
                seen.add(twin.key)
                out.append(twin)
                todo.append(twin)
    return out


def _erase(rt: Runtime, who: Principal, found: Stored, reason: str, now: float, stamp: int) -> Tombstone:
    """Forget one memory inside the caller's transaction: its tombstone, then its edges, vector,
    versions and recall-log mentions go, and its row keeps an archived husk without text."""
    store = rt.store
    memory, n = found.memory, found.key
    stone = Tombstone(
        memory.id, memory.tenant, memory.owner, content_hash(memory.content), who.agent_id, now, reason,
        memory.confidentiality,
    )  # fmt: skip
    store.tombstones.add(stone)
    store.edges.delete_touching(n)
    store.vectors.delete(n)
    store.versions.delete(n)
    retired = f"forgotten:{n}"
    _scrub_recall_log(rt, memory.tenant, memory.id, retired)
    # An archived husk without text stays, so the access stream keeps its key and caches see the
    # change; its id is retired so the old id answers NotFound from now on.
    store.memories.retire(n, retired, stamp)
    return stone


def _scrub_recall_log(rt: Runtime, tenant: str, memory_id: str, retired: str) -> None:
    """Rewrite the recall log's mentions of a forgotten memory (as a hit or a near miss): its
    title goes and its id becomes the retired one, so `explain(recall_id)` still shows that
    something ranked there, but not what it said."""

    def scrub(entries: Sequence[Any]) -> list[Any]:
        # an entry is a list (id, title, ...) or, logged before those, an object with its keys
        return [
            ([retired, "", *e[2:]] if e[:1] == [memory_id] else e)
            if isinstance(e, list)
            else (dict(e, memory_id=retired, title="") if e.get("memory_id") == memory_id else e)
            for e in entries
        ]

    for record in rt.store.recalls.mentioning(tenant, memory_id):
        params = dict(record.params, hits=scrub(record.params.get("hits", [])))
        rt.store.recalls.rewrite(
            RecallRecord(
                record.recall_id, record.ts, record.tenant, record.reader, record.query, params,
                scrub(record.near_misses),
            )
        )  # fmt: skip


def restore(rt: Runtime, who: Principal, memory_id: str) -> Memory:
    """Bring back an archived memory `who` may write (its own or a shared one); see `Agent.restore`."""
    found = visible(rt, who, memory_id)
    if found.memory.owner not in ("", who.agent_id):
        raise not_found(who, memory_id)
    if found.memory.archived:
        store = rt.store
        with store.atomic():
            store.memories.unarchive(who.tenant, [memory_id], store.changes.next(who.tenant))
        found = visible(rt, who, memory_id, archived=False)
    return rt.annotate(found.memory)


def prune(rt: Runtime, who: Principal, *, include_shared: bool = False) -> list[str]:
    """Archive `who`'s memories whose retention fell below the threshold; see `Agent.prune`."""
    policy = rt.forgetting
    now = rt.clock()
    owners = ("", who.agent_id) if include_shared else (who.agent_id,)
    listed = rt.store.memories.listing(who.visibility())
    doomed = [m for m in listed if m.owner in owners and prunable(m, now, policy)]
    if not doomed:
        return []
    store = rt.store
    with store.atomic():
        store.memories.archive(who.tenant, [m.id for m in doomed], store.changes.next(who.tenant))
    return [m.id for m in doomed]


def retire_weak(rt: Runtime, who: Principal, vis: mm.Visibility, *, below_strength: float, min_age: float) -> int:
    """Archive `who`'s own memories that `vis` shows, not skills, weaker than `below_strength`
    and older than `min_age` seconds (spec 002's prune); how many."""
    store = rt.store
    now = rt.clock()
    with store.atomic():
        keys = store.memories.weak(vis, who.agent_id, below_strength=float(below_strength), now=now, min_age=min_age)
        if keys:
            store.memories.archive_keys(keys, store.changes.next(who.tenant))
    return len(keys)


__all__ = [
    "ForgetReport",
    "MemoryFields",
    "check_level",
    "forget",
    "forget_where",
    "link",
    "not_found",
    "prune",
    "remember_many",
    "retire_weak",
    "supersede",
    "update",
    "visible",
]


def _entities(given: Iterable[str] | None, content: object) -> Iterable[str] | None:
    """The caller's entities; with none given (None), the speaker of a "Name: text" line (text.speaker_of)."""
    if given is not None:
        return given
    speaker = speaker_of(content) if isinstance(content, str) else None
    return [speaker] if speaker else None

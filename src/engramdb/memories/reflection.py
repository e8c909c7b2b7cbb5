"""Reflection: an offline consolidation pass over the memories one agent may write, in a stated order.

::

    1. merge      near-duplicates: same owner, type, status and validity, cosine ≥ 0.95, and the
                  one archived says nothing the other does not. The survivor keeps the highest
                  importance, salience and confidence, the summed strength and access history, the
                  union of tags, entities, references and edges, and the higher confidentiality; the
                  duplicate is archived with a ``refines`` edge to it.
    2. reconcile  outdated facts, only with a `Reconciler`: each superseded memory's validity is
                  closed and the memory that replaces it ``refines`` it (as `Agent.supersede`).
    3. link       neighbours: 0.80 ≤ cosine < 0.95, same owner and confidentiality → ``related``
                  edges weighted by the cosine, at most 5 new edges touching any one memory.
    4. rescore    importance ← clamp(0.5·importance + 3·salience + 2·σ(B), 0, 10), where B is the
                  ACT-R base level; a memory at ≥ 8 never drops below 8. Only memories whose
                  importance no caller set (`Memory.importance_source` "default" or "reflection"):
                  an importance given to remember, update or import is the caller's and stays.
    5. abstract   episodes into ``reflection`` gists, only with a `Reasoner`; each gist has
                  ``derived_from`` edges to its episodes.
    6. prune      decayed memories, through the guarded prune of `engramdb.memories.forgetting`.

Dedup runs first so that every later step sees canonical records; abstraction runs before
forgetting so that episodes are distilled before they fade. The deterministic steps need no
model; the steps that need one (2, 5) run only when their callable is given.

**Scope.** A run covers what its agent may see and write, as recall would see it now: its own
memories and — unless ``include_shared=False`` — the tenant's shared ones, at or below its
confidentiality cap, unarchived and valid now. Nothing is paired across owners (a private memory
with a shared one, or one agent's with another's) or tenants.

**Confidentiality travels.** A merge survivor and a gist are at least as confidential as the most
confidential of their sources. Links are only made between memories of the same level, so no
automatic edge ever needs to raise one (`Agent.link` raises both ends to the higher level).

**Commits and interruption.** Every merge, reconciled cluster and gist is one transaction; link
and rescore commit `ReflectionConfig.batch` memories per transaction. `should_stop` (a callable
or a `threading.Event`) is checked between items: a stop commits what was processed, skips the
rest, and the report says where it stopped. A later run continues from the consistent state. A
failing model call is counted in the report and the run goes on; a database error ends the run
with that error, and what was committed before it stays committed.

**One run per tenant.** A second run on the same tenant, from any thread or process, fails at
once with `TransactionError` and changes nothing (`engramdb.storage.ports.Backend.tenant_lock`: on
SQLite an OS file lock beside the database, which the OS releases when its process dies, so a
crash never leaves a stale lock).

**Vectors.** Steps 1–3 read the stored vectors of the engine's memory embedder (those of its
model name). Without an embedder, merge folds only memories of the same text (case, white
space and punctuation aside: `content_hash`, as dedup on write does then), link is skipped
and reconcile clusters on ``contradicts`` edges only. Cosine thresholds assume an isotropic space; a mean-pooled static
embedding puts unrelated sentences at cosine ~0.9 (0.77 mean over the probe set below, 0.89 over
the benchmark corpus), where 0.95 would merge distinct facts. So the embedder is calibrated once
on a fixed, diverse probe set: when its probes' mean pairwise cosine exceeds
``anisotropy_limit``, the probes' mean vector is subtracted from every memory vector before the
thresholds apply (``center=None``, the default; ``True`` / ``False`` force it). The hashing
embedder's probes sit at ~0.02 and are left as they are.

**Pairs at scale.** Steps 1-3 compare every pair of a group (one owner and type for merge, one
owner and level for link) of up to ``exact_pairs_up_to`` (50,000) memories. Above that, every pair
grows with n² (the link step alone is slow at 100k memories and impractical at 1M), so the group is
clustered first (spherical k-means, ~1,000 memories per centroid, each memory in the clusters of
its two nearest centroids) and only memories sharing a cluster are compared. At 100k memories of
the benchmark corpus that finds 99.6% of the link pairs and all the merge pairs, far sooner.

Example::

    from engramdb.memories.reflection import Reflector, ReflectionConfig

    report = Reflector(me, ReflectionConfig(max_new_edges=3)).reflect()
    print(report.merged, report.linked, report.step("rescore").duration_s)
    Reflector(me).rescore()                      # one step alone
    stop = threading.Event()                     # stop.set() from another thread ends it between items
    Reflector(me, reasoner=my_llm_gists).reflect(should_stop=stop)
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from engramdb.errors import Forgotten, NotFound, ValidationError
from engramdb.memories import reading, writing
from engramdb.memories.model import Channel, EdgeType, Memory, MemoryType, Visibility
from engramdb.memories.reflection_support import (
    _INTERRUPTED,
    STEPS,
    Reasoner,
    Reconciler,
    ReflectionConfig,
    ReflectionReport,
    StepReport,
    StopSignal,
    _check_steps,
    _fold_accesses,
    _mergeable,
    _stopper,
    _text,
    _times,
    _union,
)
from engramdb.memories.runtime import Acting
from engramdb.memories.scoring import base_level, recency
from engramdb.memories.similarity import _load_vectors, _pairs, _Vectors
from engramdb.memories.text import same_statement
from engramdb.observability import otel
from engramdb.progress import Progress, report
from engramdb.retrieval.keywords import cue_terms, entity_token
from engramdb.storage.ports import Fold, Touch

__all__ = [
    "STEPS",
    "Reasoner",
    "Reconciler",
    "ReflectionConfig",
    "ReflectionReport",
    "Reflector",
    "StepReport",
    "StopSignal",
    "reflect",
    "rescored_importance",
]

log = logging.getLogger(__name__)

#: a step reports its progress every this many items examined
_TICK = 64


@dataclass(slots=True)
class _Tally:
    step: str
    changed: int = 0
    examined: int = 0
    calls: int = 0
    errors: int = 0
    interrupted: bool = False
    skipped: str | None = None
    note: str | None = None
    progress: Progress | None = None
    total: int | None = None

    def tick(self) -> None:
        """One more item examined; heard by `progress` (stage: the step) every `_TICK` items."""
        self.examined += 1
        if self.progress is not None and self.examined % _TICK == 0:
            self.progress(self.step, self.examined, self.total)

    def freeze(self, duration: float) -> StepReport:
        return StepReport(
            self.step, self.changed, self.examined, self.calls, self.errors, round(duration, 6), self.interrupted,
            self.skipped, self.note,
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Run:
    run_id: str
    now: float


def rescored_importance(importance: float, salience: float, base: float, config: ReflectionConfig) -> float:
    """clamp(w_imp·importance + w_sal·salience + w_rec·σ(base), 0, 10), never below the floor for a memory at it.

    `base` is the ACT-R base level B (−inf for a memory never accessed, whose σ is 0).
    """
    new = (
        config.importance_weight * importance
        + config.salience_weight * salience
        + config.recency_weight * recency(base)
    )
    new = min(10.0, max(0.0, new))
    if importance >= config.importance_floor:
        new = max(new, config.importance_floor)
    return new


def reflect(
    agent: Acting,
    *,
    config: ReflectionConfig | None = None,
    reconciler: Reconciler | None = None,
    reasoner: Reasoner | None = None,
    steps: Sequence[str] | None = None,
    should_stop: StopSignal | None = None,
    progress: Progress | None = None,
) -> ReflectionReport:
    """Run reflection for `agent` (every step, or `steps`, in the stated order); see `Reflector`."""
    return Reflector(agent, config, reconciler=reconciler, reasoner=reasoner).reflect(
        steps=steps, should_stop=should_stop, progress=progress
    )


class Reflector:
    """Runs the reflection steps over what `agent` may see and write (see the module docstring).

    Each step is also a method of its own (`merge`, `reconcile`, `link`, `rescore`, `abstract`,
    `prune`), taking the tenant lock like a full run. Every method returns a `ReflectionReport`.
    """

    def __init__(
        self,
        agent: Acting,
        config: ReflectionConfig | None = None,
        *,
        reconciler: Reconciler | None = None,
        reasoner: Reasoner | None = None,
    ) -> None:
        if reconciler is not None and not isinstance(reconciler, Reconciler):
            raise ValidationError("reconciler must have a name and a reconcile(cluster) method (see Reconciler)")
        if reasoner is not None and not isinstance(reasoner, Reasoner):
            raise ValidationError("reasoner must have a name and an abstract(episodes) method (see Reasoner)")
        if config is not None and not isinstance(config, ReflectionConfig):
            raise ValidationError(f"config must be a ReflectionConfig, got {type(config).__name__}")
        self.agent = agent
        self.rt = agent._runtime
        self.who = agent._principal
        self.config = config or ReflectionConfig()
        self.reconciler = reconciler
        self.reasoner = reasoner
        self._decay_off = False
        self._progress: Progress | None = None
        self._steps: dict[str, Callable[[_Run, Callable[[], bool]], _Tally]] = {
            "merge": self._merge,
            "reconcile": self._reconcile,
            "link": self._link,
            "rescore": self._rescore,
            "abstract": self._abstract,
            "prune": self._prune,
        }

    # -- public ------------------------------------------------------------------------------

    def reflect(
        self,
        *,
        steps: Sequence[str] | None = None,
        should_stop: StopSignal | None = None,
        progress: Progress | None = None,
    ) -> ReflectionReport:
        """Run `steps` (default: all) in the stated order; `TransactionError` if a run holds the tenant.

        `progress` hears stage ``reflect:<step>`` with (steps done, steps to run) as each step
        starts and ends, and stage ``<step>`` with (items examined, the step's items when known)."""
        wanted = _check_steps(steps)
        # Archiving by decay is a policy choice: a full run leaves it out unless the policy
        # turns it on; asking for the step by name is asking for it.
        self._decay_off = steps is None and not self.rt.forgetting.archive_by_decay
        todo = [name for name in STEPS if name in wanted]
        with otel.span("engramdb.reflect", tenant=self.who.tenant, agent=self.who.agent_id, steps=todo) as span:
            result = self._reflect(wanted, todo, should_stop, progress)
            otel.set_attributes(
                span, run_id=result.run_id, interrupted=result.interrupted, duration_s=result.duration_s,
                **{f"reflect.{s.step}.changed": s.changed for s in result.steps},
                **{f"reflect.{s.step}.examined": s.examined for s in result.steps},
            )  # fmt: skip
            return result

    def _reflect(
        self, wanted: frozenset[str], todo: list[str], should_stop: StopSignal | None, progress: Progress | None
    ) -> ReflectionReport:
        stop = _stopper(should_stop)
        who = self.who
        t0 = time.perf_counter()
        run = _Run("rf_" + secrets.token_hex(6), self.rt.clock())
        reports: list[StepReport] = []
        stopped_in: str | None = None
        with self.rt.store.tenant_lock(who.tenant, f"{who.agent_id} {run.run_id}"):
            for name in STEPS:
                if name not in wanted:
                    continue
                if stopped_in is None and stop():
                    stopped_in = name
                if stopped_in is not None:
                    reports.append(StepReport(name, interrupted=stopped_in == name, skipped=_INTERRUPTED))
                    continue
                t = time.perf_counter()
                report(progress, f"reflect:{name}", todo.index(name), len(todo))
                self._progress = progress
                report(progress, name, 0, None)
                tally = self._steps[name](run, stop)
                report(progress, name, tally.examined, tally.examined)
                reports.append(tally.freeze(time.perf_counter() - t))
                report(progress, f"reflect:{name}", todo.index(name) + 1, len(todo))
                if tally.interrupted:
                    stopped_in = name
                log.info("reflection %s %s: %s", run.run_id, name, reports[-1])
        rows_share = reads_share = None
        if self.config.measure:
            stats = reading.stats(self.rt, who)
            rows_share, reads_share = stats.reflection_rows_share, stats.reflection_reads_share
        return ReflectionReport(
            run.run_id, who.agent_id, who.tenant, run.now, tuple(reports),
            round(time.perf_counter() - t0, 6), stopped_in is not None, stopped_in, rows_share, reads_share,
        )  # fmt: skip

    def merge(self, *, should_stop: StopSignal | None = None) -> ReflectionReport:
        """Step 1 alone: fold near-duplicates into the oldest of them."""
        return self.reflect(steps=("merge",), should_stop=should_stop)

    def reconcile(self, *, should_stop: StopSignal | None = None) -> ReflectionReport:
        """Step 2 alone: let the reconciler close outdated facts (skipped without one)."""
        return self.reflect(steps=("reconcile",), should_stop=should_stop)

    def link(self, *, should_stop: StopSignal | None = None) -> ReflectionReport:
        """Step 3 alone: ``related`` edges between neighbours."""
        return self.reflect(steps=("link",), should_stop=should_stop)

    def rescore(self, *, should_stop: StopSignal | None = None) -> ReflectionReport:
        """Step 4 alone: renormalise importance from salience and use."""
        return self.reflect(steps=("rescore",), should_stop=should_stop)

    def abstract(self, *, should_stop: StopSignal | None = None) -> ReflectionReport:
        """Step 5 alone: distil episodes into gists (skipped without a reasoner)."""
        return self.reflect(steps=("abstract",), should_stop=should_stop)

    def prune(self, *, should_stop: StopSignal | None = None) -> ReflectionReport:
        """Step 6 alone: archive decayed memories through the guarded prune."""
        return self.reflect(steps=("prune",), should_stop=should_stop)

    # -- scope and plumbing --------------------------------------------------------------------

    def _scope(self, run: _Run) -> Visibility:
        """Visible now, unarchived, and writable: own (and shared unless excluded)."""
        who = self.who
        return Visibility(who.tenant, who.agent_id, who.cap, run.now, own_only=not self.config.include_shared)

    def _fetch(self, run: _Run, ns: Sequence[int]) -> dict[int, Memory]:
        """The in-scope memories among `ns`, read afresh (inside the caller's unit of work, if any)."""
        return self.rt.store.memories.many(self._scope(run), ns) if ns else {}

    def _vectors(self, run: _Run) -> _Vectors | None:
        embedder = self.rt.embedder
        if embedder is None:
            return None
        return _load_vectors(self.rt.store, embedder, self._scope(run), self.config)

    # -- 1. merge ------------------------------------------------------------------------------

    def _merge(self, run: _Run, stop: Callable[[], bool]) -> _Tally:
        tally = _Tally("merge", progress=self._progress)
        vecs = self._vectors(run)
        if vecs is None:
            return self._merge_same_text(run, stop, tally)
        tally.note = vecs.note
        gone: set[int] = set()
        for rows in vecs.groups(lambda r: (vecs.owners[r], vecs.types[r])):
            pairs = _pairs(vecs.mat, rows, self.config.merge_threshold, None, self.config, stop)
            if pairs is None:
                tally.interrupted = True
                return tally
            for a, b in pairs:
                older, newer = vecs.ns[a], vecs.ns[b]
                if older in gone or newer in gone:
                    continue
                stopped, dup = self._try_pair(run, older, newer, stop, tally)
                if stopped:
                    return tally
                if dup is not None:
                    gone.add(dup)
        return tally

    def _try_pair(
        self, run: _Run, older: int, newer: int, stop: Callable[[], bool], tally: _Tally
    ) -> tuple[bool, int | None]:
        """(stopped, the n archived or None): one candidate pair of the merge step, counted."""
        if stop():
            tally.interrupted = True
            return True, None
        tally.tick()
        dup = self._merge_pair(run, older, newer)
        if dup is not None:
            tally.changed += 1
        return False, dup

    def _merge_same_text(self, run: _Run, stop: Callable[[], bool], tally: _Tally) -> _Tally:
        """Without vectors, only the memories whose text is the same but for case, white space and
        punctuation (`content_hash`, as dedup on write without an embedder): per owner and type,
        each is folded into the first of the others it can be (the same rules as a near-duplicate:
        `_merge_pair`)."""
        tally.note = "no memory embedder: only memories of the same text (content_hash) are merged"
        groups: dict[tuple[str, str, str], list[int]] = {}
        for n, digest, owner, mtype in self.rt.store.memories.repeated_content(self._scope(run)):
            groups.setdefault((digest, owner, mtype), []).append(n)
        for ns in groups.values():
            kept: list[int] = []  # the group's survivors so far, oldest first
            for n in ns:
                for i, k in enumerate(kept):
                    stopped, dup = self._try_pair(run, k, n, stop, tally)
                    if stopped:
                        return tally
                    if dup is not None:
                        kept[i] = n if dup == k else k  # the newer survives when only it holds every fact
                        break
                else:
                    kept.append(n)
        return tally

    def _merge_pair(self, run: _Run, older: int, newer: int) -> int | None:
        """Fold one of the pair into the other in one transaction; the n archived, or None."""
        # Most candidates fail the containment test: decide on a plain read first, and take the
        # write lock only to re-check and fold.
        if self._survivor(self._fetch(run, [older, newer]), older, newer) is None:
            return None
        with self.rt.store.atomic():
            # The change sequence first: it is the write lock on PostgreSQL too (its counter row),
            # so the pair read next holds every access committed before (a recall's, say), and
            # the fold's sums of rings and counts lose none.
            stamp = self.rt.store.changes.next(self.who.tenant)
            got = self._fetch(run, [older, newer])
            keep_n = self._survivor(got, older, newer)
            if keep_n is None:
                return None
            dup_n = newer if keep_n == older else older
            self._fold(run, keep_n, got[keep_n], dup_n, got[dup_n], stamp)
            return dup_n

    def _survivor(self, got: dict[int, Memory], older: int, newer: int) -> int | None:
        a, b = got.get(older), got.get(newer)
        if a is None or b is None or not _mergeable(a, b):
            return None
        if self._contains(a, b):
            return older
        if self._contains(b, a):
            return newer
        return None

    def _contains(self, keep: Memory, dup: Memory) -> bool:
        if not self.config.merge_requires_containment:
            return keep is not dup and keep.created_at <= dup.created_at
        # The same statement about the same entities: a merge archives `dup`, and must never
        # archive a fact the survivor does not state (a correction, another number, another person).
        # One entity list may name what the other leaves unsaid (the survivor takes both), but
        # the same words about two different people are two facts.
        kept = {t for t in map(entity_token, keep.entities) if t is not None}
        duped = {t for t in map(entity_token, dup.entities) if t is not None}
        return (kept <= duped or duped <= kept) and same_statement(_text(dup), _text(keep))

    def _fold(self, run: _Run, keep_n: int, keep: Memory, dup_n: int, dup: Memory, stamp: int) -> None:
        store, who = self.rt.store, self.who
        ring, old_count, old_newest, old_oldest = _fold_accesses(keep, dup, self.rt.scoring.ring_size)
        tags = _union(keep.tags, dup.tags)
        refs = keep.refs + tuple(r for r in dup.refs if (r.kind, r.key) not in {(x.kind, x.key) for x in keep.refs})
        lasts = [t for t in (keep.last_access, dup.last_access) if t is not None]
        # The survivor keeps the higher importance, and with it who set it (a caller's, on a tie).
        higher = max((keep, dup), key=lambda m: (m.importance, m.importance_source == "caller"))
        fold = Fold(
            importance=higher.importance, importance_source=higher.importance_source,
            salience=max(keep.salience, dup.salience),
            confidence=max(keep.confidence, dup.confidence), strength=keep.strength + dup.strength,
            access_count=keep.access_count + dup.access_count, ring=ring, old_count=old_count, old_newest=old_newest,
            old_oldest=old_oldest, last_access=max(lasts) if lasts else None,
            confidentiality=max(keep.confidentiality, dup.confidentiality), tags=tags,
            entities=_union(keep.entities, dup.entities), refs=refs, terms=cue_terms(keep.title, keep.content, *tags),
        )  # fmt: skip
        store.memories.fold(keep_n, fold, dup_n, stamp)
        # The duplicate's edges move over (they stay on the archived record too, for provenance);
        # an edge the survivor already has keeps the higher weight.
        store.edges.move(dup_n, keep_n)
        self._edge(run, dup_n, keep_n, EdgeType.REFINES, 1.0)
        store.accesses.append(
            [Touch(keep_n, Channel.REFLECTED), Touch(dup_n, Channel.REFLECTED)], now=run.now, tenant=who.tenant,
            reader=who.agent_id, query=f"merge {dup.id} into {keep.id}", trace_ref=run.run_id,
        )  # fmt: skip

    def _edge(self, run: _Run, src: int, dst: int, etype: EdgeType, weight: float) -> int:
        return self.rt.store.edges.put(
            self.who.tenant, [(src, dst, etype.value, weight)], now=run.now, by=self.who.agent_id, replace=False
        )

    # -- 2. reconcile --------------------------------------------------------------------------

    def _reconcile(self, run: _Run, stop: Callable[[], bool]) -> _Tally:
        tally = _Tally("reconcile", progress=self._progress)
        reconciler = self.reconciler
        if reconciler is None:
            tally.skipped = "no reconciler given (the steps that need a model are opt-in)"
            return tally
        cfg = self.config
        near: dict[int, dict[int, float]] = {}

        def add(a: int, b: int, sim: float) -> None:
            near.setdefault(a, {})[b] = max(sim, near.get(a, {}).get(b, -2.0))
            near.setdefault(b, {})[a] = max(sim, near.get(b, {}).get(a, -2.0))

        vecs = self._vectors(run)
        if vecs is None:
            tally.note = "no memory embedder: clusters come from contradicts edges only"
        else:
            tally.note = vecs.note
            for rows in vecs.groups(lambda r: (vecs.owners[r], vecs.types[r])):
                pairs = _pairs(vecs.mat, rows, cfg.reconcile_threshold, None, cfg, stop, k=cfg.reconcile_max_cluster)
                if pairs is None:
                    tally.interrupted = True
                    return tally
                for a, b, sim in pairs.with_sims():
                    add(vecs.ns[a], vecs.ns[b], sim)
        scope = self._scope(run)
        for s, d in self.rt.store.edges.contradicting(scope):
            add(s, d, 2.0)  # a stated contradiction outranks any cosine
        order = self.rt.store.memories.levels_by_age(scope)
        level = dict(order)
        seen: set[int] = set()
        for anchor, _ in order:
            if anchor in seen or anchor not in near or level[anchor] > cfg.llm_cap:
                continue
            if tally.calls >= cfg.max_reconcile_clusters:
                break
            others = sorted(near[anchor].items(), key=lambda kv: (-kv[1], kv[0]))
            cluster = [anchor] + [n for n, _ in others if n not in seen and level.get(n, 99) <= cfg.llm_cap]
            cluster = cluster[: cfg.reconcile_max_cluster]
            if len(cluster) < 2:
                continue
            seen.update(cluster)
            if stop():
                tally.interrupted = True
                return tally
            tally.tick()
            got = self._fetch(run, cluster)
            members = sorted(got.values(), key=lambda m: (m.created_at, m.id))
            if len(members) < 2:
                continue
            tally.calls += 1
            try:
                verdict = dict(reconciler.reconcile(members))
            except Exception as exc:  # a model call failing must not end the run; it is counted and logged
                tally.errors += 1
                log.warning("reconciler %s failed on a cluster of %d: %s", reconciler.name, len(members), exc)
                continue
            done = self._apply_verdict(run, reconciler, members, verdict)
            if done < 0:
                tally.errors += 1
            else:
                tally.changed += done
        return tally

    def _apply_verdict(self, run: _Run, reconciler: Reconciler, members: list[Memory], verdict: dict[str, str]) -> int:
        """Supersede as the verdict says, all or nothing; how many were superseded, or −1 if rejected."""
        ids = {m.id for m in members}
        if any(
            not isinstance(old, str) or not isinstance(new, str) or old not in ids or new not in ids
            or old == new or new in verdict
            for old, new in verdict.items()
        ):  # fmt: skip
            log.warning("reconciler %s gave an unusable verdict %r; nothing changed", reconciler.name, verdict)
            return -1
        if not verdict:
            return 0
        store, who = self.rt.store, self.who
        try:
            with store.atomic():
                for old, new in sorted(verdict.items()):
                    # the same rules as a deliberate supersede: validity closed, `refines` edge, levels travel
                    writing.supersede(self.rt, who, old, new)
                keys = store.memories.visible_ids(
                    who.visibility(include_archived=True), sorted({*verdict, *verdict.values()})
                )
                store.accesses.append(
                    [Touch(keys[i], Channel.REFLECTED) for i in sorted({*verdict, *verdict.values()})],
                    now=run.now, tenant=who.tenant, reader=who.agent_id,
                    query=f"reconcile by {reconciler.name}: "
                    + ", ".join(f"{old} superseded by {new}" for old, new in sorted(verdict.items())),
                    trace_ref=run.run_id,
                )  # fmt: skip
        except (ValidationError, NotFound) as exc:  # a verdict the store refuses changes nothing
            log.warning("reconciler %s verdict could not be applied: %s", reconciler.name, exc)
            return -1
        return len(verdict)

    # -- 3. link -------------------------------------------------------------------------------

    def _link(self, run: _Run, stop: Callable[[], bool]) -> _Tally:
        tally = _Tally("link", progress=self._progress)
        vecs = self._vectors(run)
        if vecs is None:
            tally.skipped = "no memory embedder: linking neighbours needs vectors"
            return tally
        tally.note = vecs.note
        tally.total = len(vecs.ns)
        cfg = self.config
        linked = self.rt.store.edges.pairs(self.who.tenant)
        new_edges: dict[int, int] = {}
        pending: list[tuple[int, list[tuple[int, float]]]] = []
        for rows in vecs.groups(lambda r: (vecs.owners[r], vecs.levels[r])):
            # No upper bound: a near-duplicate the merge step left alone (another statement,
            # a correction, another number) is linked to its neighbour instead.
            pairs = _pairs(vecs.mat, rows, cfg.link_threshold, None, cfg, stop)
            if pairs is None:
                tally.interrupted = True
                break
            near = pairs.both_ways()
            for r in rows:
                if stop():
                    tally.interrupted = True
                    break
                n = vecs.ns[r]
                tally.tick()
                picks: list[tuple[int, float]] = []
                for row, sim in near(r):
                    if new_edges.get(n, 0) >= cfg.max_new_edges:
                        break
                    other = vecs.ns[row]
                    key = (min(n, other), max(n, other))
                    if new_edges.get(other, 0) >= cfg.max_new_edges or key in linked:
                        continue
                    if sim >= cfg.merge_threshold and self._survivor(self._fetch(run, [n, other]), *key) is not None:
                        continue  # the merge step's to fold, not a neighbour
                    linked.add(key)
                    new_edges[n] = new_edges.get(n, 0) + 1
                    new_edges[other] = new_edges.get(other, 0) + 1
                    picks.append((other, round(sim, 4)))
                if picks:
                    pending.append((n, picks))
                if len(pending) >= cfg.batch:
                    tally.changed += self._write_links(run, pending)
                    pending = []
            if tally.interrupted:
                break
        tally.changed += self._write_links(run, pending)
        return tally

    def _write_links(self, run: _Run, pending: list[tuple[int, list[tuple[int, float]]]]) -> int:
        if not pending:
            return 0
        added = 0
        store = self.rt.store
        with store.atomic():
            ends = sorted({x for n, picks in pending for x in (n, *(o for o, _ in picks))})
            alive = set(store.memories.visible_keys(self._scope(run), keys=ends))
            for n, picks in pending:
                for other, weight in picks:
                    if n in alive and other in alive:
                        added += self._edge(run, n, other, EdgeType.RELATED, min(1.0, max(weight, 1e-4)))
        return added

    # -- 4. rescore ----------------------------------------------------------------------------

    def _rescore(self, run: _Run, stop: Callable[[], bool]) -> _Tally:
        tally = _Tally("rescore", progress=self._progress)
        scoring = self.rt.scoring
        store = self.rt.store
        scope = self._scope(run)
        after = -1
        while not tally.interrupted:
            with store.atomic():
                rows = store.memories.scan(scope, after, self.config.batch)
                updates: list[tuple[float, int]] = []
                for n, imp, sal, ring, old_count, old_newest, old_oldest in rows:
                    if stop():
                        tally.interrupted = True
                        break
                    tally.tick()
                    after = n
                    b = base_level(
                        _times(ring), run.now, scoring.decay, old_count=old_count, old_newest=old_newest,
                        old_oldest=old_oldest, min_age=scoring.min_age,
                    )  # fmt: skip
                    new = rescored_importance(imp, sal, b, self.config)
                    if not math.isclose(new, imp, rel_tol=0.0, abs_tol=1e-9):
                        updates.append((new, n))
                if updates:
                    store.memories.set_importance(updates, store.changes.next(self.who.tenant))
                    tally.changed += len(updates)
            if len(rows) < self.config.batch:
                break
        return tally

    # -- 5. abstract ---------------------------------------------------------------------------

    def _abstract(self, run: _Run, stop: Callable[[], bool]) -> _Tally:
        tally = _Tally("abstract", progress=self._progress)
        reasoner = self.reasoner
        if reasoner is None:
            tally.skipped = "no reasoner given (the steps that need a model are opt-in)"
            return tally
        cfg = self.config
        rows = self.rt.store.memories.undistilled_episodes(self._scope(run), cfg.llm_cap)
        batches: list[list[int]] = []
        by_owner: dict[str, list[int]] = {}
        for n, owner in rows:
            by_owner.setdefault(owner, []).append(int(n))
        for owner in sorted(by_owner):
            ns = by_owner[owner]
            for i in range(0, len(ns), cfg.gist_max_episodes):
                chunk = ns[i : i + cfg.gist_max_episodes]
                if len(chunk) >= cfg.gist_min_episodes:
                    batches.append(chunk)
        for chunk in batches[: cfg.max_gists]:
            if stop():  # never start a model call once asked to stop
                tally.interrupted = True
                break
            tally.tick()
            got = self._fetch(run, chunk)
            ns = [n for n in chunk if n in got]
            episodes = [got[n] for n in ns]
            if len(episodes) < cfg.gist_min_episodes:
                continue
            tally.calls += 1
            try:
                gist = reasoner.abstract([_text(m) for m in episodes])
            except Exception as exc:  # a model call failing must not end the run; it is counted and logged
                tally.errors += 1
                log.warning("reasoner %s failed on %d episodes: %s", reasoner.name, len(episodes), exc)
                continue
            if gist is None:
                continue
            if not isinstance(gist, str) or not gist.strip():
                tally.errors += 1
                log.warning("reasoner %s returned no usable gist (%r)", reasoner.name, gist)
                continue
            # The call may have taken a while: what it was given is committed even if a stop came in.
            if self._write_gist(run, reasoner, ns, gist):
                tally.changed += 1
        return tally

    def _write_gist(self, run: _Run, reasoner: Reasoner, ns: list[int], gist: str) -> bool:
        store, who = self.rt.store, self.who
        try:
            with store.atomic():
                sources = self._fetch(run, ns)  # afresh: an episode may have gone meanwhile
                if not sources:
                    return False
                src = list(sources.values())
                memory = writing.remember_many(
                    self.rt,
                    who,
                    [
                        {
                            "content": gist.strip(),
                            "type": MemoryType.REFLECTION,
                            "importance": max(m.importance for m in src),
                            "salience": max(m.salience for m in src),
                            "confidence": min(m.confidence for m in src),
                            "tags": _union(*(m.tags for m in src)),
                            "entities": _union(*(m.entities for m in src)),
                            "shared": src[0].owner == "",
                            # confidentiality travels: the gist is at least as confidential as any source
                            "confidentiality": int(max(m.confidentiality for m in src)),
                        }
                    ],
                    dedup=False,
                )[0]
                gist_n = store.memories.key_of(who.tenant, memory.id)
                assert gist_n is not None
                for n in sorted(sources):
                    self._edge(run, gist_n, n, EdgeType.DERIVED_FROM, 1.0)
                store.accesses.append(
                    [Touch(n, Channel.REFLECTED) for n in sorted(sources)], now=run.now, tenant=who.tenant,
                    reader=who.agent_id, query=f"abstract by {reasoner.name} into {memory.id}", trace_ref=run.run_id,
                )  # fmt: skip
        except Forgotten:
            log.info("reasoner %s restated forgotten content; not stored", reasoner.name)
            return False
        return True

    # -- 6. prune ------------------------------------------------------------------------------

    def _prune(self, run: _Run, stop: Callable[[], bool]) -> _Tally:
        tally = _Tally("prune", progress=self._progress)
        if self._decay_off:
            tally.skipped = (
                "archiving by decay is off (ForgettingPolicy(archive_by_decay=True) turns it on for full runs; "
                "reflect(steps=[..., 'prune']) or Agent.prune() archives when asked)"
            )
            return tally
        pruned = writing.prune(self.rt, self.who, include_shared=self.config.include_shared)
        tally.note = "Agent.prune (one transaction; not interruptible inside)"
        tally.changed = tally.examined = len(pruned)
        return tally

"""The extraction worker: queued conversations in, facts out, nothing lost, nothing rewritten silently.

``remember(messages=[…])`` on an engine with extraction on stores the turns and, in the same
transaction, one job naming them (`engramdb.storage.ports.ExtractionJobs`); the caller's call
never waits for a model. A worker — `ExtractionWorker`, run as a thread of the engine
(``DynamicMemoryEngine(extractor=…)``) or as its own process (``engramdb worker``) — then:

1. **claims** due jobs (a lease, default 120 s; a claim counts an attempt);
2. reads the job's turns as the agent that stored them, keeps those at or below `llm_cap` (the
   others are never sent), and the known facts most related to them (a dry recall: same owner,
   valid now, at or below `llm_cap`; it touches nothing);
3. asks the `Extractor` (no transaction is open meanwhile);
4. checks the answer (`engramdb.llm.protocol.check_decisions`): an id outside its input, or any
   other broken rule, rejects the whole answer;
5. applies it in **one transaction that also marks the job done**: each new fact is an ``info``
   memory with ``derived_from`` edges to its source turns, at least as confidential as the most
   confidential of them, in their session and shared or private as they are; an update
   supersedes (validity closed at the source turn's time, ``refines`` edge), a delete closes
   validity, nothing is overwritten or erased. Every decision is on the access stream (channel
   ``extracted``: the extractor's name — model and prompt version — the job, the input ids and
   the verdict) and in the job's record (ids only), from which `revert` undoes it.

A failed, timed-out or malformed answer leaves the turns stored and the job pending, retried after
``retry_base · 2^(attempts−1)`` seconds (at most `retry_cap`), until `max_attempts`: then it is
``failed``, listed with its last error by `pending`, and `requeue` tries it again. A worker
killed at any point loses nothing: before the transaction commits, nothing of the job's answer
is stored and its lease runs out for another worker; after, the job is done. Finishing checks
the claim is still the worker's, so a job's facts are written once even when a slow worker's
lease ran out and another took the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engramdb.errors import Forgotten, NotFound, ValidationError
from engramdb.llm.protocol import Decision, Extractor, RejectedAnswer, check_decisions
from engramdb.memories import writing
from engramdb.memories.model import Channel, Confidentiality, EdgeType, Memory, MemoryType, Principal, Visibility
from engramdb.memories.runtime import Runtime
from engramdb.memories.text import id_tokens
from engramdb.storage.ports import Job, Touch

__all__ = ["ExtractionWorker", "WorkReport", "revert"]

log = logging.getLogger(__name__)

#: the most characters of the turns' text used as the query for related known facts
_QUERY_CHARS = 2000
#: metadata keys of a turn not carried to its facts
_TURN_ONLY = frozenset({"role"})


class _Lost(Exception):
    """The job's claim was taken over while this worker ran it: roll its answer back."""


@dataclass(slots=True)
class WorkReport:
    """What a worker did: jobs claimed, done, retried later, failed for good, and facts written."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    failed: int = 0
    lost: int = 0
    added: int = 0
    updated: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)

    def merge(self, other: WorkReport) -> None:
        for name in ("claimed", "done", "retried", "failed", "lost", "added", "updated", "deleted"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors.extend(other.errors)


class ExtractionWorker:
    """Runs queued extraction jobs with `extractor` (see the module docstring).

    Args:
        rt: the engine's runtime (engine-internal: ``engine.extraction_worker(...)`` passes it).
        extractor: an `engramdb.llm.protocol.Extractor` (e.g. `engramdb.llm.LLMExtractor`).
        tenant: only this tenant's jobs (None: every tenant's).
        llm_cap: the most confidential turn or fact ever sent to the extractor (default INTERNAL).
        known_k: how many related known facts the extractor is shown.
        lease: seconds a claimed job stays this worker's before another may take it.
        max_attempts: attempts before a job is ``failed``.
        retry_base / retry_cap: the backoff between attempts, in seconds.
        batch: jobs claimed at once.
        worker_id: names this worker in claims (default: host, process and a random part).
    """

    def __init__(
        self,
        rt: Runtime,
        extractor: Extractor,
        *,
        tenant: str | None = None,
        llm_cap: Confidentiality = Confidentiality.INTERNAL,
        known_k: int = 8,
        lease: float = 120.0,
        max_attempts: int = 8,
        retry_base: float = 5.0,
        retry_cap: float = 600.0,
        batch: int = 4,
        worker_id: str | None = None,
    ) -> None:
        if not isinstance(extractor, Extractor):
            raise ValidationError(
                f"extractor must have a name and an extract(turns, known) method, got {type(extractor).__name__}"
            )
        if not isinstance(llm_cap, Confidentiality):
            llm_cap = writing.check_level(llm_cap)
        for label, value, low in (("known_k", known_k, 0), ("max_attempts", max_attempts, 1), ("batch", batch, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValidationError(f"{label} must be an integer of at least {low}, got {value!r}")
        for label, secs in (("lease", lease), ("retry_base", retry_base), ("retry_cap", retry_cap)):
            if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not secs > 0:
                raise ValidationError(f"{label} must be a positive number of seconds, got {secs!r}")
        self.rt, self.extractor, self.tenant, self.llm_cap = rt, extractor, tenant, llm_cap
        self.known_k, self.lease, self.max_attempts = known_k, float(lease), max_attempts
        self.retry_base, self.retry_cap, self.batch = float(retry_base), float(retry_cap), batch
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{id_tokens(time.time(), 1)[0][-6:]}"
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()

    # -- running --------------------------------------------------------------------------------

    def run_once(self) -> WorkReport:
        """Claim up to `batch` due jobs and run them; what happened."""
        report = WorkReport()
        store = self.rt.store
        with store.atomic():
            jobs = store.jobs.claim(
                worker=self.worker_id, now=self.rt.clock(), lease=self.lease, limit=self.batch, tenant=self.tenant
            )
        report.claimed = len(jobs)
        for job in jobs:
            self._run(job, report)
        return report

    def drain(self, *, should_stop: Callable[[], bool] | None = None) -> WorkReport:
        """Run due jobs until none is left (retries that are not yet due stay queued)."""
        total = WorkReport()
        while should_stop is None or not should_stop():
            one = self.run_once()
            total.merge(one)
            if one.claimed == 0:
                break
        return total

    def start(self, *, idle: float = 1.0) -> None:
        """Run in a daemon thread, looking for due jobs every `idle` seconds (sooner after `wake`)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    self.drain(should_stop=self._stop.is_set)
                except Exception:  # a database failure must not kill the thread; the job stays queued
                    log.exception("extraction worker %s: a run failed; trying again", self.worker_id)
                self._wake.wait(idle)
                self._wake.clear()

        self._thread = threading.Thread(target=loop, name=f"engramdb-extract-{self.worker_id}", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Tell a started worker that work was queued."""
        self._wake.set()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Stop a started worker after the job it is running."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # -- one job --------------------------------------------------------------------------------

    def _run(self, job: Job, report: WorkReport) -> None:
        rt = self.rt
        who = Principal(job.tenant, job.agent)
        try:
            turns = self._turns(job, who)
            sendable = [t for t in turns if t.confidentiality <= self.llm_cap]
            known = self._known(who, sendable) if sendable else []
            raw: Sequence[Decision] = self.extractor.extract(sendable, known) if sendable else []
            decisions = check_decisions(
                raw, [t.id for t in sendable], [k.id for k in known], max_chars=rt.limits.content_chars
            )
        except Exception as exc:  # the model failed, timed out, answered badly or broke a rule
            self._retry(job, exc, report)
            return
        try:
            applied = self._apply(job, who, sendable, known, decisions, withheld=len(turns) - len(sendable))
        except _Lost:
            report.lost += 1
            return
        report.done += 1
        for d in applied:
            op = d.get("op")
            if op == "add":
                report.added += 1
            elif op == "update":
                report.updated += 1
            elif op == "delete":
                report.deleted += 1

    def _retry(self, job: Job, exc: Exception, report: WorkReport) -> None:
        now = self.rt.clock()
        kind = "rejected" if isinstance(exc, RejectedAnswer) else type(exc).__name__
        error = f"{kind}: {exc}"[:500]
        give_up = job.attempts >= self.max_attempts
        wait = min(self.retry_cap, self.retry_base * 2 ** max(job.attempts - 1, 0))
        held = self.rt.store.jobs.release(
            job.tenant, job.job_id, self.worker_id, error=error, retry_at=now + wait, failed=give_up, now=now
        )
        if not held:
            report.lost += 1
        elif give_up:
            report.failed += 1
        else:
            report.retried += 1
        report.errors.append(f"{job.job_id}: {error}")
        log.warning("extraction job %s attempt %d: %s", job.job_id, job.attempts, error)

    def _turns(self, job: Job, who: Principal) -> list[Memory]:
        """The job's turns still stored (a forgotten one is gone), oldest first."""
        vis = Visibility(who.tenant, who.agent_id, Confidentiality.RESTRICTED)
        store = self.rt.store
        keys = store.memories.visible_ids(vis, list(job.memory_ids))
        got = store.memories.many(vis, list(keys.values())) if keys else {}
        return sorted(got.values(), key=lambda m: (m.created_at, m.id))

    def _known(self, who: Principal, turns: Sequence[Memory]) -> list[Memory]:
        """The known facts most related to `turns`: same owner, valid now, at most `llm_cap`."""
        if self.known_k == 0:
            return []
        owner = turns[0].owner
        text = "\n".join(t.content for t in turns)[:_QUERY_CHARS]
        vis = Visibility(who.tenant, who.agent_id, self.llm_cap, self.rt.clock(), own_only=owner != "")
        recall, _ = self.rt.recaller.run(
            text, vis=vis, k=self.known_k * 2, hops=0, types=frozenset({MemoryType.INFO}), channel=Channel.RECALLED,
            trace_ref=None, dry_run=True, when=None,
        )  # fmt: skip
        # Shared turns are reconciled with shared facts only (a private fact is not the team's).
        return [h.memory for h in recall.hits if h.memory.owner == owner][: self.known_k]

    def _apply(
        self,
        job: Job,
        who: Principal,
        turns: Sequence[Memory],
        known: Sequence[Memory],
        decisions: Sequence[Decision],
        *,
        withheld: int,
    ) -> list[dict[str, Any]]:
        rt, store, name = self.rt, self.rt.store, self.extractor.name
        by_id = {t.id: t for t in turns}
        now = rt.clock()
        record: list[dict[str, Any]] = [
            {"op": "call", "by": name, "turns": [t.id for t in turns], "known": [k.id for k in known],
             "withheld": withheld, "at": now}
        ]  # fmt: skip
        try:
            with store.atomic():
                for d in decisions:
                    done = self._decide(job, who, by_id, d, name)
                    if done is not None:
                        record.append(done)
                if not store.jobs.finish(job.tenant, job.job_id, self.worker_id, rt.clock(), record):
                    raise _Lost
        except _Lost:
            log.info("extraction job %s was taken over by another worker; this answer is dropped", job.job_id)
            raise
        return record[1:]

    def _decide(
        self, job: Job, who: Principal, turns: Mapping[str, Memory], d: Decision, name: str
    ) -> dict[str, Any] | None:
        rt, store = self.rt, self.rt.store
        sources = [turns[s] for s in d.sources]
        if d.op == "noop":
            return {"op": "noop", "memory": d.target, "sources": list(d.sources), "by": name}
        said_at = max(s.created_at for s in sources)
        entry: dict[str, Any] = {"op": d.op, "sources": list(d.sources), "by": name}
        if d.op == "delete":
            assert d.target is not None
            target = writing.visible(rt, who, d.target, archived=False)
            until = max(said_at, target.memory.valid_from or said_at)
            store.memories.close_validity(who.tenant, d.target, until, store.changes.next(who.tenant))
            self._log(job, who, [target.key, *self._keys(who, d.sources)], f"delete {d.target} (valid until the "
                      f"turn) from {', '.join(d.sources)}", name)  # fmt: skip
            return {**entry, "memory": d.target, "until": until}
        assert d.text is not None
        try:
            fact = self._add(who, sources, d.text, said_at, name)
        except Forgotten:  # the user forgot this fact deliberately: an extractor does not bring it back
            return {"op": "refused", "sources": list(d.sources), "by": name, "why": "forgotten"}
        entry["memory"] = fact.id
        if d.op == "update":
            assert d.target is not None
            if fact.id == d.target:  # the "new" statement is the known fact restated
                return {"op": "noop", "memory": d.target, "sources": list(d.sources), "by": name}
            try:
                writing.supersede(rt, who, d.target, fact.id)
            except ValidationError as exc:  # e.g. the new fact would start before the old one did
                log.info("extraction job %s: %s; %s kept as a new fact", job.job_id, exc, fact.id)
                entry["op"] = "add"
            else:
                entry["replaces"] = d.target
        verdict = f"update {d.target} -> {fact.id}" if "replaces" in entry else f"add {fact.id}"
        touched = [fact.id, *d.sources, *([d.target] if "replaces" in entry and d.target else [])]
        self._log(job, who, self._keys(who, touched), f"{verdict} from {', '.join(d.sources)}", name)
        return entry

    def _add(self, who: Principal, sources: Sequence[Memory], text: str, said_at: float, name: str) -> Memory:
        rt, store = self.rt, self.rt.store
        level = max(s.confidentiality for s in sources)
        sessions = {s.session for s in sources}
        common = dict(sources[0].metadata)
        for s in sources[1:]:
            common = {k: v for k, v in common.items() if s.metadata.get(k, _MISSING) == v}
        meta = {k: v for k, v in common.items() if k not in _TURN_ONLY}
        meta["extracted_by"] = name
        entities = list(dict.fromkeys(e for s in sources for e in s.entities))
        fact = writing.remember_many(
            rt, who,
            [{"content": text, "type": MemoryType.INFO, "entities": entities or None, "confidentiality": level,
              "session": sessions.pop() if len(sessions) == 1 else None, "metadata": meta,
              "shared": sources[0].owner == "", "created_at": said_at, "valid_from": said_at}],
            dedup=True,
        )[0]  # fmt: skip
        keys = store.memories.visible_ids(Visibility(who.tenant, who.agent_id), [fact.id, *(s.id for s in sources)])
        edges = [(keys[fact.id], keys[s.id], EdgeType.DERIVED_FROM.value, 1.0) for s in sources if s.id in keys]
        if fact.id in keys and edges:
            store.edges.put(who.tenant, edges, now=rt.clock(), by=who.agent_id, replace=False)
            store.memories.raise_level([keys[fact.id]], level, store.changes.next(who.tenant))
        return fact

    def _keys(self, who: Principal, ids: Sequence[str]) -> list[int]:
        vis = Visibility(who.tenant, who.agent_id, include_archived=True)
        found = self.rt.store.memories.visible_ids(vis, list(dict.fromkeys(ids)))
        return list(found.values())

    def _log(self, job: Job, who: Principal, keys: Sequence[int], verdict: str, name: str) -> None:
        self.rt.store.accesses.append(
            [Touch(k, Channel.EXTRACTED) for k in dict.fromkeys(keys)], now=self.rt.clock(), tenant=who.tenant,
            reader=who.agent_id, query=f"{name}: {verdict}", trace_ref=job.job_id,
        )  # fmt: skip


_MISSING = object()


def revert(rt: Runtime, tenant: str, job_id: str, *, reason: str = "extraction reverted") -> int:
    """Undo what job `job_id` applied, newest first, in one transaction: its new facts are
    forgotten (tombstone and erasure, as `forget`), what it superseded or closed is valid again.
    How many decisions were undone (0 for a job already reverted or with nothing applied);
    `NotFound` for an unknown job."""
    store = rt.store
    job = store.jobs.get(tenant, job_id)
    if job is None:
        raise NotFound(f"no extraction job {job_id!r} in tenant {tenant!r}")
    who = Principal(tenant, job.agent)
    undone = 0
    record = [dict(d) for d in job.decisions]
    with store.atomic():
        for d in reversed(record):
            if d.get("reverted") or d.get("op") not in ("add", "update", "delete"):
                continue
            old = d.get("replaces") if d["op"] == "update" else d.get("memory") if d["op"] == "delete" else None
            if old is not None:
                with contextlib.suppress(NotFound):
                    found = writing.visible(rt, who, old)
                    store.memories.close_validity(tenant, old, None, store.changes.next(tenant))
                    store.accesses.append(
                        [Touch(found.key, Channel.EXTRACTED)], now=rt.clock(), tenant=tenant, reader=job.agent,
                        query=f"revert: {old} valid again ({reason})", trace_ref=job_id,
                    )  # fmt: skip
            if d["op"] in ("add", "update"):
                with contextlib.suppress(NotFound):
                    writing.forget(rt, who, d["memory"], reason=reason)
            d["reverted"] = rt.clock()
            undone += 1
        if undone:
            store.jobs.set_decisions(tenant, job_id, record)
    return undone

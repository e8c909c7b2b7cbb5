"""LoCoMo evidence recall: engramdb beside real peers and simple baselines, in one run.

Each LoCoMo conversation is its own haystack: every dialogue turn is a memory (``"speaker: text"``,
timestamped at its session's date), every question with evidence a query; a system ranks the turns
and recall@k counts the gold evidence turns in its top k (see benchmarks/locomo.py for the data,
the metrics and how malformed evidence ids are normalised). Systems:

- ``grep``: the cheapest memory that persists — the turns as lines of a markdown notes file, one
  ``## Session n (date)`` heading per session; a line's score is how many of the query's keywords
  (``engramdb.retrieval.keywords``: stopwords dropped) it contains, case-insensitively as whole
  words (``grep -i -w``); ties go to the later line; lines with no keyword are not returned.
- ``naqsha``: naqsha 0.2.0's ``MemoryRetriever.retrieve`` over a table of the turns (its own venv),
  with a 10,000-token budget so that it returns ≥ 20 rows; the ranking is the order of the rows it
  returns. It only ever reads the newest 512 rows of a table (its design), so the oldest turns of the
  longer conversations can never be found.
- ``nooa`` / ``nooa-vectors``: nooa-memory 0.0.10's ``recall`` (read-only ``touch=False``, k = 20,
  its clock fixed after the last session) with its own hashing embedder, and with engramdb's
  default embedder's vectors plugged in. Every turn is stored (``dedup=False``): nooa's 0.92
  dedup threshold was set for its own embedder, and static-embedding cosines of distinct turns
  reach 0.95.
- ``fts5`` / ``fts5-porter``: plain SQLite FTS5 BM25 (``unicode61``, and ``porter unicode61``);
  the query is the OR of the question's keywords, stopwords dropped.
- ``engramdb``: ``agent.explain(question, k=20)`` with the default embedder and scoring. Turns are
  remembered session by session with the clock (``engramdb.testing.FixedClock``) at the session's
  date, and consecutive turns of a session are linked ``precedes`` — what an agent writing down a
  dialogue would do — so spreading activation has edges; the queries run at one day after the last
  session. ``explain(query)`` is a dry run that logs and reinforces nothing, so the queries do not
  change each other's rankings (``recall`` would make every hit of one query more recent for the
  next).
- ``engramdb-hops2``: the same with ``hops=2`` (recall's default is 1).
- Ablations of engramdb's scorer, on the same stores: ``rel`` only (every other weight 0, no
  spreading), ``+rec``, ``+imp``, ``+lifts`` (the dates, entities and temporal context the query
  names or implies; each step adds its terms at their default weights, with spreading added it is
  the default), then the default without one lift each (``no-when``, ``no-entity``, ``no-ctx``),
  ``lexical`` (no embedder: rel from cue overlap and BM25), ``vector`` (rel = cosine alone, λ = 1,
  μ = 0; the lexical channel's candidates still join the pool — no engine knob switches that
  channel off — but are judged by their cosine like the rest; the other terms stay at their
  defaults).

Usage (from the repository root; peers need ``bash benchmarks/peers/setup.sh`` once)::

    .venv/bin/python benchmarks/bench_locomo.py [--data locomo10.json] [--conversations 0-9]
                                                [--systems grep,fts5,engramdb,...] [--no-plots] [--parallel]

Writes benchmarks/results/locomo.md, locomo.json and PNG plots (with matplotlib, the ``bench``
extra).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import locomo
import provenance
from engramdb import DynamicMemoryEngine
from engramdb.memories.scoring import ScoringConfig
from engramdb.retrieval.keywords import keywords
from engramdb.retrieval.results import Hit
from engramdb.testing import FixedClock
from locomo import CATEGORY_NAMES, Conversation

HERE = Path(__file__).resolve().parent
RESULTS = provenance.OUT
K = 20
NAQSHA_BUDGET = 10_000  # tokens: ≥ 20 of its wrapped rows (≈ 140 characters of markers each) fit
QUERY_DELAY = 86_400.0  # queries run one day after the last session
#: the LoCoMo paper's (Maharana et al. 2024) retrieval over dialogue turns with DRAGON, as issue #6 quotes it
DRAGON = {"r@5": 0.567, "r@10": 0.662}

QUERY_GAP = 60.0  # seconds between two questions (recall reinforces its hits at the clock's time)

PEER_SYSTEMS = ("naqsha", "nooa", "nooa-vectors")
ENGRAM_SYSTEMS = (
    "engramdb",
    "engramdb-explain",
    "engramdb-rich",
    "engramdb-rich-hops2",
    "engramdb-entities",
    "engramdb-rel",
    "engramdb-no-when",
    "engramdb-no-dated",
    "engramdb-no-expansion",
    "engramdb-no-entity",
    "engramdb-no-ctx",
    "engramdb-no-rec",
    "engramdb-no-names",
    "engramdb-no-speaker",
    "engramdb-no-sequence",
    "engramdb-no-spread",
    "engramdb-rank-fusion",
    "engramdb-lexical",
    "engramdb-vector",
)
BASELINES = ("grep", "fts5", "fts5-porter", "fts5-porter-ctx", "dense")
SYSTEMS = ("grep", *PEER_SYSTEMS, "fts5", "fts5-porter", "fts5-porter-ctx", "dense", *ENGRAM_SYSTEMS)
#: what runs without --systems: everything but naqsha (0.15 R@10 by design: it reads the newest 512 rows)
DEFAULT_SYSTEMS = tuple(s for s in SYSTEMS if s != "naqsha")
#: the systems side by side (bold marks the best of these; ablations and variants are extra rows)
COMPARED = ("grep", *PEER_SYSTEMS, "fts5", "fts5-porter", "fts5-porter-ctx", "dense", "engramdb")
#: what --spacings reruns at each extra turn spacing
SPACING_SYSTEMS = ("fts5-porter-ctx", "engramdb", "engramdb-no-ctx")
LABELS = {
    "grep": "markdown notes + grep",
    "naqsha": "naqsha 0.2.0 MemoryRetriever",
    "nooa": "nooa-memory 0.0.10 (own hashing embedder)",
    "nooa-vectors": "nooa-memory 0.0.10 (engramdb's vectors)",
    "fts5": "SQLite FTS5 BM25",
    "fts5-porter": "SQLite FTS5 BM25 + Porter",
    "fts5-porter-ctx": "FTS5 BM25 + Porter + temporal context (timestamps)",
    "dense": "dense only (engramdb's static embedder, cosine)",
    "engramdb": "**engramdb** (plain API)",
    "engramdb-explain": "engramdb, plain API, explain() dry runs (no reinforcement)",
    "engramdb-rich": "engramdb, richer inputs (speaker entities + precedes links)",
    "engramdb-rich-hops2": "engramdb, richer inputs, recall(hops=2)",
    "engramdb-entities": "engramdb, richer inputs without the links (speaker entities only)",
    "engramdb-rel": "engramdb ablation: rel only",
    "engramdb-no-when": "engramdb ablation: without when",
    "engramdb-no-dated": "engramdb ablation: without the when-question lift (w_dated = 0)",
    "engramdb-no-expansion": "engramdb ablation: without document expansion (bm25_prev = 0)",
    "engramdb-no-entity": "engramdb ablation: without the entity lift (w_entity = 0)",
    "engramdb-no-ctx": "engramdb ablation: without temporal context",
    "engramdb-no-rec": "engramdb ablation: without recency",
    "engramdb-no-names": "engramdb ablation: without name focus (names the query writes)",
    "engramdb-no-speaker": "engramdb ablation: without the speaker prefix as entity (entities=[])",
    "engramdb-no-sequence": "engramdb ablation: without implicit episodes (sequence_window = 0)",
    "engramdb-no-spread": "engramdb ablation: without spreading (hops = 0)",
    "engramdb-rank-fusion": "engramdb ablation: rank fusion instead of min-max",
    "engramdb-lexical": "engramdb ablation: lexical only (no embedder)",
    "engramdb-vector": "engramdb ablation: vector only (λ = 1, μ = 0)",
}


@dataclass
class Outcome:
    """One system's results: per question (category, metrics) and recall@1..K, per-query seconds, notes."""

    system: str
    rows: list[tuple[int, dict[str, float]]] = field(default_factory=list)
    curves: list[tuple[int, list[float]]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    skipped: str | None = None

    def add(self, conv: Conversation, rankings: Sequence[Sequence[int]]) -> None:
        for q, r in zip(conv.questions, rankings, strict=True):
            self.rows.append((q.category, locomo.score_question(r, q, conv.turns)))
            self.curves.append((q.category, [locomo.recall_at(r, q.gold, k) for k in range(1, K + 1)]))

    def curve(self) -> list[float]:
        """recall@1..K over categories 1-4."""
        sel = [c for cat, c in self.curves if cat != 5]
        return [sum(c[i] for c in sel) / len(sel) for i in range(K)] if sel else []


# -- grep over a markdown notes file -----------------------------------------------------------


def notes_markdown(conv: Conversation) -> tuple[str, list[int | None]]:
    """The notes file an agent would keep, and the turn position of each of its lines (None: not a turn)."""
    lines: list[str] = [f"# Notes: {conv.speakers[0]} and {conv.speakers[1]}"]
    owner: list[int | None] = [None]
    session = 0
    for t in conv.turns:
        if t.session != session:
            session = t.session
            when = time.strftime("%d %B %Y, %H:%M", time.gmtime(conv.session_times[session]))
            lines += ["", f"## Session {session} ({when})"]
            owner += [None, None]
        lines.append("- " + " ".join(t.content.split()))  # one line per turn, as a note-taker writes it
        owner.append(t.position)
    return "\n".join(lines) + "\n", owner


def grep_index(text: str, owner: Sequence[int | None]) -> list[tuple[frozenset[str], int]]:
    """Each turn line's lower-cased word tokens: a keyword matches a line under ``grep -i -w`` exactly
    when it is one of them (keywords are single word tokens themselves)."""
    lines = text.split("\n")  # the file ends with a newline: one more (empty) piece than owners
    return [
        (frozenset(re.findall(r"\w+", line.lower())), pos)
        for line, pos in zip(lines, owner, strict=False)
        if pos is not None
    ]


def grep_rank(index: Sequence[tuple[frozenset[str], int]], query: str, k: int) -> list[int]:
    """Turn lines ranked by how many distinct keywords they match; later lines first on ties; lines
    matching no keyword are not returned (grep prints only matching lines)."""
    kws = keywords(query)
    scored = sorted(
        ((-hits, -i, pos) for i, (words, pos) in enumerate(index) if (hits := sum(1 for w in kws if w in words))),
    )
    return [pos for _, _, pos in scored[:k]]


def run_grep(conversations: Sequence[Conversation], workdir: Path) -> Outcome:
    out = Outcome("grep")
    for conv in conversations:
        path = workdir / f"{conv.sample_id}.md"
        text, owner = notes_markdown(conv)
        path.write_text(text, encoding="utf-8")
        # Tokenised once per file (grep itself rescans a cached file in microseconds; each call also
        # costs a process start, ~1 ms, not counted here).
        index = grep_index(path.read_text(encoding="utf-8"), owner)
        rankings = []
        for q in conv.questions:
            t = time.perf_counter()
            rankings.append(grep_rank(index, q.question, K))
            out.latencies.append(time.perf_counter() - t)
        out.add(conv, rankings)
    out.notes.append("per-query time: ranking the file's lines in-process, without grep's process start")
    return out


# -- SQLite FTS5 ---------------------------------------------------------------------------------


def fts_match(query: str) -> str:
    return " OR ".join('"' + w.replace('"', '""') + '"' for w in keywords(query))


def run_fts5(conversations: Sequence[Conversation], porter: bool) -> Outcome:
    name = "fts5-porter" if porter else "fts5"
    out = Outcome(name)
    tokenizer = "porter unicode61" if porter else "unicode61"
    for conv in conversations:
        db = sqlite3.connect(":memory:")
        db.execute(f"CREATE VIRTUAL TABLE turns USING fts5(body, tokenize='{tokenizer}')")
        db.executemany("INSERT INTO turns(rowid, body) VALUES (?, ?)", [(t.position, t.content) for t in conv.turns])
        rankings = []
        for q in conv.questions:
            t = time.perf_counter()
            match = fts_match(q.question)
            rows = (
                db.execute(
                    "SELECT rowid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns), rowid DESC LIMIT ?", (match, K)
                ).fetchall()
                if match
                else []
            )
            out.latencies.append(time.perf_counter() - t)
            rankings.append([r[0] for r in rows])
        db.close()
        out.add(conv, rankings)
    return out


# -- peers ---------------------------------------------------------------------------------------


def run_naqsha(conversations: Sequence[Conversation]) -> Outcome:
    from peers.client import PeerError, peer_python_reason, run_peer

    out = Outcome("naqsha")
    if peer_python_reason("naqsha")[0] is None:
        out.skipped = peer_python_reason("naqsha")[1]
        return out
    short = 0
    for conv in conversations:
        payload = {
            "rows": [{"id": str(t.position), "content": t.content, "created_ts": t.ts} for t in conv.turns],
            "queries": [{"id": str(i), "text": q.question} for i, q in enumerate(conv.questions)],
            "token_budget": NAQSHA_BUDGET,
            "autocommit_rows": 0,
            "point_queries": 0,
            "raw_executemany": False,
            "return_latencies": True,
        }
        try:
            res = run_peer("naqsha", "sql_bench", payload, timeout=600)
        except PeerError as exc:
            out.skipped = str(exc)
            return out
        rankings = [[int(i) for i in r["ranked_ids"][:K] if i] for r in res["retrieve_results"]]
        short += sum(1 for r, q in zip(res["retrieve_results"], conv.questions, strict=True) if r["n_returned"] < K)
        out.latencies += [ms / 1000 for ms in res["timings"]["retrieve"]["latencies_ms"]]
        out.add(conv, rankings)
    out.notes.append(
        f"token_budget={NAQSHA_BUDGET}; {short} queries returned fewer than {K} rows; "
        "retrieve() reads only the newest 512 rows of the table"
    )
    return out


def run_nooa(conversations: Sequence[Conversation], workdir: Path, systems: Sequence[str]) -> list[Outcome]:
    """nooa with its own embedder and/or with engramdb's vectors, all in one peer process."""
    import numpy as np

    from peers.client import PeerError, peer_python_reason, run_peer

    outs = [Outcome(s) for s in systems]
    py, reason = peer_python_reason("nooa")
    if py is None:
        for o in outs:
            o.skipped = reason
        return outs
    embedder = None
    haystacks: list[dict[str, Any]] = []
    for system in systems:
        for conv in conversations:
            h: dict[str, Any] = {
                "memories": [
                    {"id": str(t.position), "content": t.content, "created_ts": t.ts, "type": "episode"}
                    for t in conv.turns
                ],
                "queries": [{"id": str(i), "text": q.question} for i, q in enumerate(conv.questions)],
                "k": K,
                "hops": 1,
                "touch": False,
                "dedup": False,
                "now_ts": conv.last_ts + QUERY_DELAY,
                "return_latencies": True,
                "data_dir": str(workdir / f"nooa-{system}-{conv.sample_id}"),
                "cleanup": True,
            }
            if system == "nooa-vectors":
                if embedder is None:
                    from engramdb.embeddings.static import default_embedder

                    embedder = default_embedder()
                base = workdir / f"vectors-{conv.sample_id}"
                np.save(f"{base}-m.npy", embedder.embed([t.content for t in conv.turns]))
                np.save(f"{base}-q.npy", embedder.embed([q.question for q in conv.questions]))
                h.update(embedder="vectors", memory_vectors_npy=f"{base}-m.npy", query_vectors_npy=f"{base}-q.npy")
            haystacks.append(h)
    try:
        res = run_peer("nooa", "recall_many", {"haystacks": haystacks}, timeout=3600)
    except PeerError as exc:
        for o in outs:
            o.skipped = str(exc)
        return outs
    runs = iter(res["runs"])
    for o in outs:
        for conv in conversations:
            run = next(runs)
            rankings = [[int(i) for i in r["ranked_ids"][:K] if i.isdigit()] for r in run["recall_results"]]
            o.latencies += [ms / 1000 for ms in run["timings"]["recall"]["latencies_ms"]]
            o.add(conv, rankings)
        o.notes.append(f"import {res['runs'][0]['timings']['import_s']:.1f} s (once); recall touch=False, dedup=False")
    return outs


# -- dense-only and recency-aware BM25 baselines --------------------------------------------------


def run_dense(conversations: Sequence[Conversation]) -> Outcome:
    """Cosine top k over the turns with engramdb's shipped static embedder, nothing else."""
    import numpy as np

    from engramdb.embeddings.static import default_embedder

    embedder = default_embedder()
    out = Outcome("dense")
    for conv in conversations:
        docs = np.asarray(embedder.embed([t.content for t in conv.turns]), dtype=np.float32)
        docs /= np.maximum(np.linalg.norm(docs, axis=1, keepdims=True), 1e-12)
        rankings = []
        for q in conv.questions:
            t = time.perf_counter()
            qv = np.asarray(embedder.embed([q.question])[0], dtype=np.float32)
            cos = docs @ (qv / max(float(np.linalg.norm(qv)), 1e-12))
            top = np.argsort(-cos, kind="stable")[:K]
            out.latencies.append(time.perf_counter() - t)
            rankings.append([conv.turns[i].position for i in top.tolist()])
        out.add(conv, rankings)
    out.notes.append("per-query time includes embedding the question")
    return out


def run_fts5_ctx(conversations: Sequence[Conversation]) -> Outcome:
    """FTS5 BM25 + Porter, then the temporal-context lift engramdb uses, from the turns' times:
    s = BM25 over the best candidate's (of the top 50), score = s + w_ctx · max_j s_j·exp(−|Δt| / τ)
    with ScoringConfig's w_ctx and ctx_tau — the timestamps are the one input besides the text."""
    from engramdb.memories.scoring import temporal_context

    cfg = ScoringConfig()
    out = Outcome("fts5-porter-ctx")
    for conv in conversations:
        db = sqlite3.connect(":memory:")
        db.execute("CREATE VIRTUAL TABLE turns USING fts5(body, tokenize='porter unicode61')")
        db.executemany("INSERT INTO turns(rowid, body) VALUES (?, ?)", [(t.position, t.content) for t in conv.turns])
        rankings = []
        for q in conv.questions:
            t = time.perf_counter()
            match = fts_match(q.question)
            rows = (
                db.execute(
                    "SELECT rowid, -bm25(turns) FROM turns WHERE turns MATCH ? ORDER BY bm25(turns), rowid DESC "
                    "LIMIT 50",
                    (match,),
                ).fetchall()
                if match
                else []
            )
            ranked: list[int] = []
            if rows:
                keys = [r[0] for r in rows]
                top = max(r[1] for r in rows) or 1.0
                rel = [r[1] / top for r in rows]
                times = [conv.turns[k].ts for k in keys]
                ctx = temporal_context(keys, times, keys, times, rel, cfg.ctx_tau)
                score = [r + cfg.w_ctx * c for r, c in zip(rel, ctx, strict=True)]
                ranked = [k for _, k in sorted(zip(score, keys, strict=True), key=lambda x: (-x[0], -x[1]))][:K]
            out.latencies.append(time.perf_counter() - t)
            rankings.append(ranked)
        db.close()
        out.add(conv, rankings)
    out.notes.append(
        f"top 50 of BM25 re-scored with the temporal-context lift (w_ctx {cfg.w_ctx}, τ {cfg.ctx_tau:.0f} s)"
    )
    return out


# -- engramdb ------------------------------------------------------------------------------------


@dataclass
class Haystack:
    """One conversation remembered by engramdb: its database file and memory id -> turn position."""

    conv: Conversation
    path: Path
    position: dict[str, int]
    build_s: float
    inputs: str = "rich"  # "plain": content and created_at only; "rich": + speaker entity, precedes links
    merged: int = 0  # turns that dedup folded into an earlier memory (plain API, dedup on)


def build_plain(conv: Conversation, path: Path, *, speaker: bool = True) -> Haystack:
    """The plain public API: each turn remembered as ``"speaker: text"`` with its time as
    `created_at` — no entities, no links, no type, every other argument at its default (dedup on);
    session by session with `remember_many`, the clock at the session's last turn. ``speaker=False``
    (an ablation, not the plain API) passes ``entities=[]`` so that remember reads no speaker from
    the "Name: text" prefix."""
    t0 = time.perf_counter()
    clock = FixedClock(conv.turns[0].ts)
    engine = DynamicMemoryEngine(path, clock=clock)
    me = engine.agent("bench")
    position: dict[str, int] = {}
    merged = 0
    sessions: dict[int, list[locomo.Turn]] = {}
    for t in conv.turns:
        sessions.setdefault(t.session, []).append(t)
    for turns in sessions.values():
        clock.set(turns[-1].ts)
        extra: dict[str, Any] = {} if speaker else {"entities": []}
        memories = me.remember_many([{"content": t.content, "created_at": t.ts, **extra} for t in turns])
        for t, m in zip(turns, memories, strict=True):
            if m.id in position:
                merged += 1
            else:
                position[m.id] = t.position
    engine.close()
    return Haystack(conv, path, position, time.perf_counter() - t0, "plain" if speaker else "plain-nospeaker", merged)


def build_engramdb(conv: Conversation, path: Path, *, links: bool = True) -> Haystack:
    """Richer inputs: every turn remembered session by session at the session's date, with its
    speaker as its entity; consecutive turns linked ``precedes``."""
    t0 = time.perf_counter()
    clock = FixedClock(conv.turns[0].ts)
    engine = DynamicMemoryEngine(path, clock=clock)
    me = engine.agent("bench")
    position: dict[str, int] = {}
    sessions: dict[int, list[locomo.Turn]] = {}
    for t in conv.turns:
        sessions.setdefault(t.session, []).append(t)
    for session, turns in sessions.items():
        clock.set(conv.session_times[session])
        memories = me.remember_many(
            [{"content": t.content, "type": "episode", "created_at": t.ts, "entities": [t.speaker]} for t in turns],
            dedup=False,
        )
        for t, m in zip(turns, memories, strict=True):
            position[m.id] = t.position
        if links:
            for a, b in itertools.pairwise(memories):
                me.link(a.id, b.id, "precedes")
    engine.close()
    return Haystack(conv, path, position, time.perf_counter() - t0, "rich" if links else "entities")


def build_all(conversations: Sequence[Conversation], workdir: Path, inputs: str = "rich") -> list[Haystack]:
    """Every conversation remembered with `inputs`: "plain", "rich", or "entities" (rich without links)."""
    if inputs in ("plain", "plain-nospeaker"):
        speaker = inputs == "plain"
        return [build_plain(c, workdir / f"{c.sample_id}-{inputs}.db", speaker=speaker) for c in conversations]
    links = inputs == "rich"
    return [build_engramdb(c, workdir / f"{c.sample_id}-{inputs}.db", links=links) for c in conversations]


@dataclass(frozen=True)
class Variant:
    """How one engramdb row runs: which stores, which scoring, and how it asks."""

    inputs: str  # "plain" or "rich"
    scoring: ScoringConfig
    hops: int = 1
    embedder: bool = True
    #: "recall": agent.recall(question, k) as an agent would, on a copy of the store (hits are
    #: reinforced, questions a minute apart); "explain": the dry run that changes nothing
    api: str = "recall"


def engram_variants(base: ScoringConfig) -> dict[str, Variant]:
    """system -> how it runs; every ablation changes one thing of the default."""
    no_lifts = replace(base, w_when=0.0, w_entity=0.0, w_ctx=0.0, w_dated=0.0)
    return {
        "engramdb": Variant("plain", base),
        "engramdb-explain": Variant("plain", base, api="explain"),
        "engramdb-rich": Variant("rich", base, api="explain"),
        "engramdb-rich-hops2": Variant("rich", base, hops=2, api="explain"),
        "engramdb-entities": Variant("entities", base, api="explain"),
        "engramdb-rel": Variant("plain", replace(no_lifts, w_rec=0.0, w_imp=0.0), hops=0),
        "engramdb-no-when": Variant("plain", replace(base, w_when=0.0)),
        "engramdb-no-dated": Variant("plain", replace(base, w_dated=0.0)),
        "engramdb-no-expansion": Variant("plain", replace(base, bm25_prev=0.0)),
        "engramdb-no-entity": Variant("plain", replace(base, w_entity=0.0)),
        "engramdb-no-ctx": Variant("plain", replace(base, w_ctx=0.0)),
        "engramdb-no-rec": Variant("plain", replace(base, w_rec=0.0)),
        "engramdb-no-names": Variant("plain", replace(base, name_focus=False)),
        "engramdb-no-speaker": Variant("plain-nospeaker", base),
        "engramdb-no-sequence": Variant("plain", replace(base, sequence_window=0.0)),
        "engramdb-no-spread": Variant("plain", base, hops=0),
        "engramdb-rank-fusion": Variant("plain", replace(base, fusion="rank")),
        "engramdb-lexical": Variant("plain", base, embedder=False),
        "engramdb-vector": Variant("plain", replace(base, lam=1.0, mu=0.0)),
    }


def rank_engramdb(
    hay: Haystack,
    scoring: ScoringConfig,
    hops: int,
    embedder: bool,
    queries: Sequence[str],
    *,
    k: int = K,
    latencies: list[float] | None = None,
    api: str = "explain",
) -> list[list[int]]:
    """Each query's ranking (turn positions) on a fresh engine over the store: dry runs with
    ``api="explain"``, real recalls on a copy of the store with ``api="recall"``."""
    clock = FixedClock(hay.conv.last_ts + QUERY_DELAY)
    path = hay.path
    if api == "recall":  # recalls write (access log, reinforcement): never into the shared store
        path = hay.path.with_name(f"{hay.path.stem}-recall-{os.getpid()}-{time.monotonic_ns()}.db")
        shutil.copyfile(hay.path, path)
    engine = DynamicMemoryEngine(path, clock=clock, scoring=scoring, memory_embedder="default" if embedder else None)
    me = engine.agent("bench")
    me.explain("warm up the caches", k=1)  # the first recall loads every vector and posting once
    out = []
    for q in queries:
        t = time.perf_counter()
        hits = me.recall(q, k=k, hops=hops).hits if api == "recall" else me.explain(q, k=k, hops=hops).hits
        if latencies is not None:
            latencies.append(time.perf_counter() - t)
        out.append([hay.position[h.memory.id if isinstance(h, Hit) else h.memory_id] for h in hits])
        clock.advance(QUERY_GAP)
    engine.close()
    if path != hay.path:
        for extra in path.parent.glob(path.name + "*"):
            extra.unlink()
    return out


def run_engramdb(hays: Sequence[Haystack], system: str, variant: Variant) -> Outcome:
    out = Outcome(system)
    for hay in hays:
        rankings = rank_engramdb(
            hay,
            variant.scoring,
            variant.hops,
            variant.embedder,
            [q.question for q in hay.conv.questions],
            latencies=out.latencies,
            api=variant.api,
        )
        out.add(hay.conv, rankings)
    merged = sum(h.merged for h in hays)
    if variant.inputs.startswith("plain") and merged:
        out.notes.append(f"{merged} turns folded into an earlier memory by remember's default dedup")
    return out


# -- report --------------------------------------------------------------------------------------


def summary(o: Outcome) -> dict[str, Any]:
    s = locomo.summarise(o.rows)
    return {
        "system": o.system,
        "label": LABELS[o.system],
        "metrics": s,
        "query_ms_p50": 1000 * statistics.median(o.latencies) if o.latencies else None,
        "query_ms_mean": 1000 * statistics.fmean(o.latencies) if o.latencies else None,
        "wall_s": o.wall_s,
        "notes": o.notes,
        "skipped": o.skipped,
    }


def _f(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(results: Sequence[dict[str, Any]], meta: dict[str, Any], spacing: dict[str, dict[str, Any]]) -> str:
    """One split's section: categories 1-4, all five against DRAGON, the spacing ablation, notes."""
    done = [r for r in results if not r["skipped"] and r["system"] in COMPARED]
    best: dict[tuple[str, str], float] = {}
    for scope in ("cat1-4", "all"):
        for key in ("r@1", "r@5", "r@10", "r@20", "session_r@5"):
            best[scope, key] = max((r["metrics"][scope].get(key, 0.0) for r in done), default=0.0)
    for cat in (1, 2, 3, 4):
        best[f"cat{cat}", "r@10"] = max((r["metrics"].get(f"cat{cat}", {}).get("r@10", 0.0) for r in done), default=0)

    def cell(r: dict[str, Any], scope: str, key: str) -> str:
        v = r["metrics"].get(scope, {}).get(key)
        text = _f(v)
        bold = r["system"] in COMPARED and v is not None and abs(v - best.get((scope, key), -1)) < 1e-12
        return f"**{text}**" if bold else text

    lines = [
        f"## {meta['split']}: {', '.join(meta['sample_ids'])}",
        "",
        f"{meta['conversations']} conversations, {meta['turns']:,} turns; "
        f"{meta['queries_cat1_4']:,} questions of categories 1–4 ({meta['queries_all']:,} with category 5); "
        f"{meta['wall_s']:.0f} s.",
        "",
        "| system | R@1 | R@5 | R@10 | R@20 | session R@5 | R@10 multi-hop | R@10 temporal | R@10 open-domain "
        "| R@10 single-hop | ms / query (p50) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if r["skipped"]:
            lines.append(f"| {r['label']} | skipped: {r['skipped'].splitlines()[0]} |" + " |" * 9)
            continue
        cells = [cell(r, "cat1-4", k) for k in ("r@1", "r@5", "r@10", "r@20", "session_r@5")]
        cells += [cell(r, f"cat{c}", "r@10") for c in (1, 2, 3, 4)]
        lines.append(f"| {r['label']} | " + " | ".join(cells) + f" | {_f(r['query_ms_p50'], '.2f')} |")
    lines += [
        "",
        "All five categories (with adversarial), against the LoCoMo paper's retriever:",
        "",
        "| system | R@1 | R@5 | R@10 | R@20 | session R@5 |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if not r["skipped"]:
            lines.append(
                f"| {r['label']} | "
                + " | ".join(cell(r, "all", k) for k in ("r@1", "r@5", "r@10", "r@20", "session_r@5"))
                + " |"
            )
    lines += [
        f"| *LoCoMo paper: DRAGON over dialogue turns, all ten conversations (reported, not run here)* | — "
        f"| *{DRAGON['r@5']:.3f}* | *{DRAGON['r@10']:.3f}* | — | — |",
        "",
    ]
    if spacing:
        names = sorted({n for row in spacing.values() for n in row}, key=SYSTEMS.index)
        lines += [
            "Turn spacing (seconds between the turns of a session; the data gives none), R@10 of categories 1–4:",
            "",
            "| spacing | " + " | ".join(LABELS[n] for n in names) + " |",
            "|---|" + "---|" * len(names),
        ]
        for sp in sorted(spacing, key=float):
            row = spacing[sp]
            lines.append(
                f"| {sp} s | " + " | ".join(_f(row.get(n, {}).get("cat1-4", {}).get("r@10")) for n in names) + " |"
            )
        lines.append("")
    lines += ["Notes:", ""]
    lines += [f"- {r['label']}: {'; '.join(r['notes'])}" for r in results if r["notes"]]
    lines += [
        "- Recall@k = share of a question's evidence turns in the top k, averaged over questions; "
        "session R@5 = share of its evidence sessions with a turn in the top 5. Per category: "
        + ", ".join(f"{c} {n}" for c, n in CATEGORY_NAMES.items())
        + ". Malformed evidence ids are normalised as benchmarks/locomo.py describes.",
        "",
    ]
    return "\n".join(lines)


def plots(results: Sequence[dict[str, Any]], per_k: dict[str, list[float]], out_dir: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plots skipped: matplotlib is not installed (pip install -e '.[bench]')")
        return []
    done = [r for r in results if not r["skipped"]]
    written = []
    fig, ax = plt.subplots(figsize=(8, 5))
    for r in done:
        curve = per_k[r["system"]]
        style = "-" if r["system"] == "engramdb" or not r["system"].startswith("engramdb") else ":"
        ax.plot(
            range(1, K + 1),
            curve,
            style,
            label=r["label"].replace("*", ""),
            linewidth=2.5 if r["system"] == "engramdb" else 1.2,
        )
    ax.set_xlabel("k")
    ax.set_ylabel("evidence recall@k (categories 1–4)")
    ax.set_title("LoCoMo: evidence recall@k")
    ax.set_xticks([1, 5, 10, 15, 20])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    path = out_dir / "locomo_recall_at_k.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(str(path))

    compared = [r for r in done if r["system"] in COMPARED]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    width = 0.8 / max(len(compared), 1)
    for i, r in enumerate(compared):
        vals = [r["metrics"].get(f"cat{c}", {}).get("r@10", 0.0) for c in (1, 2, 3, 4)]
        xs = [c + (i - (len(compared) - 1) / 2) * width for c in range(4)]
        ax.bar(xs, vals, width, label=r["label"].replace("*", ""))
    ax.set_xticks(range(4), [CATEGORY_NAMES[c] for c in (1, 2, 3, 4)])
    ax.set_ylabel("evidence recall@10")
    ax.set_title("LoCoMo: recall@10 per question category")
    ax.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    path = out_dir / "locomo_categories.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(str(path))
    return written


def parse_set(spec: str, base: ScoringConfig) -> ScoringConfig:
    """``"w_ctx=0.5,fusion=rank"`` applied to `base` (for trying a setting; the defaults stay)."""
    changes: dict[str, Any] = {}
    for part in filter(None, (x.strip() for x in spec.split(","))):
        name, _, value = part.partition("=")
        default = getattr(base, name)
        if isinstance(default, bool):
            changes[name] = value.lower() in ("1", "true", "yes")
        else:
            changes[name] = type(default)(value)
    return replace(base, **changes)


def run_split(
    conversations: Sequence[Conversation], systems: Sequence[str], workdir: Path, base: ScoringConfig, parallel: bool
) -> tuple[dict[str, Outcome], float]:
    """Every system of `systems` on `conversations`; (outcomes, engramdb build seconds)."""
    outcomes: dict[str, Outcome] = {}

    def timed(name: str, fn: Callable[[], Outcome]) -> Outcome:
        t = time.perf_counter()
        o = fn()
        o.wall_s = time.perf_counter() - t
        outcomes[name] = o
        print(
            f"  {name:<22} {o.wall_s:6.1f} s" + (f"  (skipped: {o.skipped.splitlines()[0]})" if o.skipped else ""),
            flush=True,
        )
        return o

    # One system at a time, so that each per-query time is measured alone. With --parallel the
    # peers' processes run beside the in-process systems instead: sooner done on an idle
    # machine, but then every time is measured on a busy one.
    peer_jobs: dict[str, Callable[[], Outcome]] = {}
    if "naqsha" in systems:
        peer_jobs["naqsha"] = lambda: run_naqsha(conversations)
    for name in ("nooa", "nooa-vectors"):
        if name in systems:
            peer_jobs[name] = lambda name=name: run_nooa(conversations, workdir, [name])[0]  # type: ignore[misc]
    build_s = 0.0
    with ThreadPoolExecutor(max_workers=max(len(peer_jobs), 1)) as pool:
        pending = []
        for name, job in peer_jobs.items():
            if not parallel:
                timed(name, job)
            else:
                pending.append(pool.submit(timed, name, job))
        if "grep" in systems:
            timed("grep", lambda: run_grep(conversations, workdir))
        for name, porter in (("fts5", False), ("fts5-porter", True)):
            if name in systems:
                timed(name, lambda porter=porter: run_fts5(conversations, porter))  # type: ignore[misc]
        if "fts5-porter-ctx" in systems:
            timed("fts5-porter-ctx", lambda: run_fts5_ctx(conversations))
        if "dense" in systems:
            timed("dense", lambda: run_dense(conversations))
        variants = engram_variants(base)
        hays: dict[str, list[Haystack]] = {}
        for name in (s for s in ENGRAM_SYSTEMS if s in systems):
            v = variants[name]
            if v.inputs not in hays:
                t = time.perf_counter()
                hays[v.inputs] = build_all(conversations, workdir, v.inputs)
                build_s += time.perf_counter() - t
                print(f"  {'engramdb build ' + v.inputs:<22} {time.perf_counter() - t:6.1f} s", flush=True)
            timed(name, lambda name=name, v=v: run_engramdb(hays[v.inputs], name, v))  # type: ignore[misc]
        for future in pending:
            future.result()
    return outcomes, build_s


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA, help="locomo10.json")
    parser.add_argument(
        "--splits",
        default="train,validation",
        help="comma-separated of train, validation, test (locomo.SPLITS), each reported on its own; test only "
        "for the final report, never to choose anything (default: train,validation)",
    )
    parser.add_argument("--conversations", help='instead of --splits: indices, e.g. "0-6" or "all"')
    parser.add_argument(
        "--systems", default=",".join(DEFAULT_SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--set", default="", help='scoring to try instead of the defaults, e.g. "w_ctx=0.5,mu=0.2"')
    parser.add_argument(
        "--spacings",
        default="",
        help=f"extra turn spacings in seconds (e.g. 1,120) to rerun {', '.join(SPACING_SYSTEMS)} with "
        f"(the default spacing is {locomo.TURN_SPACING:.0f} s)",
    )
    parser.add_argument("--out-dir", type=Path, default=RESULTS)
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument(
        "--parallel",
        action="store_true",
        help="run the peers' processes beside the in-process systems: sooner done on an idle machine, but "
        "every per-query time is then measured on a busy one",
    )
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(locomo.missing_data_message(args.data), file=sys.stderr)
        return 2
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    base = parse_set(args.set, ScoringConfig())
    started = time.perf_counter()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    everything = locomo.load_locomo(args.data)
    if args.conversations:
        parts = {f"conversations {args.conversations}": locomo.select(everything, args.conversations)}
    else:
        parts = {name: locomo.split(everything, name) for name in (x.strip() for x in args.splits.split(",")) if name}
    spacings = [float(x) for x in args.spacings.split(",") if x.strip()]
    report_splits: dict[str, Any] = {}
    sections: list[str] = []
    per_k: dict[str, list[float]] = {}
    plot_results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        for part, conversations in parts.items():
            print(f"{part}: {', '.join(c.sample_id for c in conversations)}", flush=True)
            workdir = Path(tmp) / part.replace(" ", "_")
            workdir.mkdir()
            t0 = time.perf_counter()
            outcomes, build_s = run_split(conversations, systems, workdir, base, args.parallel)
            results = [summary(outcomes[s]) for s in SYSTEMS if s in outcomes]
            meta = {
                "split": part,
                "sample_ids": [c.sample_id for c in conversations],
                "conversations": len(conversations),
                "turns": sum(len(c.turns) for c in conversations),
                "queries_cat1_4": sum(1 for c in conversations for q in c.questions if q.category != 5),
                "queries_all": sum(len(c.questions) for c in conversations),
                "wall_s": time.perf_counter() - t0,
                "engramdb_build_s": build_s,
                "peers_alongside": args.parallel,
            }
            spacing_rows: dict[str, dict[str, Any]] = {}
            for spacing in spacings:
                spaced = locomo.select(locomo.load_locomo(args.data, spacing=spacing), ",".join(meta["sample_ids"]))
                sdir = workdir / f"spacing-{spacing:g}"
                sdir.mkdir()
                print(f"  turn spacing {spacing:g} s:", flush=True)
                got, _ = run_split(spaced, [s for s in SPACING_SYSTEMS if s in SYSTEMS], sdir, base, False)
                spacing_rows[f"{spacing:g}"] = {name: summary(o)["metrics"] for name, o in got.items()}
            if spacing_rows:
                spacing_rows[f"{locomo.TURN_SPACING:g}"] = {
                    r["system"]: r["metrics"] for r in results if r["system"] in SPACING_SYSTEMS
                }
            report_splits[part] = {
                "meta": meta,
                "results": results,
                "recall_at_k_cat1_4": {s: outcomes[s].curve() for s in outcomes},
                "spacing_ablation": spacing_rows,
            }
            sections.append(markdown(results, meta, spacing_rows))
            per_k = {s: outcomes[s].curve() for s in outcomes}
            plot_results = results
    wall = time.perf_counter() - started
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "platform": f"{platform.system()} {platform.machine()}",
        "load_start": [round(x, 2) for x in load_start] if load_start else None,
        "load_end": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
    }
    command = provenance.RUN["command"]
    args.out_dir.mkdir(parents=True, exist_ok=True)
    head = [
        "# LoCoMo evidence recall",
        "",
        f"k = {K}. Machine: {machine['platform']}, {machine['cpus']} cores, CPython {machine['python']}, load "
        f"average at start {machine['load_start']}. Whole run: {wall:.0f} s, one system at a time (other jobs "
        "share the machine: times are noisy). Turn spacing {0:g} s. Bold: the best value of each column among "
        "the systems compared (engramdb's ablations and richer-input rows are extra rows). Splits: "
        "benchmarks/locomo.py `SPLITS` (train fits, validation chooses, test is read once for the report).".format(
            locomo.TURN_SPACING
        ),
        "",
        f"Scoring: {'defaults' if not args.set else 'defaults with ' + args.set}. Command: `{command}`",
        "",
    ]
    md = "\n".join(head) + "\n" + "\n".join(sections)
    (args.out_dir / "locomo.md").write_text(md, encoding="utf-8")
    report = {
        "benchmark": "LoCoMo evidence recall",
        "data": provenance.relative(str(args.data)),
        "k": K,
        "turn_spacing_s": locomo.TURN_SPACING,
        "scoring": asdict(base),
        "splits": report_splits,
        "machine": machine,
        "wall_s": wall,
        "reference": {"DRAGON over dialogue turns (LoCoMo paper, as issue #6 quotes it)": DRAGON},
    }
    (args.out_dir / "locomo.json").write_text(json.dumps(provenance.stamp(report), indent=2) + "\n", encoding="utf-8")
    print(md)
    if not args.no_plots and plot_results:
        for p in plots(plot_results, per_k, args.out_dir):
            print(f"wrote {p}")
    print(f"wrote {args.out_dir / 'locomo.md'} and locomo.json; whole run {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

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
from engramdb.testing import FixedClock
from locomo import CATEGORY_NAMES, Conversation

HERE = Path(__file__).resolve().parent
RESULTS = provenance.OUT
K = 20
NAQSHA_BUDGET = 10_000  # tokens: ≥ 20 of its wrapped rows (≈ 140 characters of markers each) fit
QUERY_DELAY = 86_400.0  # queries run one day after the last session
#: the LoCoMo paper's (Maharana et al. 2024) retrieval over dialogue turns with DRAGON, as issue #6 quotes it
DRAGON = {"r@5": 0.567, "r@10": 0.662}

PEER_SYSTEMS = ("naqsha", "nooa", "nooa-vectors")
ENGRAM_SYSTEMS = (
    "engramdb",
    "engramdb-hops2",
    "engramdb-rel",
    "engramdb-rel+rec",
    "engramdb-rel+rec+imp",
    "engramdb-lifts",
    "engramdb-no-when",
    "engramdb-no-entity",
    "engramdb-no-ctx",
    "engramdb-lexical",
    "engramdb-vector",
)
SYSTEMS = ("grep", *PEER_SYSTEMS, "fts5", "fts5-porter", *ENGRAM_SYSTEMS)
#: the systems side by side (bold marks the best of these; ablations and variants are extra rows)
COMPARED = ("grep", *PEER_SYSTEMS, "fts5", "fts5-porter", "engramdb")
LABELS = {
    "grep": "markdown notes + grep",
    "naqsha": "naqsha 0.2.0 MemoryRetriever",
    "nooa": "nooa-memory 0.0.10 (own hashing embedder)",
    "nooa-vectors": "nooa-memory 0.0.10 (engramdb's vectors)",
    "fts5": "SQLite FTS5 BM25",
    "fts5-porter": "SQLite FTS5 BM25 + Porter",
    "engramdb": "**engramdb** (default)",
    "engramdb-hops2": "engramdb, recall(hops=2)",
    "engramdb-rel": "engramdb ablation: rel only",
    "engramdb-rel+rec": "engramdb ablation: rel + rec",
    "engramdb-rel+rec+imp": "engramdb ablation: rel + rec + imp",
    "engramdb-lifts": "engramdb ablation: + when + entity + ctx (no spread)",
    "engramdb-no-when": "engramdb ablation: default without when",
    "engramdb-no-entity": "engramdb ablation: default without entity",
    "engramdb-no-ctx": "engramdb ablation: default without ctx",
    "engramdb-lexical": "engramdb ablation: lexical only (no embedder)",
    "engramdb-vector": "engramdb ablation: vector only (λ = 1)",
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


# -- engramdb ------------------------------------------------------------------------------------


@dataclass
class Haystack:
    """One conversation remembered by engramdb: its database file and memory id -> turn position."""

    conv: Conversation
    path: Path
    position: dict[str, int]
    build_s: float


def build_engramdb(conv: Conversation, path: Path, *, links: bool = True) -> Haystack:
    """Remember every turn, session by session at the session's date, with its speaker as its
    entity; link consecutive turns."""
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
    return Haystack(conv, path, position, time.perf_counter() - t0)


def build_all(conversations: Sequence[Conversation], workdir: Path) -> list[Haystack]:
    return [build_engramdb(c, workdir / f"{c.sample_id}.db") for c in conversations]


def engram_variants(base: ScoringConfig) -> dict[str, tuple[ScoringConfig, int, bool]]:
    """system -> (scoring, hops, with the default embedder)."""
    no_lifts = replace(base, w_when=0.0, w_entity=0.0, w_ctx=0.0)
    return {
        "engramdb": (base, 1, True),
        "engramdb-hops2": (base, 2, True),
        "engramdb-rel": (replace(no_lifts, w_rec=0.0, w_imp=0.0), 0, True),
        "engramdb-rel+rec": (replace(no_lifts, w_imp=0.0), 0, True),
        "engramdb-rel+rec+imp": (no_lifts, 0, True),
        "engramdb-lifts": (base, 0, True),
        "engramdb-no-when": (replace(base, w_when=0.0), 1, True),
        "engramdb-no-entity": (replace(base, w_entity=0.0), 1, True),
        "engramdb-no-ctx": (replace(base, w_ctx=0.0), 1, True),
        "engramdb-lexical": (base, 1, False),
        "engramdb-vector": (replace(base, lam=1.0, mu=0.0), 1, True),
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
) -> list[list[int]]:
    """Each query's ranking (turn positions) from a dry-run recall on a fresh engine over the store."""
    clock = FixedClock(hay.conv.last_ts + QUERY_DELAY)
    engine = DynamicMemoryEngine(
        hay.path, clock=clock, scoring=scoring, memory_embedder="default" if embedder else None
    )
    me = engine.agent("bench")
    me.explain("warm up the caches", k=1)  # the first recall loads every vector and posting once
    out = []
    for q in queries:
        t = time.perf_counter()
        ex = me.explain(q, k=k, hops=hops)
        if latencies is not None:
            latencies.append(time.perf_counter() - t)
        out.append([hay.position[h.memory_id] for h in ex.hits])
    engine.close()
    return out


def run_engramdb(hays: Sequence[Haystack], system: str, variant: tuple[ScoringConfig, int, bool]) -> Outcome:
    scoring, hops, embedder = variant
    out = Outcome(system)
    for hay in hays:
        rankings = rank_engramdb(
            hay, scoring, hops, embedder, [q.question for q in hay.conv.questions], latencies=out.latencies
        )
        out.add(hay.conv, rankings)
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


def markdown(results: Sequence[dict[str, Any]], meta: dict[str, Any]) -> str:
    done = [r for r in results if not r["skipped"] and r["system"] in COMPARED]
    best: dict[tuple[str, str], float] = {}
    for scope in ("cat1-4", "all"):
        for key in ("r@1", "r@5", "r@10", "r@20", "session_r@5"):
            best[scope, key] = max(r["metrics"][scope].get(key, 0.0) for r in done)
    for cat in (1, 2, 3, 4):
        best[f"cat{cat}", "r@10"] = max(r["metrics"].get(f"cat{cat}", {}).get("r@10", 0.0) for r in done)

    def cell(r: dict[str, Any], scope: str, key: str) -> str:
        v = r["metrics"].get(scope, {}).get(key)
        text = _f(v)
        return f"**{text}**" if v is not None and abs(v - best.get((scope, key), -1)) < 1e-12 else text

    lines = [
        "# LoCoMo evidence recall",
        "",
        f"{meta['conversations']} conversations, {meta['turns']:,} turns; "
        f"{meta['queries_cat1_4']:,} questions of categories 1–4 ({meta['queries_all']:,} with category 5). "
        f"k = {K}. Machine: {meta['machine']['platform']}, {meta['machine']['cpus']} cores, CPython "
        f"{meta['machine']['python']}, load average at start {meta['machine']['load_start']}. "
        f"Whole run: {meta['wall_s']:.0f} s"
        + (
            " with the peers' processes running beside the in-process systems, so every per-query time was "
            "measured on a busy machine"
            if meta["peers_alongside"]
            else ", one system at a time (other jobs share the machine: times are noisy)"
        )
        + ". Bold: the best value of each column among the systems compared (not counting engramdb's "
        "ablations and its hops=2 variant).",
        "",
        "## Categories 1–4 (multi-hop, temporal, open-domain, single-hop)",
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
        "## All five categories (with adversarial), against the LoCoMo paper's retriever",
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
        f"| *LoCoMo paper: DRAGON over dialogue turns (reported, not run here)* | — | *{DRAGON['r@5']:.3f}* "
        f"| *{DRAGON['r@10']:.3f}* | — | — |",
        "",
        "Notes:",
        "",
    ]
    lines += [f"- {r['label']}: {'; '.join(r['notes'])}" for r in results if r["notes"]]
    lines += [
        "- Recall@k = share of a question's evidence turns in the top k, averaged over questions; "
        "session R@5 = share of its evidence sessions with a turn in the top 5. Per category: "
        + ", ".join(f"{c} {n}" for c, n in CATEGORY_NAMES.items())
        + ". Malformed evidence ids are normalised as benchmarks/locomo.py describes.",
        f"- Command: `{meta['command']}`",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA, help="locomo10.json")
    parser.add_argument("--conversations", default="all", help='indices, e.g. "0-6" or "7,8,9" (default: all)')
    parser.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}")
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
    started = time.perf_counter()
    load_start = os.getloadavg() if hasattr(os, "getloadavg") else None
    conversations = locomo.select(locomo.load_locomo(args.data), args.conversations)
    outcomes: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="locomo-") as tmp:
        workdir = Path(tmp)

        def timed(name: str, fn: Callable[[], Outcome]) -> Outcome:
            t = time.perf_counter()
            o = fn()
            o.wall_s = time.perf_counter() - t
            outcomes[name] = o
            print(
                f"{name:<22} {o.wall_s:6.1f} s" + (f"  (skipped: {o.skipped.splitlines()[0]})" if o.skipped else ""),
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
        with ThreadPoolExecutor(max_workers=max(len(peer_jobs), 1)) as pool:
            pending = []
            for name, job in peer_jobs.items():
                if not args.parallel:
                    timed(name, job)
                else:
                    pending.append(pool.submit(timed, name, job))
            if "grep" in systems:
                timed("grep", lambda: run_grep(conversations, workdir))
            for name, porter in (("fts5", False), ("fts5-porter", True)):
                if name in systems:
                    timed(name, lambda porter=porter: run_fts5(conversations, porter))  # type: ignore[misc]
            engram = [s for s in ENGRAM_SYSTEMS if s in systems]
            build_s = 0.0
            if engram:
                t = time.perf_counter()
                hays = build_all(conversations, workdir)
                build_s = time.perf_counter() - t
                print(f"{'engramdb (build)':<22} {build_s:6.1f} s", flush=True)
                variants = engram_variants(ScoringConfig())
                for name in engram:
                    timed(name, lambda name=name: run_engramdb(hays, name, variants[name]))  # type: ignore[misc]
            for future in pending:
                future.result()
    wall = time.perf_counter() - started
    results = [summary(outcomes[s]) for s in SYSTEMS if s in outcomes]
    per_k = {s: outcomes[s].curve() for s in outcomes}
    meta = {
        "conversations": len(conversations),
        "turns": sum(len(c.turns) for c in conversations),
        "queries_cat1_4": sum(1 for c in conversations for q in c.questions if q.category != 5),
        "queries_all": sum(len(c.questions) for c in conversations),
        "wall_s": wall,
        "engramdb_build_s": build_s,
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "platform": f"{platform.system()} {platform.machine()}",
            "load_start": [round(x, 2) for x in load_start] if load_start else None,
            "load_end": [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None,
        },
        "command": " ".join(["python benchmarks/bench_locomo.py", *(sys.argv[1:] if argv is None else argv)]),
        "peers_alongside": args.parallel,
        "scoring": asdict(ScoringConfig()),
    }
    args.out_dir.mkdir(parents=True, exist_ok=True)
    md = markdown(results, meta)
    (args.out_dir / "locomo.md").write_text(md, encoding="utf-8")
    report = {
        "benchmark": "LoCoMo evidence recall",
        "data": provenance.relative(str(args.data)),
        "k": K,
        "meta": meta,
        "results": results,
    }
    report["recall_at_k_cat1_4"] = per_k
    report["reference"] = {"DRAGON over dialogue turns (LoCoMo paper, as issue #6 quotes it)": DRAGON}
    (args.out_dir / "locomo.json").write_text(json.dumps(provenance.stamp(report), indent=2) + "\n", encoding="utf-8")
    print(md)
    if not args.no_plots:
        for p in plots(results, per_k, args.out_dir):
            print(f"wrote {p}")
    print(f"wrote {args.out_dir / 'locomo.md'} and locomo.json; whole run {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

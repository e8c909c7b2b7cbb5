"""LongMemEval_S (dev) retrieval: engramdb's plain API beside SQLite FTS5 BM25, in one run (issue #31).

Data: ``shared/data/longmemeval/longmemeval_s_dev.json.gz`` beside the repository (its README.md
gives the source, the licence and the fields): 95 LongMemEval_S questions, each with its own chat
history of ~50 sessions (~490 turns, ~240 of them the user's).

Method:

- Each question is its own haystack: a fresh engramdb store (a SQLite file in a temp dir). Every
  turn is remembered through the plain public API, session by session with ``remember_many(...,
  dedup=False)``, with only its content and ``created_at`` = its session's date (``haystack_dates``,
  ``"2023/05/30 (Tue) 23:40"``, read as UTC) + i seconds for turn i of the session; the clock
  (``engramdb.testing.FixedClock``) stands at the session's last turn while it is written. No
  entities, no types, no ``precedes`` links: what a new user would write.
- Two modes: ``both`` (user and assistant turns, content ``"user: …"`` / ``"assistant: …"``) and
  ``user`` (the user's turns only, content as given — the common setup; questions whose evidence is
  only in assistant turns then have nothing to find at turn level). Turns with empty content (two in
  the file) are skipped in both modes, for every system (remember rejects empty content).
- Query: the question, with the clock at ``question_date``, ``agent.explain(question, k=50)`` — the
  dry run, which logs and reinforces nothing, so the questions of a run cannot change each other's
  rankings (as bench_locomo's explain rows do). The hit order is the turn ranking. Each scoring
  variant opens a fresh engine with its ``ScoringConfig`` over the same store (built once per
  question and mode), warms its caches with one throw-away explain, then times the question.
- Baseline, same turns, same run: SQLite FTS5 BM25 with the ``porter unicode61`` tokenizer, the query
  the OR of the question's keywords (``engramdb.retrieval.keywords``, stopwords dropped; bench_locomo's
  ``fts_match``), ties to the later turn, top 50.

Metrics (the no-LLM retrieval metrics of the LongMemEval literature):

- turn recall@10: the share of the question's ``has_answer`` turns (among the stored turns) in the
  top 10, averaged over the questions that have at least one — in ``user`` mode the questions whose
  evidence is only in assistant turns are not counted (the report says how many were);
- session recall_any@5 / recall_all@5: the turn ranking collapsed to session ids in rank order
  (deduplicated); any / all of ``answer_session_ids`` among the first 5 distinct sessions, averaged
  over every question (``recall_all@5`` is what leaderboards quote as "R@5");
- per ``question_type``: turn recall@10; p50 / mean ms per query.

Variants (``--variants``, ``;``-separated, each a ``--set``-style override on top of the scoring of
``--set``, itself applied to engramdb's defaults; ``default`` = no override): by default the default
and one lever off each — ``sequence_window=0`` (implicit episodes), ``bm25_prev=0`` (document
expansion), ``w_ctx=0`` (temporal context), ``w_entity=0`` (entity lift).

Usage (from the repository root)::

    .venv/bin/python benchmarks/bench_longmemeval.py [--questions N] [--roles both,user]
        [--variants "default;w_ctx=0"] [--set "w_ctx=0,sequence_window=0"] [--out benchmarks/results/longmemeval.json]

Writes ``longmemeval.json`` (with provenance) to benchmarks/out/ unless ``--out`` says otherwise, and
prints a markdown table.
"""

from __future__ import annotations

import argparse
import calendar
import gzip
import json
import re
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import provenance
from bench_locomo import fts_match, parse_set
from engramdb import DynamicMemoryEngine
from engramdb.memories.scoring import ScoringConfig
from engramdb.testing import FixedClock

#: the shared copy beside the repository (`shared/data/longmemeval/`); pass another with --data
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "longmemeval" / "longmemeval_s_dev.json.gz"
K_QUERY = 50  # turns asked of each system
K_TURN = 10  # turn recall@10
K_SESSION = 5  # session recall_any@5 / recall_all@5
MODES = ("both", "user")
DEFAULT_VARIANTS = "default;sequence_window=0;bm25_prev=0;w_ctx=0;w_entity=0"
BM25 = "fts5-porter"
TYPES = (
    "single-session-user",
    "single-session-assistant",
    "multi-session",
    "temporal-reasoning",
    "knowledge-update",
)
_DATE = re.compile(r"^(\d{4})/(\d{2})/(\d{2}) \(\w+\) (\d{2}):(\d{2})$")


# -- data ----------------------------------------------------------------------------------------


def parse_date(text: str) -> float:
    """``"2023/05/30 (Tue) 23:40"`` as epoch seconds, read as UTC."""
    m = _DATE.match(text.strip())
    if not m:
        raise ValueError(f"unreadable LongMemEval date {text!r}")
    y, mo, d, h, mi = (int(x) for x in m.groups())
    return float(calendar.timegm((y, mo, d, h, mi, 0, 0, 0, 0)))


@dataclass(frozen=True, slots=True)
class Turn:
    """One stored turn: a document of its question's haystack."""

    position: int  # 0-based among the stored turns of the haystack
    session: str  # its session's id
    role: str
    content: str  # as stored ("user: …" / "assistant: …" in mode both)
    ts: float  # its session's date + its index in the session, in seconds
    has_answer: bool


@dataclass(frozen=True)
class Question:
    qid: str
    qtype: str
    question: str
    ts: float  # question_date
    answer_sessions: frozenset[str]
    turns: tuple[Turn, ...]
    sessions: tuple[tuple[float, tuple[Turn, ...]], ...]  # (session date, its stored turns), in file order
    skipped_empty: int = 0

    @property
    def gold(self) -> frozenset[int]:
        return frozenset(t.position for t in self.turns if t.has_answer)


def load(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data: list[dict[str, Any]] = json.load(f)
    return data


def question_of(raw: dict[str, Any], mode: str) -> Question:
    """One question's haystack in `mode` ("both": every turn, role-prefixed; "user": the user's turns)."""
    turns: list[Turn] = []
    sessions: list[tuple[float, tuple[Turn, ...]]] = []
    empty = 0
    for sid, date, session in zip(
        raw["haystack_session_ids"], raw["haystack_dates"], raw["haystack_sessions"], strict=True
    ):
        start = parse_date(date)
        mine: list[Turn] = []
        for i, t in enumerate(session):
            if mode == "user" and t["role"] != "user":
                continue
            if not str(t["content"]).strip():
                empty += 1
                continue
            content = f"{t['role']}: {t['content']}" if mode == "both" else str(t["content"])
            mine.append(Turn(len(turns), sid, t["role"], content, start + i, bool(t.get("has_answer"))))
            turns.append(mine[-1])
        sessions.append((start, tuple(mine)))
    return Question(
        raw["question_id"],
        raw["question_type"],
        raw["question"],
        parse_date(raw["question_date"]),
        frozenset(raw["answer_session_ids"]),
        tuple(turns),
        tuple(sessions),
        empty,
    )


# -- metrics -------------------------------------------------------------------------------------


def turn_recall(ranking: Sequence[int], gold: Iterable[int], k: int = K_TURN) -> float | None:
    """Share of the `gold` turns in the top `k` of `ranking`; None when there is no gold turn."""
    wanted = frozenset(gold)
    if not wanted:
        return None
    return len(wanted.intersection(ranking[:k])) / len(wanted)


def ranked_sessions(ranking: Sequence[int], session_of: Sequence[str]) -> list[str]:
    """The turn ranking collapsed to session ids in rank order, each once."""
    return list(dict.fromkeys(session_of[p] for p in ranking))


def session_recall(sessions: Sequence[str], answer: Iterable[str], k: int = K_SESSION) -> tuple[float, float]:
    """(recall_any@k, recall_all@k): 1.0 if any / all of `answer` are among the first `k` sessions."""
    top = set(sessions[:k])
    wanted = set(answer)
    return float(bool(wanted & top)), float(bool(wanted) and wanted <= top)


def score(q: Question, ranking: Sequence[int]) -> dict[str, Any]:
    sessions = ranked_sessions(ranking, [t.session for t in q.turns])
    any5, all5 = session_recall(sessions, q.answer_sessions)
    return {"qid": q.qid, "type": q.qtype, "turn_r@10": turn_recall(ranking, q.gold), "any@5": any5, "all@5": all5}


def summarise(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Means over questions; turn recall over the questions with a gold turn (and how many)."""
    counted = [r["turn_r@10"] for r in rows if r["turn_r@10"] is not None]
    per_type: dict[str, dict[str, Any]] = {}
    for qtype in sorted({r["type"] for r in rows}, key=lambda t: (TYPES.index(t) if t in TYPES else 99, t)):
        mine = [r for r in rows if r["type"] == qtype]
        got = [r["turn_r@10"] for r in mine if r["turn_r@10"] is not None]
        per_type[qtype] = {
            "questions": len(mine),
            "turn_counted": len(got),
            "turn_r@10": statistics.fmean(got) if got else None,
            "recall_any@5": statistics.fmean(r["any@5"] for r in mine),
            "recall_all@5": statistics.fmean(r["all@5"] for r in mine),
        }
    return {
        "questions": len(rows),
        "turn_counted": len(counted),
        "turn_r@10": statistics.fmean(counted) if counted else None,
        "recall_any@5": statistics.fmean(r["any@5"] for r in rows) if rows else None,
        "recall_all@5": statistics.fmean(r["all@5"] for r in rows) if rows else None,
        "per_type": per_type,
    }


# -- systems -------------------------------------------------------------------------------------


def rank_fts5(q: Question, k: int = K_QUERY) -> tuple[list[int], float]:
    """FTS5 BM25 + Porter over the stored turns: (ranking, seconds for the query)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE turns USING fts5(body, tokenize='porter unicode61')")
    db.executemany("INSERT INTO turns(rowid, body) VALUES (?, ?)", [(t.position, t.content) for t in q.turns])
    t0 = time.perf_counter()
    match = fts_match(q.question)
    rows = (
        db.execute(
            "SELECT rowid FROM turns WHERE turns MATCH ? ORDER BY bm25(turns), rowid DESC LIMIT ?", (match, k)
        ).fetchall()
        if match
        else []
    )
    took = time.perf_counter() - t0
    db.close()
    return [r[0] for r in rows], took


def build(q: Question, path: Path) -> dict[str, int]:
    """The haystack remembered through the plain API; memory id -> turn position."""
    clock = FixedClock(q.sessions[0][0] if q.sessions else q.ts)
    engine = DynamicMemoryEngine(path, clock=clock)
    me = engine.agent("bench")
    position: dict[str, int] = {}
    for _start, turns in q.sessions:
        if not turns:
            continue
        clock.set(turns[-1].ts)
        memories = me.remember_many([{"content": t.content, "created_at": t.ts} for t in turns], dedup=False)
        for t, m in zip(turns, memories, strict=True):
            position[m.id] = t.position
    engine.close()
    return position


def rank_engramdb(
    q: Question, path: Path, position: dict[str, int], scoring: ScoringConfig, k: int = K_QUERY
) -> tuple[list[int], float]:
    """``explain(question, k)`` at the question's date on a fresh engine with `scoring`: (ranking, seconds)."""
    engine = DynamicMemoryEngine(path, clock=FixedClock(q.ts), scoring=scoring)
    me = engine.agent("bench")
    me.explain("warm up the caches", k=1)  # the first query loads every vector and posting once
    t0 = time.perf_counter()
    hits = me.explain(q.question, k=k).hits
    took = time.perf_counter() - t0
    engine.close()
    return [position[h.memory_id] for h in hits], took


# -- run -----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    system: str
    mode: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)

    def result(self) -> dict[str, Any]:
        lat = self.latencies
        return {
            "system": self.system,
            "mode": self.mode,
            "metrics": summarise(self.rows),
            "query_ms_p50": 1000 * statistics.median(lat) if lat else None,
            "query_ms_mean": 1000 * statistics.fmean(lat) if lat else None,
            "per_question": self.rows,
        }


def parse_variants(spec: str, base: ScoringConfig) -> dict[str, ScoringConfig]:
    """``"default;w_ctx=0;w_ctx=0,sequence_window=0"`` -> name -> scoring (each on top of `base`)."""
    out: dict[str, ScoringConfig] = {}
    for part in filter(None, (x.strip() for x in spec.split(";"))):
        out[part] = base if part == "default" else parse_set(part, base)
    return out


def run_mode(
    raws: Sequence[dict[str, Any]], mode: str, variants: dict[str, ScoringConfig], workdir: Path
) -> tuple[dict[str, Outcome], dict[str, Any]]:
    outs = {BM25: Outcome(BM25, mode), **{f"engramdb {n}": Outcome(f"engramdb {n}", mode) for n in variants}}
    build_s = rank_s = 0.0
    turns = empty = 0
    t_mode = time.perf_counter()
    for n, raw in enumerate(raws):
        q = question_of(raw, mode)
        turns += len(q.turns)
        empty += q.skipped_empty
        ranking, took = rank_fts5(q)
        outs[BM25].rows.append(score(q, ranking))
        outs[BM25].latencies.append(took)
        path = workdir / f"{mode}-{n}.db"
        t0 = time.perf_counter()
        position = build(q, path)
        build_s += time.perf_counter() - t0
        t0 = time.perf_counter()
        for name, cfg in variants.items():
            ranking, took = rank_engramdb(q, path, position, cfg)
            o = outs[f"engramdb {name}"]
            o.rows.append(score(q, ranking))
            o.latencies.append(took)
        rank_s += time.perf_counter() - t0
        for extra in path.parent.glob(path.name + "*"):
            extra.unlink()
        if (n + 1) % 10 == 0 or n + 1 == len(raws):
            print(
                f"  {mode}: {n + 1}/{len(raws)} questions, {time.perf_counter() - t_mode:6.1f} s "
                f"(build {build_s:.1f} s, rank {rank_s:.1f} s)",
                flush=True,
            )
    meta = {
        "questions": len(raws),
        "turns": turns,
        "empty_turns_skipped": empty,
        "wall_s": time.perf_counter() - t_mode,
        "engramdb_build_s": build_s,
        "engramdb_rank_s": rank_s,
    }
    return outs, meta


def _f(x: float | None, spec: str = ".3f") -> str:
    return "—" if x is None else format(x, spec)


def markdown(results: dict[str, dict[str, dict[str, Any]]], metas: dict[str, dict[str, Any]]) -> str:
    """results: system -> mode -> result."""
    modes = [m for m in MODES if m in metas]
    head = "| system |" + "".join(
        f" {m}: turn R@10 | {m}: recall_any@5 | {m}: recall_all@5 | {m}: p50 ms |" for m in modes
    )
    lines = [head, "|---|" + "---|" * (4 * len(modes))]
    for system, per_mode in results.items():
        cells = []
        for m in modes:
            r = per_mode[m]
            s = r["metrics"]
            cells += [_f(s["turn_r@10"]), _f(s["recall_any@5"]), _f(s["recall_all@5"]), _f(r["query_ms_p50"], ".1f")]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    lines.append("")
    for m in modes:
        first = next(iter(results.values()))[m]["metrics"]
        lines.append(
            f"- {m}: {metas[m]['questions']} questions ({first['turn_counted']} with a has_answer turn stored, "
            f"counted for turn R@10), {metas[m]['turns']:,} turns, {metas[m]['wall_s']:.0f} s"
        )
    lines += ["", "Turn R@10 per question type (questions counted):", ""]
    types = [t for t in TYPES if any(t in r[m]["metrics"]["per_type"] for r in results.values() for m in modes)]
    short = {
        t: t.replace("single-session-", "ss-").replace("-reasoning", "").replace("knowledge-", "k-") for t in types
    }
    lines.append("| system |" + "".join(f" {m}: {short[t]} |" for m in modes for t in types))
    lines.append("|---|" + "---|" * (len(types) * len(modes)))
    for system, per_mode in results.items():
        cells = []
        for m in modes:
            pt = per_mode[m]["metrics"]["per_type"]
            for t in types:
                c = pt.get(t)
                cells.append("—" if c is None else f"{_f(c['turn_r@10'])} ({c['turn_counted']})")
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="longmemeval_s_dev.json.gz")
    parser.add_argument("--questions", type=int, default=0, help="only the first N questions (0: all)")
    parser.add_argument("--roles", default="both,user", help="comma-separated modes of: both, user")
    parser.add_argument(
        "--variants",
        default=DEFAULT_VARIANTS,
        help=f'";"-separated --set-style overrides, "default" = none (default: "{DEFAULT_VARIANTS}")',
    )
    parser.add_argument("--set", default="", help='scoring under every variant, e.g. "w_ctx=0,sequence_window=0"')
    parser.add_argument("--out", type=Path, default=None, help="results file or folder (default: benchmarks/out/)")
    args = parser.parse_args(argv)
    if not args.data.exists():
        print(f"LongMemEval data not found at {args.data}; pass its path with --data", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.roles.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--roles takes a comma-separated list of {', '.join(MODES)}")
    base = parse_set(args.set, ScoringConfig())
    variants = parse_variants(args.variants, base)
    block = provenance.provenance(argv if argv is None else [sys.argv[0], *argv])
    started = time.perf_counter()
    raws = load(args.data)
    if args.questions:
        raws = raws[: args.questions]
    results: dict[str, dict[str, dict[str, Any]]] = {}
    metas: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="longmemeval-") as tmp:
        for mode in (m for m in MODES if m in modes):
            outs, metas[mode] = run_mode(raws, mode, variants, Path(tmp))
            for name, o in outs.items():
                results.setdefault(name, {})[mode] = o.result()
    wall = time.perf_counter() - started
    md = markdown(results, metas)
    path = provenance.out_path("longmemeval.json", args.out)
    payload = {
        "benchmark": "LongMemEval_S dev retrieval (issue #31)",
        "data": provenance.relative(str(args.data)),
        "k_query": K_QUERY,
        "k_turn": K_TURN,
        "k_session": K_SESSION,
        "scoring": asdict(base),
        "set": args.set,
        "variants": {n: asdict(c) for n, c in variants.items()},
        "modes": metas,
        "results": results,
        "wall_s": wall,
        "table": md,
    }
    provenance.write_json(path, payload, block)
    print()
    print(md)
    print(provenance.summary(block))
    print(f"wrote {path}; whole run {wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

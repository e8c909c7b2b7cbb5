"""SQL engine benchmark: a scope against bare sqlite3 (same file settings) and naqsha 0.2.0.

For each size: insert throughput (autocommit, and batched in one transaction — one statement per
row, and executemany), point queries by primary key, an indexed range query, and `retrieve`
latency. Bare sqlite3 uses the same pragmas as the engine (WAL, synchronous=NORMAL, foreign keys);
naqsha runs in its own venv with its own defaults (see docs/peers.md). Medians of `--repeats`
runs; the scope's cost is quoted as a ratio to bare sqlite3.

    python benchmarks/bench_sql_engine.py --sizes 10000 100000

Writes benchmarks/results/sql_engine.json and .md. Run `bash benchmarks/peers/setup.sh` first to
include naqsha (skipped with a note otherwise).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import provenance  # noqa: E402
from engramdb import DynamicMemoryEngine, MemoryRetriever, MemoryScope  # noqa: E402
from engramdb.retrieval.evidence import EvidenceItem, render_evidence  # noqa: E402
from engramdb.retrieval.keywords import hits, keywords  # noqa: E402

DDL = "CREATE TABLE IF NOT EXISTS {t} (id INTEGER PRIMARY KEY, agent_id TEXT NOT NULL, content TEXT NOT NULL, created_ts REAL NOT NULL)"
INDEX = "CREATE INDEX IF NOT EXISTS {t}_ts ON {t}(created_ts)"
INSERT = "INSERT INTO {t} (agent_id, content, created_ts) VALUES (?, ?, ?)"
POINT = "SELECT agent_id, content, created_ts FROM {t} WHERE id = ?"
RANGE = "SELECT id, content FROM {t} WHERE created_ts BETWEEN ? AND ? ORDER BY created_ts LIMIT 20"
LOCOMO = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"


def corpus_rows(n: int, seed: int) -> tuple[list[tuple[str, str, float]], list[str]]:
    """Rows (agent, content, ts) and query texts: the synthetic corpus if present, else LoCoMo turns."""
    try:
        import corpus  # type: ignore[import-not-found]

        items = list(corpus.generate(n, seed=seed))
        rows = [(it.agent, it.content, float(it.created_at)) for it in items]
        qs = [q.text for q in corpus.queries(items[: min(n, 20_000)], 50, seed)]
        return rows, qs
    except ImportError:
        data = json.loads(LOCOMO.read_text())
        turns = [
            (t["speaker"].lower().replace(" ", "-"), t["text"])
            for conv in data
            for key, sess in conv["conversation"].items()
            if key.startswith("session_") and isinstance(sess, list)
            for t in sess
        ]
        rng = random.Random(seed)
        rows = [(*turns[i % len(turns)], 1_700_000_000.0 + i * 60 + rng.random()) for i in range(n)]
        qs = [qa["question"] for conv in data for qa in conv["qa"]][:50]
        return rows, qs


def bare_connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def per_op(samples: list[float], ops: int) -> dict[str, float]:
    """Median seconds per op over repeats, as microseconds and ops/s."""
    med = statistics.median(samples) / ops
    return {"us_per_op": round(med * 1e6, 3), "ops_per_s": round(1 / med, 1)}


def latencies(fn: Callable[[Any], Any], args: list[Any]) -> dict[str, float]:
    lat = []
    for a in args:
        t = time.perf_counter()
        fn(a)
        lat.append(time.perf_counter() - t)
    lat.sort()
    return {
        "p50_ms": round(lat[len(lat) // 2] * 1e3, 4),
        "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 4),
    }


def bare_retrieve(conn: sqlite3.Connection, table: str, query: str, budget: int) -> str:
    """The same ranking as MemoryRetriever, run on a bare connection: the retriever's floor."""
    kws = keywords(query)
    variants = sorted({v for k in kws for v in (k, k.upper(), k.title())})
    cond = " OR ".join(["instr(lower(content), ?) > 0"] * len(variants)) or "0"
    rows = conn.execute(
        f"SELECT id, content, created_ts FROM {table} WHERE content IS NOT NULL AND ({cond})", variants
    ).fetchall()
    ranked = sorted(((hits(c, kws), ts, rid, c) for rid, c, ts in rows), key=lambda r: (-r[0], -r[1], -r[2]))
    ranked = [r for r in ranked if r[0] > 0]
    items = [EvidenceItem(f"{table} row {rid}", c) for _, _, rid, c in ranked[:budget]]
    return render_evidence(items, budget)


def one_repeat(
    d: Path,
    rows: list[tuple[str, str, float]],
    ids: list[int],
    ranges: list[tuple[float, float]],
    autocommit_n: int,
    add: Callable[[str, float], None],
    *,
    reverse: bool,
) -> None:
    """One measurement of every operation, scope and bare side by side (order alternates by repeat)."""
    engine = DynamicMemoryEngine(d / "engram.db")
    scope: MemoryScope = engine.get_shared_scope()
    bare = bare_connect(d / "bare.db")
    for t in ("shared_auto", "shared_rows", "shared_many"):
        scope.execute(DDL.format(t=t))
        scope.execute(INDEX.format(t=t))
        bare.execute(DDL.format(t=t))
        bare.execute(INDEX.format(t=t))
    sub = rows[:autocommit_n]
    point_sql, range_sql = POINT.format(t="shared_rows"), RANGE.format(t="shared_rows")

    def scope_txn() -> None:
        with scope.transaction():
            for r in rows:
                scope.execute(INSERT.format(t="shared_rows"), r)

    def bare_txn() -> None:
        bare.execute("BEGIN IMMEDIATE")
        for r in rows:
            bare.execute(INSERT.format(t="shared_rows"), r)
        bare.execute("COMMIT")

    def scope_many() -> None:
        with scope.transaction():
            scope.executemany(INSERT.format(t="shared_many"), rows)

    def bare_many() -> None:
        bare.execute("BEGIN IMMEDIATE")
        bare.executemany(INSERT.format(t="shared_many"), rows)
        bare.execute("COMMIT")

    pairs: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = [
        (
            "autocommit",
            lambda: [scope.execute(INSERT.format(t="shared_auto"), r) for r in sub],
            lambda: [bare.execute(INSERT.format(t="shared_auto"), r) for r in sub],
        ),
        ("txn_rows", scope_txn, bare_txn),
        ("executemany", scope_many, bare_many),
        (
            "point",
            lambda: [scope.query(point_sql, (i,)) for i in ids],
            lambda: [bare.execute(point_sql, (i,)).fetchall() for i in ids],
        ),
        (
            "range",
            lambda: [scope.query(range_sql, r) for r in ranges],
            lambda: [bare.execute(range_sql, r).fetchall() for r in ranges],
        ),
    ]
    for name, on_scope, on_bare in pairs:
        order = [("bare", on_bare), ("scope", on_scope)] if reverse else [("scope", on_scope), ("bare", on_bare)]
        for side, fn in order:
            add(f"{name}.{side}", timed(fn))
    bare.close()
    engine.close()


def retrieve_latencies(d: Path, queries: list[str]) -> dict[str, Any]:
    """`retrieve` p50 / p99 through the scope and the same ranking on a bare connection."""
    engine = DynamicMemoryEngine(d / "engram.db")
    scope = engine.get_shared_scope()
    bare = bare_connect(d / "bare.db")
    retriever = MemoryRetriever(scope=scope, token_budget=512, table="shared_rows", include_unmatched=False)
    out = {
        "retrieve.scope": latencies(retriever.retrieve, queries),
        "retrieve.bare": latencies(lambda q: bare_retrieve(bare, "shared_rows", q, 512), queries),
    }
    bare.close()
    engine.close()
    return out


def bench_size(n: int, repeats: int, autocommit_n: int, seed: int, workdir: Path, with_peer: bool) -> dict[str, Any]:
    rows, queries = corpus_rows(n, seed)
    rng = random.Random(seed)
    ids = [rng.randint(1, n) for _ in range(2000)]
    ts_sorted = sorted(r[2] for r in rows)
    ranges = [(ts_sorted[i], ts_sorted[min(i + 50, n - 1)]) for i in (rng.randrange(n) for _ in range(1000))]
    out: dict[str, Any] = {"n": n}
    samples: dict[str, list[float]] = {}

    def add(name: str, seconds: float) -> None:
        samples.setdefault(name, []).append(seconds)

    for rep in range(repeats):
        d = workdir / f"n{n}-r{rep}"
        d.mkdir(parents=True)
        one_repeat(d, rows, ids, ranges, autocommit_n, add, reverse=rep % 2 == 1)
        if rep == 0:
            out.update(retrieve_latencies(d, queries))

    ops = {"autocommit": autocommit_n, "txn_rows": n, "executemany": n, "point": len(ids), "range": len(ranges)}
    for name, secs in samples.items():
        out[name] = per_op(secs, ops[name.split(".")[0]])
    for op in ops:
        out[f"{op}.ratio"] = round(out[f"{op}.scope"]["us_per_op"] / out[f"{op}.bare"]["us_per_op"], 3)
    out["retrieve.ratio"] = round(out["retrieve.scope"]["p50_ms"] / out["retrieve.bare"]["p50_ms"], 3)
    if with_peer:
        out["naqsha"] = run_naqsha(rows, queries, autocommit_n, workdir / f"naqsha-{n}")
    return out


def run_naqsha(
    rows: list[tuple[str, str, float]], queries: list[str], autocommit_n: int, data_dir: Path
) -> dict[str, Any]:
    from peers.client import PeerError, peer_python_reason, run_peer  # type: ignore[import-not-found]

    py, reason = peer_python_reason("naqsha")
    if py is None:
        return {"skipped": reason}
    payload = {
        "data_dir": str(data_dir),
        "rows": [{"id": str(i + 1), "content": c, "created_ts": ts} for i, (_, c, ts) in enumerate(rows)],
        "autocommit_rows": autocommit_n,
        "queries": [{"id": str(i), "text": q} for i, q in enumerate(queries)],
        "token_budget": 512,
        "point_queries": 2000,
    }
    try:
        res = run_peer("naqsha", "sql_bench", payload, timeout=3600)
    except PeerError as exc:
        return {"skipped": f"naqsha failed: {exc}"}
    t = res.get("timings", {})
    return {
        "autocommit_ops_per_s": t.get("insert_autocommit", {}).get("ops_per_s"),
        "txn_rows_ops_per_s": t.get("insert_batch_txn", {}).get("ops_per_s"),
        "point_p50_ms": t.get("point_query", {}).get("p50_ms"),
        "retrieve_p50_ms": t.get("retrieve", {}).get("p50_ms"),
        "retrieve_p99_ms": t.get("retrieve", {}).get("p99_ms"),
        "version": res.get("peer_version") or res.get("version"),
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| rows | operation | scope | bare sqlite3 | scope / bare | naqsha 0.2.0 |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        nq = r.get("naqsha", {})
        peer = {
            "autocommit": nq.get("autocommit_ops_per_s"),
            "txn_rows": nq.get("txn_rows_ops_per_s"),
        }
        for op, label in [
            ("autocommit", "insert, autocommit (rows/s)"),
            ("txn_rows", "insert, one txn, execute per row (rows/s)"),
            ("executemany", "insert, one txn, executemany (rows/s)"),
        ]:
            p = peer.get(op)
            lines.append(
                f"| {r['n']:,} | {label} | {r[op + '.scope']['ops_per_s']:,.0f} | {r[op + '.bare']['ops_per_s']:,.0f} | "
                f"{r[op + '.ratio']:.2f}× | {f'{p:,.0f}' if p else '—'} |"
            )
        for op, label in [("point", "point query by id (µs)"), ("range", "indexed range query (µs)")]:
            p = nq.get("point_p50_ms") if op == "point" else None
            lines.append(
                f"| {r['n']:,} | {label} | {r[op + '.scope']['us_per_op']:.1f} | {r[op + '.bare']['us_per_op']:.1f} | "
                f"{r[op + '.ratio']:.2f}× | {f'{p * 1000:.1f} (p50)' if p else '—'} |"
            )
        rs, rb = r["retrieve.scope"], r["retrieve.bare"]
        p50, p99 = nq.get("retrieve_p50_ms"), nq.get("retrieve_p99_ms")
        peer_cell = f"{p50:.2f} / {p99:.2f}" if p50 is not None and p99 is not None else nq.get("skipped", "—")
        lines.append(
            f"| {r['n']:,} | retrieve p50 / p99 (ms) | {rs['p50_ms']:.2f} / {rs['p99_ms']:.2f} | {rb['p50_ms']:.2f} / {rb['p99_ms']:.2f} | "
            f"{r['retrieve.ratio']:.2f}× | {peer_cell} |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--autocommit", type=int, default=2000, help="rows inserted one transaction each")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-sql-") as tmp:
        for n in args.sizes:
            results.append(bench_size(n, args.repeats, min(args.autocommit, n), args.seed, Path(tmp), not args.no_peer))
            print(f"done n={n}", file=sys.stderr)
    machine = f"{platform.machine()}, {platform.python_implementation()} {platform.python_version()}, SQLite {sqlite3.sqlite_version}"
    md = f"Machine: {machine}; medians of {args.repeats} runs.\n\n" + table(results)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sql_engine.json").write_text(
        json.dumps(provenance.stamp({"machine": machine, "repeats": args.repeats, "results": results}), indent=2)
    )
    (args.out / "sql_engine.md").write_text(md + "\n")


if __name__ == "__main__":
    main()

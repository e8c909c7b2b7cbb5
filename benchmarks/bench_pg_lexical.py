"""Lexical candidates on PostgreSQL: the in-process BM25 channel against PostgreSQL full-text search.

Issue 17 asks which lexical channel recall should use on a server. Per size (``--sizes``, default
10k and 100k) the synthetic corpus (`corpus.generate(n, seed, tenants=1, agents=8)`, its queries
and their relevant memories as in `bench_recall.py`) is stored through the engine on a real
PostgreSQL 16 (``pgserver``, as the tests start it, or ``--pg-url``), each memory by its own
agent's handle (``shared`` as generated), and every query is asked by its own agent, so the
reader's visibility (tenant, own-or-shared, cap, archived, validity at now) is not trivial.

For the same queries and the same `Visibility`:

- **in-process**: `engine._runtime.recaller.lexical.search(stems, k, vis)` after `refresh`, with the stems
  made as `retrieval/recall.py` makes them (`keywords` then `stem`); the visible set is an array
  mask applied before ranking.
- **PostgreSQL full text**, two layouts: a GIN expression index on
  ``to_tsvector('english', title || ' ' || content)``, and a stored generated ``tsvector`` column
  with a GIN index on it. Queried with ``to_tsquery('english', 'w1 | w2 | …')`` over the query's
  keywords, ranked by ``ts_rank_cd`` and by ``ts_rank``, the engine's visibility predicate
  (`engramdb.storage.postgres.visibility.predicate`) inside the WHERE, ``ORDER BY rank DESC LIMIT k``.
  The statements run through the engine's own connection (`backend.store.run(tenant, …)`): as the
  engine role, which has no BYPASSRLS, with ``engramdb.tenant`` set, so row-level security applies
  exactly as to the engine's statements. The indexes are built by the admin URL's role (the tables'
  owner), as a migration would. The stored-column layout is also run on the admin URL's connection
  when that role is a superuser (``*_superuser`` rows: RLS not applied, the same predicate inside),
  because under RLS the planner cannot use the GIN index (``@@`` is not LEAKPROOF): those rows show
  what the index itself would cost. ``plan_uses_index`` records what EXPLAIN chose for each.

Then LoCoMo (``--locomo-data``; skipped when the file is missing, or with ``--no-locomo``): each
conversation a tenant of its own, its turns stored as `bench_locomo.py` stores them (no links),
questions of categories 1-4 asked in their conversation's tenant, the evidence turns as gold.

Reported: recall@10 of the lexical candidates alone (k = 10); recall@50 (the candidate pool recall
asks each channel for, `ScoringConfig().candidates`) and recall@100, both read from the k = 100
list; p50 / p99 per query at k = 10 and k = 100 (no query embedding: the engine runs without a
memory embedder); index build time and size. The expression-index layout is timed on the first
``--expression-queries`` queries only (it re-parses every matching memory per query).

    python benchmarks/bench_pg_lexical.py                     # 10k, 100k and LoCoMo: ~4 min on 2 cores
    python benchmarks/bench_pg_lexical.py --sizes 10000

Prints a table and writes benchmarks/results/pg_lexical.json (commit, clean or dirty tree,
machine, load before and after, the command).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import corpus  # noqa: E402
import locomo  # noqa: E402
import provenance  # noqa: E402
from peers._common import latency_stats  # noqa: E402

DOC = "title || ' ' || content"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fields(spec: corpus.MemorySpec) -> dict[str, Any]:
    return {
        "content": spec.content,
        "type": spec.type,
        "importance": spec.importance,
        "salience": spec.salience,
        "confidence": spec.confidence,
        "tags": list(spec.tags),
        "entities": list(spec.entities),
        "title": spec.title,
        "status": spec.status,
        "created_at": spec.created_at,
        "shared": spec.shared,
    }


def recall_at(ranked: list[str], relevant: tuple[str, ...], k: int) -> float:
    return len(set(ranked[:k]) & set(relevant)) / len(relevant) if relevant else 0.0


def tsquery_text(words: list[str]) -> str:
    """The OR of the query's keywords in `to_tsquery` syntax. `keywords` yields only Unicode
    letters and digits, so no word carries tsquery operators; each is quoted anyway."""
    return " | ".join("'" + w.replace("'", "''") + "'" for w in words)


def pg_sql(vector: str, rank: str, pred: str) -> str:
    """One full-text candidate query: `vector` is the tsvector expression the index was built on."""
    return (
        f"SELECT m.n FROM engram.engram_memories m, to_tsquery('english', %(q)s) q "
        f"WHERE {vector} @@ q AND {pred} "
        f"ORDER BY {rank}({vector}, q) DESC, m.n LIMIT %(k)s"
    )


def measure(
    queries: list[tuple[corpus.QuerySpec, Any]],
    key_of: dict[int, str],
    run: Callable[[corpus.QuerySpec, Any, int], list[int]],
    pool: int,
) -> dict[str, Any]:
    """recall@10 and latency at k = 10; latency at k = 100 and recall@`pool` and @100 read from
    that list's prefix (every channel returns a total order, best first, so its first `pool` are
    what k = `pool` returns, up to ties at the boundary), over `queries`."""
    r10, rpool, r100, lat10, lat100 = [], [], [], [], []
    for q, prep in queries:
        t = time.perf_counter()
        top10 = run(q, prep, 10)
        lat10.append(time.perf_counter() - t)
        t = time.perf_counter()
        top = run(q, prep, 100)
        lat100.append(time.perf_counter() - t)
        keys = [key_of.get(n, "?") for n in top]
        r10.append(recall_at([key_of.get(n, "?") for n in top10], q.relevant_keys, 10))
        rpool.append(recall_at(keys, q.relevant_keys, pool))
        r100.append(recall_at(keys, q.relevant_keys, 100))
    s10, s100 = latency_stats(lat10), latency_stats(lat100)
    return {
        "queries": len(queries),
        "recall_at_10": round(statistics.mean(r10), 4),
        f"recall_at_{pool}": round(statistics.mean(rpool), 4),
        "recall_at_100": round(statistics.mean(r100), 4),
        "k10_p50_ms": s10["p50_ms"],
        "k10_p99_ms": s10["p99_ms"],
        "k100_p50_ms": s100["p50_ms"],
        "k100_p99_ms": s100["p99_ms"],
    }


def run_size(n: int, args: argparse.Namespace) -> dict[str, Any]:
    """The synthetic corpus at `n` memories, each stored by its own agent; each query asked by its agent."""
    import psycopg

    from engramdb import DynamicMemoryEngine
    from engramdb.memories.model import Visibility
    from tests import pg_server

    specs = list(corpus.generate(n, seed=args.seed, tenants=1, agents=args.agents))
    qs = corpus.queries(specs, args.queries, seed=args.seed)
    row: dict[str, Any] = {"data": "synthetic", "n": n, "load_before": [round(x, 2) for x in os.getloadavg()]}
    with pg_server.fresh_database("edblex") as url, DynamicMemoryEngine(url, memory_embedder=None) as eng:
        by_agent: dict[str, list[corpus.MemorySpec]] = defaultdict(list)
        for s in specs:
            by_agent[s.agent].append(s)
        id_key: dict[str, str] = {}
        t0 = time.perf_counter()
        for agent, mine in by_agent.items():
            handle = eng.agent(agent)
            for i in range(0, len(mine), args.batch):
                chunk = mine[i : i + args.batch]
                for s, m in zip(chunk, handle.remember_many([fields(x) for x in chunk], dedup=False), strict=True):
                    id_key[m.id] = s.key
        row["store_s"] = round(time.perf_counter() - t0, 1)
        log(f"{n}: stored in {row['store_s']} s")
        with psycopg.connect(eng._backend.url, autocommit=True) as admin:
            key_of = {
                int(r[0]): id_key[r[1]]
                for r in admin.execute("SELECT n, id FROM engram.engram_memories")
                if r[1] in id_key
            }
        row["stored"] = len(key_of)
        now = time.time()  # recall's as_of when none is given; the same for every channel
        tenant = eng.agent(qs[0].agent).tenant
        asked = [(q, Visibility(tenant=tenant, reader=q.agent, as_of=now)) for q in qs]
        row.update(compare(eng, asked, key_of, args, f"{n}"))
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return row


def run_locomo(args: argparse.Namespace) -> dict[str, Any]:
    """LoCoMo: each conversation stored as a tenant of its own (agent ``bench``, its turns as
    episodes at their dates, the speaker as entity, as `bench_locomo.py` stores them but without
    links); questions of categories 1-4, asked in their conversation's tenant; gold = evidence turns."""
    import psycopg

    from engramdb import DynamicMemoryEngine
    from engramdb.memories.model import Visibility
    from tests import pg_server

    convs = locomo.load_locomo(args.locomo_data, categories=(1, 2, 3, 4))
    row: dict[str, Any] = {"data": "locomo", "load_before": [round(x, 2) for x in os.getloadavg()]}
    with pg_server.fresh_database("edblexl") as url, DynamicMemoryEngine(url, memory_embedder=None) as eng:
        id_key: dict[str, str] = {}
        asked: list[tuple[corpus.QuerySpec, Any]] = []
        now = time.time()
        t0 = time.perf_counter()
        for conv in convs:
            handle = eng.agent("bench", tenant=conv.sample_id)
            turns = list(conv.turns)
            for i in range(0, len(turns), args.batch):
                chunk = turns[i : i + args.batch]
                got = handle.remember_many(
                    [
                        {"content": t.content, "type": "episode", "created_at": t.ts, "entities": [t.speaker]}
                        for t in chunk
                    ],
                    dedup=False,
                )
                for t, m in zip(chunk, got, strict=True):
                    id_key[m.id] = f"{conv.sample_id}:{t.position}"
            vis = Visibility(tenant=conv.sample_id, reader="bench", as_of=now)
            for q in conv.questions:
                gold = tuple(f"{conv.sample_id}:{p}" for p in sorted(q.gold))
                asked.append((corpus.QuerySpec(q.question, conv.sample_id, "bench", gold), vis))
        row["store_s"] = round(time.perf_counter() - t0, 1)
        with psycopg.connect(eng._backend.url, autocommit=True) as admin:
            key_of = {
                int(r[0]): id_key[r[1]]
                for r in admin.execute("SELECT n, id FROM engram.engram_memories")
                if r[1] in id_key
            }
        row["n"] = row["stored"] = len(key_of)
        log(f"locomo: {len(key_of)} turns of {len(convs)} conversations, {len(asked)} questions")
        row.update(compare(eng, asked, key_of, args, "locomo"))
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return row


def compare(
    eng: Any, asked: list[tuple[corpus.QuerySpec, Any]], key_of: dict[int, str], args: argparse.Namespace, label: str
) -> dict[str, Any]:
    """Every channel on the same (query, visibility) pairs: the in-process BM25, then PostgreSQL
    full text in each layout, as the engine role and (stored column) as the superuser."""
    import psycopg

    from engramdb.retrieval.keywords import keywords, stem
    from engramdb.storage.postgres.visibility import predicate

    backend = eng._backend
    pool = eng.scoring.candidates
    with psycopg.connect(backend.url, autocommit=True) as admin:
        admin.execute("ANALYZE engram.engram_memories")
    prepared = []
    for q, vis in asked:
        kws = keywords(q.text)
        prepared.append((q, (vis, list(dict.fromkeys(stem(w) for w in kws)), kws)))

    # -- in-process BM25 ----------------------------------------------------------------------
    lex = eng._runtime.recaller.lexical
    t = time.perf_counter()
    lex.refresh(backend)
    build = time.perf_counter() - t
    nbytes = sum(v.nbytes for v in vars(lex).values() if hasattr(v, "nbytes"))
    nbytes += sum(v.nbytes for v in vars(lex.cols).values() if hasattr(v, "nbytes"))
    noop = []
    for _ in range(50):
        t = time.perf_counter()
        lex.refresh(backend)  # what each recall pays first: a look at the change sequence
        noop.append(time.perf_counter() - t)
    res: dict[str, Any] = {
        "in_process_bm25": {
            **measure(prepared, key_of, lambda q, p, k: list(lex.search(p[1], k, p[0])), pool),
            "build_s": round(build, 2),
            "size_mb": round(nbytes / 2**20, 1),
            "size_note": "numpy arrays only (postings, lengths, visibility columns); the vocabulary dict is not counted",
            "refresh_noop_p50_ms": latency_stats(noop)["p50_ms"],
        }
    }
    log(f"{label}: in-process {res['in_process_bm25']}")

    # -- PostgreSQL full text -----------------------------------------------------------------
    def engine_role(vector: str, rank: str) -> Callable[[corpus.QuerySpec, Any, int], list[int]]:
        def go(q: corpus.QuerySpec, p: Any, k: int) -> list[int]:
            pred, params = predicate(p[0])  # this reader's visibility, inside the statement
            sql, a = pg_sql(vector, rank, pred), dict(params, q=tsquery_text(p[2]), k=k)
            return backend.store.run(p[0].tenant, lambda db: [int(r[0]) for r in db.execute(sql, a)])

        return go

    def superuser(admin: Any, vector: str, rank: str) -> Callable[[corpus.QuerySpec, Any, int], list[int]]:
        def go(q: corpus.QuerySpec, p: Any, k: int) -> list[int]:
            pred, params = predicate(p[0])  # the same predicate; only RLS is not applied
            sql, a = pg_sql(vector, rank, pred), dict(params, q=tsquery_text(p[2]), k=k)
            return [int(r[0]) for r in admin.execute(sql, a)]

        return go

    layouts = {
        "expression": (
            f"CREATE INDEX engram_memories_fts ON engram.engram_memories USING gin (to_tsvector('english', {DOC}))",
            "to_tsvector('english', m.title || ' ' || m.content)",  # the index's expression
        ),
        "stored_column": (
            f"ALTER TABLE engram.engram_memories ADD COLUMN fts tsvector "
            f"GENERATED ALWAYS AS (to_tsvector('english', {DOC})) STORED; "
            f"CREATE INDEX engram_memories_fts ON engram.engram_memories USING gin (fts)",
            "m.fts",
        ),
    }
    with psycopg.connect(backend.url, autocommit=True) as admin:
        row = admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        is_super = bool(row and row[0])
        for layout, (ddl, vector) in layouts.items():
            before = admin.execute("SELECT pg_table_size('engram.engram_memories')").fetchone()
            t = time.perf_counter()
            for stmt in ddl.split("; "):
                admin.execute(stmt)
            admin.execute("ANALYZE engram.engram_memories")
            built = time.perf_counter() - t
            idx = admin.execute("SELECT pg_relation_size('engram.engram_memories_fts')").fetchone()
            after = admin.execute("SELECT pg_table_size('engram.engram_memories')").fetchone()
            sizes = {
                "build_s": round(built, 2),
                "index_mb": round(int(idx[0]) / 2**20, 1) if idx else None,
                "column_mb": round((int(after[0]) - int(before[0])) / 2**20, 1)
                if layout == "stored_column" and after and before
                else 0.0,
            }
            # Ranking by the expression re-parses every matching memory's text per query, so
            # this layout is timed on the first --expression-queries queries only.
            subset = prepared if layout == "stored_column" else prepared[: args.expression_queries]
            runs = [("", engine_role)]
            if layout == "stored_column" and is_super:
                runs.append(("_superuser", lambda v, r: superuser(admin, v, r)))
            for suffix, make in runs:
                for rank in ("ts_rank_cd", "ts_rank"):
                    name = f"pg_{layout}_{rank}{suffix}"
                    plan_as = admin if suffix else None
                    res[name] = {
                        **measure(subset, key_of, make(vector, rank), pool),
                        "plan_uses_index": uses_index(backend, plan_as, vector, rank, prepared[0][1]),
                        **sizes,
                    }
                    log(f"{label}: {name} {res[name]}")
            admin.execute("DROP INDEX engram.engram_memories_fts")
            if layout == "stored_column":
                admin.execute("ALTER TABLE engram.engram_memories DROP COLUMN fts")
    return {"channels": res, "pool": pool, "queries": len(prepared)}


def uses_index(backend: Any, admin: Any, vector: str, rank: str, prep: Any) -> bool:
    """Whether the planner reads the GIN index for the first query (EXPLAIN, as the engine role, or
    on `admin` when given)."""
    from engramdb.storage.postgres.visibility import predicate

    pred, params = predicate(prep[0])
    sql = pg_sql(vector, rank, pred)
    a = dict(params, q=tsquery_text(prep[2]), k=100)
    if admin is not None:
        return any("engram_memories_fts" in str(r[0]) for r in admin.execute("EXPLAIN " + sql, a))
    lines = backend.store.run(prep[0].tenant, lambda db: [str(r[0]) for r in db.execute("EXPLAIN " + sql, a)])
    return any("engram_memories_fts" in line for line in lines)


def git_state() -> dict[str, Any]:
    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=HERE.parent, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"), "tree": "dirty" if git("status", "--porcelain") else "clean"}


def table(rows: list[dict[str, Any]]) -> str:
    pool = rows[0]["pool"] if rows else 100
    head = (
        f"| data | n | channel | queries | recall@10 | recall@{pool} | recall@100 | p50 ms (k=10) | p99 ms (k=10) | "
        "p50 ms (k=100) | p99 ms (k=100) | build s | size MB |"
    )
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        for name, c in r["channels"].items():
            size = c.get("size_mb", (c.get("index_mb") or 0) + c.get("column_mb", 0))
            lines.append(
                f"| {r['data']} | {r['n']:,} | {name} | {c['queries']} | {c['recall_at_10']:.3f} | {c[f'recall_at_{pool}']:.3f} | "
                f"{c['recall_at_100']:.3f} | {c['k10_p50_ms']:.2f} | {c['k10_p99_ms']:.2f} | "
                f"{c['k100_p50_ms']:.2f} | {c['k100_p99_ms']:.2f} | {c['build_s']:.2f} | {size:.1f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--agents", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument(
        "--expression-queries",
        type=int,
        default=50,
        help="queries timed on the expression-index layout (it re-parses every match per query)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--locomo-data",
        type=Path,
        default=locomo.DEFAULT_DATA,
        help="LoCoMo's locomo10.json (skipped when missing)",
    )
    ap.add_argument("--no-locomo", action="store_true", help="the synthetic corpus only")
    ap.add_argument("--pg-url", default=None, help="an admin URL of a running server (default: pgserver)")
    ap.add_argument("--out", type=Path, default=None, help="file or folder (default: benchmarks/out/)")
    args = ap.parse_args(argv)
    command = provenance.provenance(["benchmarks/bench_pg_lexical.py", *(argv if argv is not None else sys.argv[1:])])[
        "command"
    ]
    block = provenance.provenance()
    meta = {
        **git_state(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}",
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "command": command.strip(),
        "role": (
            "pg_*: the engine role (no BYPASSRLS) through backend.store.run with engramdb.tenant set, so RLS "
            "applies as to the engine's statements; pg_*_superuser: the admin URL's superuser, RLS not applied, "
            "the same visibility predicate inside"
        ),
    }
    if args.pg_url:
        os.environ["ENGRAMDB_TEST_PG_URL"] = args.pg_url
    rows = [run_size(n, args) for n in args.sizes]
    if not args.no_locomo:
        if args.locomo_data.exists():
            rows.append(run_locomo(args))
        else:
            log(f"LoCoMo skipped: no {args.locomo_data}")
    meta["load_after"] = [round(x, 2) for x in os.getloadavg()]
    provenance.write_json(provenance.out_path("pg_lexical.json", args.out), {**meta, "rows": rows}, block)
    print(table(rows))
    print(
        f"({meta['commit']}, {meta['tree']} tree, {meta['machine']}, load {meta['load_before']} -> {meta['load_after']})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

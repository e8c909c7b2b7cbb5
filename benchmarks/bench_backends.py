"""Backends benchmark: the same engine on SQLite and on PostgreSQL, in one run, on the same data.

Per size (``--sizes``, default 10k) and backend, on the synthetic corpus (`corpus.generate(n,
seed, tenants=1, agents=8)`), every memory stored through one agent handle so each recall searches
all n memories:

- **remember, batched**: `remember_many` in batches of ``--batch`` (dedup off): memories per second.
- **remember, single**: the last ``--single`` memories one `remember` call each (dedup off).
- **recall**: `recall(query, k=10, hops=1)` over ``--queries`` corpus queries, after one untimed
  recall (it loads the in-process caches); p50 / p99. Every recall also writes its accesses (the
  access stream, rings, the recall log), as in use.
- **vector candidates** (PostgreSQL): the in-process channel against pgvector's exact scan with
  the visibility predicate inside, and with ``--hnsw`` an HNSW index (built after the recalls).
- **concurrent writers**: ``--clients`` processes (spawned, each its own engine on the same store)
  × ``--writes`` `remember` calls each, started together: writes per second over the wall time
  from the start signal to the last one done, and lost writes (expected − stored; must be 0).

PostgreSQL is a real server: ``--pg-url`` (an admin URL; a fresh database is made per size and
dropped after), or by default the ``pgserver`` package's PostgreSQL 16 + pgvector (the ``test``
extra), as the tests use it. SQLite is a WAL file in a temporary directory.

    python benchmarks/bench_backends.py                       # 10k, a few minutes on 2 cores
    python benchmarks/bench_backends.py --sizes 10000 100000

Prints a table and writes benchmarks/results/backends.json (commit, clean or dirty tree,
machine, load before and after, the command).
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(1, str(HERE.parent))

import corpus  # noqa: E402
import provenance  # noqa: E402
from peers._common import latency_stats  # noqa: E402

AGENT = "bench"


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


def embedder(name: str) -> Any:
    if name == "fake":
        from engramdb.testing import fake_embedder

        return fake_embedder()
    return "default"


@contextlib.contextmanager
def store(backend: str, pg_url: str | None, tmp: Path, n: int) -> Iterator[str]:
    """Where the engine opens: a file path, or the URL of a fresh database (dropped after)."""
    if backend == "sqlite":
        yield str(tmp / f"bench-{n}.db")
        return
    from tests import pg_server

    if pg_url:
        os.environ["ENGRAMDB_TEST_PG_URL"] = pg_url
    with pg_server.fresh_database("edbbench") as url:
        if backend == "postgres-async":
            # Commits return before their WAL reaches the disk: a server crash may lose the last
            # few hundred milliseconds of commits (never corrupts), as SQLite's NORMAL may on power loss.
            url += ("&" if "?" in url else "?") + "options=-c%20synchronous_commit%3Doff"
        yield url


# -- concurrent writers ---------------------------------------------------------------------------


def _writer(location: str, emb: str, client: int, writes: int, ready: Any, go: Any, out: Any) -> None:
    from engramdb import DynamicMemoryEngine

    with DynamicMemoryEngine(location, memory_embedder=embedder(emb)) as eng:
        agent = eng.agent(f"writer-{client}")
        agent.remember("warm up the connection and the embedder", dedup=False)
        ready.release()
        go.wait()
        for i in range(writes):
            agent.remember(
                f"client {client} write {i}: the batch job {i % 97} finished in {i % 13} minutes", dedup=False
            )
        out.put((client, time.time()))


def concurrent_writes(location: str, emb: str, clients: int, writes: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_writer, args=(location, emb, c, writes, ready, go, out)) for c in range(clients)]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=300):
            raise RuntimeError("a writer did not start")
    start = time.time()
    go.set()
    ends = [out.get(timeout=1800)[1] for _ in procs]
    for p in procs:
        p.join(60)
    if any(p.exitcode != 0 for p in procs):
        raise RuntimeError(f"writers failed: {[p.exitcode for p in procs]}")
    wall = max(ends) - start
    from engramdb import DynamicMemoryEngine

    with DynamicMemoryEngine(location, memory_embedder=None) as eng:
        mine = [[m for m in eng.agent(f"writer-{c}").memories() if m.author == f"writer-{c}"] for c in range(clients)]
        stored = sum(len(ms) - 1 for ms in mine)  # less the warm-up write
    expected = clients * writes
    return {
        "clients": clients,
        "writes_each": writes,
        "wall_s": round(wall, 3),
        "writes_per_s": round(expected / wall, 1),
        "stored": stored,
        "lost_writes": expected - stored,
    }


# -- one size on one backend ----------------------------------------------------------------------


def run(backend: str, n: int, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from engramdb import DynamicMemoryEngine

    specs = list(corpus.generate(n, seed=args.seed, tenants=1, agents=8))
    qs = corpus.queries(specs, args.queries, seed=args.seed)
    row: dict[str, Any] = {"backend": backend, "n": n, "load_before": [round(x, 2) for x in os.getloadavg()]}
    with store(backend, args.pg_url, tmp, n) as location:
        with DynamicMemoryEngine(location, memory_embedder=embedder(args.embedder)) as eng:
            agent = eng.agent(AGENT)
            bulk, single = specs[: n - args.single], specs[n - args.single :]
            t0 = time.perf_counter()
            it = iter(bulk)
            while chunk := list(islice(it, args.batch)):
                agent.remember_many([fields(s) for s in chunk], dedup=False)
            batched = time.perf_counter() - t0
            row["remember_batched_per_s"] = round(len(bulk) / batched, 1)
            times = []
            for s in single:
                t = time.perf_counter()
                agent.remember(**fields(s), dedup=False)
                times.append(time.perf_counter() - t)
            row["remember_single"] = latency_stats(times)
            row["remember_single_per_s"] = round(len(times) / sum(times), 1)
            log(f"{backend} {n}: built ({row['remember_batched_per_s']}/s batched)")
            first = time.perf_counter()
            agent.recall(qs[0].text, k=10, hops=1)
            row["first_recall_ms"] = round((time.perf_counter() - first) * 1000, 2)
            lat = []
            for _ in range(args.rounds):
                for q in qs:
                    t = time.perf_counter()
                    agent.recall(q.text, k=10, hops=1)
                    lat.append(time.perf_counter() - t)
            row["recall"] = latency_stats(lat)
            log(f"{backend} {n}: recall p50 {row['recall']['p50_ms']} ms")
            if backend.startswith("postgres") and eng._runtime.vectors is not None:
                row["vector_candidates"] = knn_versus_in_process(eng, [q.text for q in qs], hnsw=args.hnsw)
                log(f"{backend} {n}: vector candidates {row['vector_candidates']}")
        row["concurrent"] = concurrent_writes(location, args.embedder, args.clients, args.writes)
        log(f"{backend} {n}: {row['concurrent']}")
    row["load_after"] = [round(x, 2) for x in os.getloadavg()]
    return row


def knn_versus_in_process(eng: Any, texts: list[str], *, hnsw: bool) -> dict[str, Any]:
    """The vector candidates of recall, on the same visibility and k: the in-process channel (what
    recall uses), pgvector's exact ``<=>`` scan with the visibility predicate inside the query
    (`PgMemoryVectors.knn`), and with `hnsw` an HNSW expression index for the embedder's dimension
    (visibility applied to its top k, after the index scan); latency, and top-10 overlap with the
    in-process channel."""
    import psycopg

    from engramdb.memories.model import Visibility
    from engramdb.storage.postgres.visibility import predicate

    vis = Visibility(tenant="default", reader=AGENT)
    k = eng.scoring.candidates
    emb = eng.memory_embedder
    backend = eng._backend
    out: dict[str, Any] = {"k": k}
    hnsw_sql = None
    if hnsw:
        with psycopg.connect(backend.url, autocommit=True) as pg:  # the tables' owner builds it
            t = time.perf_counter()
            pg.execute(
                f"CREATE INDEX engram_vectors_hnsw ON engram.engram_vectors USING hnsw "
                f"((vec::vector({emb.dim})) vector_cosine_ops) WHERE model = '{emb.name}'"
            )
            pg.execute("ANALYZE engram.engram_vectors")
            out["hnsw_build_s"] = round(time.perf_counter() - t, 2)
        pred, params = predicate(vis)
        cast = f"::vector({emb.dim})"
        hnsw_sql = (
            f"SELECT m.n FROM (SELECT v.tenant, v.n, v.vec{cast} <=> %(q)s{cast} AS d FROM engram.engram_vectors v "
            f"WHERE v.model = %(model)s ORDER BY v.vec{cast} <=> %(q)s{cast} LIMIT %(k)s) c "
            f"JOIN engram.engram_memories m ON m.tenant = c.tenant AND m.n = c.n WHERE {pred} ORDER BY c.d"
        )
    lat: dict[str, list[float]] = {"in_process": [], "pgvector_exact": [], "pgvector_hnsw": []}
    agree: dict[str, list[float]] = {"pgvector_exact": [], "pgvector_hnsw": []}
    for text in texts:
        q = emb.embed([text])[0]
        t = time.perf_counter()
        mine = eng._runtime.vectors.search(q, k, vis)
        lat["in_process"].append(time.perf_counter() - t)
        top = set(sorted(mine, key=lambda key: -mine[key])[:10])
        t = time.perf_counter()
        exact = [key for key, _ in backend.vectors.knn(vis, emb.name, q.tobytes(), k)]
        lat["pgvector_exact"].append(time.perf_counter() - t)
        agree["pgvector_exact"].append(len(top & set(exact[:10])) / max(1, len(top)))
        if hnsw_sql is not None:
            args = dict(params, q=q, model=emb.name, k=k)
            t = time.perf_counter()
            got = backend.store.run(vis.tenant, lambda db, a=args: [r[0] for r in db.execute(hnsw_sql, a, binary=True)])
            lat["pgvector_hnsw"].append(time.perf_counter() - t)
            agree["pgvector_hnsw"].append(len(top & set(got[:10])) / max(1, len(top)))
    if hnsw:  # gone again, so it does not slow the concurrent writers measured next
        with psycopg.connect(backend.url, autocommit=True) as pg:
            pg.execute("DROP INDEX engram.engram_vectors_hnsw")
    for name, values in lat.items():
        if values:
            stats = latency_stats(values)
            out[f"{name}_p50_ms"], out[f"{name}_p99_ms"] = stats["p50_ms"], stats["p99_ms"]
    for name, values in agree.items():
        if values:
            out[f"{name}_top10_overlap"] = round(sum(values) / len(values), 3)
    return out


def git_state() -> dict[str, Any]:
    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=HERE.parent, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"), "tree": "dirty" if git("status", "--porcelain") else "clean"}


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| backend | n | remember batched /s | remember single /s | recall p50 ms | recall p99 ms | "
        "8 writers /s | lost |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        c = r["concurrent"]
        lines.append(
            f"| {r['backend']} | {r['n']:,} | {r['remember_batched_per_s']:,.0f} | {r['remember_single_per_s']:,.0f} | "
            f"{r['recall']['p50_ms']:.2f} | {r['recall']['p99_ms']:.2f} | {c['writes_per_s']:,.0f} | {c['lost_writes']} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    ap.add_argument(
        "--backends",
        nargs="+",
        default=["sqlite", "postgres", "postgres-async"],
        choices=["sqlite", "postgres", "postgres-async"],
        help="postgres-async: synchronous_commit=off (SQLite runs with synchronous=NORMAL)",
    )
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--single", type=int, default=200)
    ap.add_argument("--queries", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--writes", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--embedder", choices=["default", "fake"], default="default")
    ap.add_argument("--hnsw", action="store_true", help="also measure a pgvector HNSW index (built after recall)")
    ap.add_argument("--pg-url", default=None, help="an admin URL of a running server (default: pgserver)")
    ap.add_argument("--out", type=Path, default=None, help="file or folder (default: benchmarks/out/)")
    args = ap.parse_args(argv)
    command = provenance.provenance(["benchmarks/bench_backends.py", *(argv if argv is not None else sys.argv[1:])])[
        "command"
    ]
    block = provenance.provenance()
    meta = {
        **git_state(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, CPython {platform.python_version()}",
        "load_before": [round(x, 2) for x in os.getloadavg()],
        "command": command.strip(),
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="edb-bench-") as tmp:
        for n in args.sizes:
            for backend in args.backends:
                rows.append(run(backend, n, args, Path(tmp)))
    meta["load_after"] = [round(x, 2) for x in os.getloadavg()]
    by = {(r["backend"], r["n"]): r for r in rows}
    ratios = {
        f"{pg}@{n}": round(by[(pg, n)]["recall"]["p50_ms"] / by[("sqlite", n)]["recall"]["p50_ms"], 2)
        for n in args.sizes
        for pg in ("postgres", "postgres-async")
        if (pg, n) in by and ("sqlite", n) in by
    }
    result = {**meta, "recall_p50_ratio_pg_over_sqlite": ratios, "rows": rows}
    provenance.write_json(provenance.out_path("backends.json", args.out), result, block)
    print(table(rows))
    print(f"recall p50 PostgreSQL / SQLite: {ratios}   ({meta['commit']}, {meta['tree']} tree, {meta['machine']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

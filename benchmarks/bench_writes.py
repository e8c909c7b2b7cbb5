"""One `remember` at a time: its latency on SQLite and on PostgreSQL, in one run (issue #30's
"remember on PostgreSQL ≤ 2× SQLite's p50").

Per backend, a store with ``--warm`` memories of the synthetic corpus (`benchmarks/corpus.py`,
written with `remember_many`), one recall (the caches loaded, as in use), then ``--n`` further
memories of the corpus written one `remember` call each to both stores side by side (which goes
first alternates, so drifts in the machine's load fall on both alike), with dedup on (the default) and then
off; p50 / p99 of each call, and the server's statement count per call on PostgreSQL
(``pg_stat_database.xact_commit`` and ``pg_stat_statements`` are not needed: the engine's own
statements are counted by wrapping the driver's cursor for the run).

PostgreSQL is pgserver's PostgreSQL 16 (or ``--pg-url``), over a Unix socket, with its default
``synchronous_commit = on``; SQLite is a WAL file with ``synchronous = NORMAL`` (the defaults).

    python benchmarks/bench_writes.py

Prints a table and writes benchmarks/results/writes.json (commit, tree, machine, load).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402
import provenance  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def item(s: corpus.MemorySpec) -> dict[str, Any]:
    return {"content": s.content, "type": s.type, "tags": list(s.tags), "entities": list(s.entities),
            "created_at": s.created_at, "shared": True}  # fmt: skip


@contextlib.contextmanager
def location(backend: str, tmp: Path, pg_url: str | None) -> Iterator[str]:
    if backend == "sqlite":
        yield str(tmp / "writes.db")
        return
    from tests import pg_server

    if pg_url:
        os.environ["ENGRAMDB_TEST_PG_URL"] = pg_url
    with pg_server.fresh_database("edbwrites") as url:
        yield url


@contextlib.contextmanager
def counted() -> Iterator[list[int]]:
    """Count the statements psycopg sends (execute and each executemany) while inside."""
    import psycopg

    count = [0]
    real_exec, real_many = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def execute(self: Any, *a: Any, **k: Any) -> Any:
        count[0] += 1
        return real_exec(self, *a, **k)

    def executemany(self: Any, *a: Any, **k: Any) -> Any:
        count[0] += 1
        return real_many(self, *a, **k)

    psycopg.Cursor.execute, psycopg.Cursor.executemany = execute, executemany  # type: ignore[method-assign]
    try:
        yield count
    finally:
        psycopg.Cursor.execute, psycopg.Cursor.executemany = real_exec, real_many  # type: ignore[method-assign]


def run(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Both backends' stores, warmed alike, then each memory written to both, the two calls side by
    side (which goes first alternates), so that the machine's drifts in load fall on both alike."""
    from engramdb import DynamicMemoryEngine

    specs = list(corpus.generate(args.warm + 2 * args.n, seed=args.seed, tenants=1, agents=4))
    backends = ("sqlite", "postgres")
    out: dict[str, dict[str, Any]] = {b: {"backend": b} for b in backends}
    with contextlib.ExitStack() as stack:
        agents = {}
        for b in backends:
            eng = stack.enter_context(DynamicMemoryEngine(stack.enter_context(location(b, tmp, args.pg_url))))
            agents[b] = agent = eng.agent("writer")
            agent.remember_many([item(s) for s in specs[: args.warm]], dedup=False)
            agent.recall("status update")
        rest = specs[args.warm :]
        for dedup, part in ((True, rest[: args.n]), (False, rest[args.n :])):
            times: dict[str, list[float]] = {b: [] for b in backends}
            statements = 0
            for i, s in enumerate(part):
                for b in backends if i % 2 == 0 else backends[::-1]:
                    with counted() if b == "postgres" else contextlib.nullcontext([0]) as count:
                        t0 = time.perf_counter()
                        agents[b].remember(**item(s), dedup=dedup)
                        times[b].append(time.perf_counter() - t0)
                    statements += count[0]
            for b in backends:
                ts = sorted(times[b])
                out[b]["dedup" if dedup else "no_dedup"] = {
                    "p50_ms": round(1000 * statistics.median(ts), 3),
                    "p99_ms": round(1000 * ts[int(0.99 * (len(ts) - 1))], 3),
                    "statements_per_call": round(statements / len(part), 2) if b == "postgres" else None,
                    "n": len(part),
                }
    return [out[b] for b in backends]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", type=int, default=10_000)
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pg-url", default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    block = provenance.provenance(["benchmarks/bench_writes.py", *(argv if argv is not None else sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="edb-writes-") as tmp:
        rows = run(args, Path(tmp))
    by = {r["backend"]: r for r in rows}
    ratios = {k: round(by["postgres"][k]["p50_ms"] / by["sqlite"][k]["p50_ms"], 2) for k in ("dedup", "no_dedup")}
    path = provenance.write_json(
        provenance.out_path("writes.json", args.out), {"rows": rows, "ratio_pg_over_sqlite": ratios}, block
    )
    print(
        "| backend | remember p50 ms (dedup) | p99 | statements / call | remember p50 ms (no dedup) | p99 | statements / call |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        d, nd = r["dedup"], r["no_dedup"]
        print(f"| {r['backend']} | {d['p50_ms']:.2f} | {d['p99_ms']:.2f} | {d['statements_per_call'] or ''} | "
              f"{nd['p50_ms']:.2f} | {nd['p99_ms']:.2f} | {nd['statements_per_call'] or ''} |")  # fmt: skip
    print(f"PostgreSQL / SQLite p50: {ratios} (target ≤ 2)")
    log(f"wrote {path} ({provenance.summary(block)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

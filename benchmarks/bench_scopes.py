"""Thousands of agents' raw-SQL scopes on one PostgreSQL server (issue #30's 2,000-agent target).

On a fresh database (``pgserver``'s PostgreSQL 16, or ``--pg-url``):

1. **set-up**: ``--agents`` agents' private scopes made one after another (each a LOGIN role and a
   schema of its own, and a table in it), each timed: p50 of the first and of the last 100;
2. **use**: ``--procs`` processes at once, each with its own engine, each running one INSERT
   and one SELECT in every agent's scope, round-robin (each process in its own order), while
   the parent samples ``pg_stat_activity``: the most server sessions of scope roles at once
   (target ≤ procs × `PostgresSettings.scope_connections`), and per process its statements per
   second and its thread count.

    python benchmarks/bench_scopes.py                 # 2,000 agents, 2 processes: ~5 min on 2 cores

Prints a table and writes benchmarks/results/scopes.json (commit, tree, machine, load).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import provenance  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def agent(i: int) -> str:
    return f"a{i:05d}"


def setup(url: str, agents: int) -> list[float]:
    from engramdb import DynamicMemoryEngine

    times = []
    with DynamicMemoryEngine(url, memory_embedder=None) as eng:
        for i in range(agents):
            t0 = time.perf_counter()
            eng.agent(agent(i)).private.execute(f"CREATE TABLE private_{agent(i)}_notes (id integer, body text)")
            times.append(time.perf_counter() - t0)
            if i % 500 == 499:
                log(f"  {i + 1} scopes")
    return times


def use(url: str, agents: int, offset: int, cap: int) -> dict[str, Any]:
    from engramdb import DynamicMemoryEngine
    from engramdb.storage.postgres import PostgresBackend, PostgresSettings

    eng = DynamicMemoryEngine(PostgresBackend(url, PostgresSettings(scope_connections=cap)), memory_embedder=None)
    order = [(i * 7 + offset) % agents for i in range(agents)]  # each process its own order
    t0 = time.perf_counter()
    scopes = {i: eng.agent(agent(i)).private for i in order}  # this process's handles (each checks its role)
    opened = time.perf_counter() - t0
    t0 = time.perf_counter()
    for i in order:
        scope = scopes[i]
        scope.execute(f"INSERT INTO private_{agent(i)}_notes VALUES (?, 'x')", (offset,))
        scope.query(f"SELECT count(*) FROM private_{agent(i)}_notes")
    took = time.perf_counter() - t0
    out = {"statements_per_s": round(2 * agents / took, 1), "seconds": round(took, 1),
           "scope_handles_per_s": round(agents / opened, 1),
           "threads": threading.active_count(), "stats": eng._backend._scope_conns.stats().__repr__()}  # type: ignore[attr-defined]  # fmt: skip
    eng.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=["main", "use"], default="main")
    ap.add_argument("--url")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--agents", type=int, default=2000)
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--cap", type=int, default=20)
    ap.add_argument("--pg-url", default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.role == "use":
        print(json.dumps(use(args.url, args.agents, args.offset, args.cap)))
        return 0
    block = provenance.provenance(["benchmarks/bench_scopes.py", *(argv if argv is not None else sys.argv[1:])])
    from tests import pg_server

    if args.pg_url:
        os.environ["ENGRAMDB_TEST_PG_URL"] = args.pg_url
    import psycopg

    result: dict[str, Any] = {"settings": {"agents": args.agents, "procs": args.procs, "cap": args.cap}}
    db = contextlib.ExitStack()
    url = db.enter_context(pg_server.fresh_database("edbscopes"))
    try:
        log(f"setting up {args.agents} scopes")
        times = setup(url, args.agents)
        first, last = times[:100], times[-100:]
        result["setup"] = {
            "first_100_p50_ms": round(1000 * statistics.median(first), 2),
            "last_100_p50_ms": round(1000 * statistics.median(last), 2),
            "ratio_last_over_first": round(statistics.median(last) / statistics.median(first), 2),
        }
        from psycopg.conninfo import conninfo_to_dict

        database = str(conninfo_to_dict(url)["dbname"])  # the engine names its roles after it
        peak = [0]
        done = threading.Event()

        def sample() -> None:
            with psycopg.connect(url, autocommit=True) as c:
                while not done.is_set():
                    row = c.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE usename LIKE %s", (f"{database}%",)
                    ).fetchone()
                    peak[0] = max(peak[0], int(row[0]) if row else 0)
                    time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        log(f"using them from {args.procs} processes")
        me = [sys.executable, str(Path(__file__).resolve()), "--role", "use", "--url", url]
        sizes = ["--agents", str(args.agents), "--cap", str(args.cap)]
        procs = [
            subprocess.Popen([*me, "--offset", str(p), *sizes], stdout=subprocess.PIPE, text=True, cwd=HERE.parent)
            for p in range(args.procs)
        ]
        outs = []
        for p in procs:
            stdout, _ = p.communicate()
            if p.returncode != 0:
                raise SystemExit("a process failed")
            outs.append(json.loads(stdout.strip().splitlines()[-1]))
        done.set()
        sampler.join()
        result["use"] = {"processes": outs, "peak_scope_sessions": peak[0], "allowed": args.procs * args.cap}
    finally:
        try:
            db.close()
        except psycopg.Error as exc:  # the server's own trouble dropping 2,000 roles' objects: not the result
            log(f"could not drop the benchmark database: {exc}")
    path = provenance.write_json(provenance.out_path("scopes.json", args.out), result, block)
    s, u = result["setup"], result["use"]
    print("| measure | value | target |")
    print("|---|---:|---|")
    print(f"| scope set-up p50, first 100 / last 100 of {args.agents} | {s['first_100_p50_ms']} / "
          f"{s['last_100_p50_ms']} ms = {s['ratio_last_over_first']}x | ≤ 1.2x |")  # fmt: skip
    print(f"| most server sessions of scope roles at once, {args.procs} processes | {u['peak_scope_sessions']} | "
          f"≤ {u['allowed']} |")  # fmt: skip
    for i, o in enumerate(outs):
        print(f"| process {i}: scope handles/s, statements/s, threads | {o['scope_handles_per_s']}, "
              f"{o['statements_per_s']}, {o['threads']} | |")  # fmt: skip
    log(f"wrote {path} ({provenance.summary(block)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

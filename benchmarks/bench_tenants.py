"""Many tenants on one PostgreSQL server: what a process pays to serve some of them (issue #30).

Builds, on a real server (``pgserver``'s PostgreSQL 16 + pgvector, or ``--pg-url``):

- **many**: ``--tenants`` tenants × ``--per-tenant`` memories (default 1,000 × 200), written
  tenant by tenant through `remember_many` (dedup off), the synthetic corpus of
  `benchmarks/corpus.py` with a seed per tenant;
- **alone**: tenant 0's very memories alone in a database of their own.

Then, each in a fresh process (``--role serve``: RSS is that process's own), through the public API:

- **first recall**: one recall each of ``--sample`` tenants picked at random, none served
  before in that process (each is that tenant's first recall: its caches load then), p50 / max
  (the process's very first recall also loads the embedder, ~0.2 s);
- **RSS**: at open, and after a recall of *every* tenant with ``--budget`` bytes of caches (the
  target: RSS − RSS at open ≤ budget + 150 MB), with what the caches hold then;
- **steady recall**: ``--queries`` recalls of one tenant (its caches loaded), p50 / p99, in the
  big store and alone (target: ≤ 1.5×).

With ``--procs P`` (default 4) it also builds ``--big-tenants`` × ``--big-per-tenant`` (default
50 × 10,000) and starts P processes at once, each serving its own share of the tenants (a recall
each, ``--rounds`` times): the sum of their RSS against one process serving them all, and which
tenants each loaded (none it never served).

    python benchmarks/bench_tenants.py                     # ~15 min on 2 cores
    python benchmarks/bench_tenants.py --tenants 100 --procs 0   # a quick look

Prints a table and writes benchmarks/results/tenants.json (commit, tree, machine, load).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
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


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def tenant_name(i: int) -> str:
    return f"t{i:05d}"


def specs(i: int, per_tenant: int) -> list[dict[str, Any]]:
    """Tenant `i`'s memories (its own seed), as `remember_many` items."""
    out = []
    for s in corpus.generate(per_tenant, seed=1000 + i, tenants=1, agents=4):
        out.append(
            {
                "content": s.content,
                "type": s.type,
                "importance": s.importance,
                "tags": list(s.tags),
                "entities": list(s.entities),
                "created_at": s.created_at,
                "shared": True,
            }
        )
    return out


def queries(i: int, per_tenant: int, n: int) -> list[str]:
    sample = list(corpus.generate(per_tenant, seed=1000 + i, tenants=1, agents=4))
    return [q.text for q in corpus.queries(sample, n, seed=7)]


@contextlib.contextmanager
def database(pg_url: str | None) -> Iterator[str]:
    from tests import pg_server

    if pg_url:
        os.environ["ENGRAMDB_TEST_PG_URL"] = pg_url
    with pg_server.fresh_database("edbtenants") as url:
        yield url


def build(url: str, tenants: range, per_tenant: int) -> float:
    from engramdb import DynamicMemoryEngine

    t0 = time.perf_counter()
    with DynamicMemoryEngine(url) as eng:
        for i in tenants:
            eng.agent("writer", tenant=tenant_name(i)).remember_many(specs(i, per_tenant), dedup=False)
            if i % 100 == 99:
                log(f"  built {i + 1} tenants ({time.perf_counter() - t0:.0f} s)")
    took = time.perf_counter() - t0
    # A store in use is not minutes old: its statistics are gathered and its bulk load's WAL is
    # checkpointed, so no timed first recall races autovacuum and a checkpoint of the build.
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        conn.execute("CHECKPOINT")
    return took


def stats_ms(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {
        "p50_ms": round(1000 * statistics.median(xs), 3),
        "p99_ms": round(1000 * xs[min(len(xs) - 1, int(0.99 * len(xs)))], 3),
        "max_ms": round(1000 * xs[-1], 3),
        "n": len(xs),
    }


# -- one serving process ----------------------------------------------------------------------------


def serve(args: argparse.Namespace) -> dict[str, Any]:
    """Run in a process of its own: what `--role serve` prints as JSON."""
    from engramdb import DynamicMemoryEngine

    out: dict[str, Any] = {}
    options: dict[str, Any] = {}
    if args.budget is not None:
        options["cache_budget"] = None if args.budget < 0 else args.budget
    eng = DynamicMemoryEngine(args.url, **options)
    eng.agent("reader", tenant=tenant_name(0))  # the engine is open; nothing read yet
    out["rss_open_mb"] = round(rss_mb(), 1)
    serve_tenants = [int(x) for x in args.serve_tenants.split(",")] if args.serve_tenants else []
    qs = queries(args.query_tenant, args.per_tenant, args.queries)
    if args.first_sample:
        rng = random.Random(args.seed)
        picked = rng.sample(serve_tenants, min(args.first_sample, len(serve_tenants)))
        firsts = []
        for i in picked:
            q = queries(i, args.per_tenant, 1)[0]
            t0 = time.perf_counter()
            eng.agent("reader", tenant=tenant_name(i)).recall(q, k=10)
            firsts.append(time.perf_counter() - t0)
        out["first_recall"] = stats_ms(firsts)
        out["rss_after_first_mb"] = round(rss_mb(), 1)
    for _ in range(args.rounds):
        for i in serve_tenants:
            eng.agent("reader", tenant=tenant_name(i)).recall("status update", k=10)
    out["rss_served_mb"] = round(rss_mb(), 1)
    caches = eng._runtime.tenant_caches
    if caches is not None:
        st = caches.stats()
        out["caches"] = {
            "tenants_held": st.tenants, "nbytes_mb": round(st.nbytes / 2**20, 1),
            "budget_mb": None if st.budget is None else round(st.budget / 2**20, 1),
            "loads": st.loads, "evictions": st.evictions,
            "held_not_served": sorted(set(st.held) - {tenant_name(i) for i in serve_tenants} - {tenant_name(args.query_tenant)}),
        }  # fmt: skip
    if args.queries:
        agent = eng.agent("reader", tenant=tenant_name(args.query_tenant))
        agent.recall(qs[0], k=10)  # loads (or keeps) the tenant's caches
        times = []
        for q in qs * args.repeat:
            t0 = time.perf_counter()
            agent.recall(q, k=10)
            times.append(time.perf_counter() - t0)
        out["steady_recall"] = stats_ms(times)
    eng.close()
    if args.served:
        out["served_recall"] = served_recall(args, qs)
    if args.during_load:
        out["recall_during_load"] = recall_during_load(args, serve_tenants)
    return out


def served_recall(args: argparse.Namespace, qs: list[str]) -> dict[str, Any]:
    """The query tenant's recalls answered by the server: an engine whose budget no tenant fits
    (`cache_budget=1`), so each recall reads the tenant's rows and vectors from PostgreSQL."""
    from engramdb import DynamicMemoryEngine

    with DynamicMemoryEngine(args.url, cache_budget=1) as eng:
        agent = eng.agent("reader", tenant=tenant_name(args.query_tenant))
        agent.recall(qs[0], k=10)
        times = []
        for q in qs * args.repeat:
            t0 = time.perf_counter()
            agent.recall(q, k=10)
            times.append(time.perf_counter() - t0)
        st = eng._runtime.tenant_caches.stats()
        return {**stats_ms(times), "served_too_large": st.served_too_large, "tenants_held": st.tenants}


def recall_during_load(args: argparse.Namespace, tenants: list[int]) -> dict[str, Any]:
    """A recall of a tenant while another thread of the process is loading its caches (that
    tenant's first recall): answered by the server, not after the load. Per tenant: the loading
    recall's time and the one made during it."""
    import threading

    from engramdb import DynamicMemoryEngine

    rng = random.Random(args.seed + 1)
    picked = rng.sample(tenants, min(args.during_load, len(tenants)))
    loads, during = [], []
    with DynamicMemoryEngine(args.url, cache_budget=None) as eng:
        eng.agent("reader", tenant=tenant_name(picked[0]))
        caches = eng._runtime.tenant_caches
        for i in picked:
            q = queries(i, args.per_tenant, 1)[0]
            agent = eng.agent("reader", tenant=tenant_name(i))
            took: list[float] = []

            def first(agent: Any = agent, q: str = q, took: list[float] = took) -> None:
                t0 = time.perf_counter()
                agent.recall(q, k=10)
                took.append(time.perf_counter() - t0)

            loader = threading.Thread(target=first)
            loader.start()
            deadline = time.perf_counter() + 5.0
            while time.perf_counter() < deadline:  # until the loader holds the tenant's caches
                pair = caches.peek(tenant_name(i))
                if pair is not None and pair.busy():
                    break
                time.sleep(0.0005)
            t0 = time.perf_counter()
            agent.recall(q, k=10)
            during.append(time.perf_counter() - t0)
            loader.join()
            loads.append(took[0])
        st = caches.stats()
    return {"loading_recall": stats_ms(loads), "recall_during_load": stats_ms(during),
            "served_while_loading": st.served_while_loading, "tenants": len(picked)}  # fmt: skip


def run_serve(url: str, args: argparse.Namespace, **extra: Any) -> subprocess.Popen[str]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--role", "serve", "--url", url,
           "--per-tenant", str(extra.get("per_tenant", args.per_tenant)),
           "--queries", str(extra.get("queries", args.queries)), "--repeat", str(args.repeat),
           "--query-tenant", str(extra.get("query_tenant", 0)), "--rounds", str(extra.get("rounds", 1)),
           "--first-sample", str(extra.get("first_sample", 0)), "--seed", str(args.seed),
           "--during-load", str(extra.get("during_load", 0)), *(["--served"] if extra.get("served") else []),
           "--serve-tenants", ",".join(str(i) for i in extra.get("serve", []))]  # fmt: skip
    budget = extra.get("budget", args.budget)
    if budget is not None:
        cmd += ["--budget", str(budget)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, cwd=HERE.parent)


def result_of(proc: subprocess.Popen[str]) -> dict[str, Any]:
    stdout, _ = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"a serving process failed ({proc.returncode})")
    return dict(json.loads(stdout.strip().splitlines()[-1]))


# -- the parent ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", choices=["main", "serve"], default="main")
    ap.add_argument("--url", default=None)
    ap.add_argument("--tenants", type=int, default=1000)
    ap.add_argument("--per-tenant", type=int, default=200)
    ap.add_argument("--sample", type=int, default=50, help="tenants whose first recall is timed")
    ap.add_argument("--first-sample", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--serve-tenants", default="", help=argparse.SUPPRESS)
    ap.add_argument("--query-tenant", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--budget", type=int, default=256 << 20, help="cache_budget bytes (-1: no budget)")
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--big-tenants", type=int, default=50)
    ap.add_argument("--big-per-tenant", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--served", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--during-load", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--pg-url", default=None, help="an admin URL of a running server (default: pgserver)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.role == "serve":
        print(json.dumps(serve(args)))
        return 0

    block = provenance.provenance(["benchmarks/bench_tenants.py", *(argv if argv is not None else sys.argv[1:])])
    result: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items() if k not in ("out", "pg_url", "url")}}
    everyone = list(range(args.tenants))
    with database(args.pg_url) as many_url, database(args.pg_url) as alone_url:
        log(f"building {args.tenants} tenants x {args.per_tenant}")
        result["build_many_s"] = round(build(many_url, range(args.tenants), args.per_tenant), 1)
        build(alone_url, range(1), args.per_tenant)
        log("serving: many")
        many = result_of(run_serve(many_url, args, serve=everyone, first_sample=args.sample, served=True))
        log("serving: alone")
        alone = result_of(run_serve(alone_url, args, serve=[0], first_sample=1, served=True))
        result["many"], result["alone"] = many, alone
        result["targets"] = {
            "first_recall_max_s": round(many["first_recall"]["max_ms"] / 1000, 3),
            "rss_growth_mb": round(many["rss_served_mb"] - many["rss_open_mb"], 1),
            "rss_allowed_mb": round(args.budget / 2**20 + 150, 1) if args.budget >= 0 else None,
            "steady_p50_ratio_many_over_alone": round(
                many["steady_recall"]["p50_ms"] / alone["steady_recall"]["p50_ms"], 2
            ),
        }
    if args.procs:
        with database(args.pg_url) as big_url:
            log(f"building {args.big_tenants} tenants x {args.big_per_tenant}")
            result["build_big_s"] = round(build(big_url, range(args.big_tenants), args.big_per_tenant), 1)
            tenants = list(range(args.big_tenants))
            log("serving: one process, every tenant")
            one = result_of(run_serve(big_url, args, serve=tenants, per_tenant=args.big_per_tenant, queries=0,
                                      budget=-1, rounds=args.rounds, first_sample=min(10, len(tenants))))  # fmt: skip
            log(f"serving: {args.procs} processes, a share each")
            shares = [tenants[p :: args.procs] for p in range(args.procs)]
            opts = {"per_tenant": args.big_per_tenant, "queries": 0, "budget": -1, "rounds": args.rounds}
            procs = [run_serve(big_url, args, serve=share, query_tenant=share[0], **opts) for share in shares]
            each = [result_of(p) for p in procs]
            log("serving: a 10k tenant from the server, and during its load")
            big_served = result_of(run_serve(big_url, args, serve=tenants[1:], per_tenant=args.big_per_tenant,
                                             budget=-1, rounds=0, served=True, during_load=5))  # fmt: skip
            result["procs"] = {
                "one_process": one,
                "each": each,
                "total_rss_mb": round(sum(e["rss_served_mb"] for e in each), 1),
                "ratio_total_over_one": round(sum(e["rss_served_mb"] for e in each) / one["rss_served_mb"], 2),
                "loaded_not_served": [e["caches"]["held_not_served"] for e in each],
            }
            result["big_served"] = big_served
    path = provenance.write_json(provenance.out_path("tenants.json", args.out), result, block)
    t = result["targets"]
    print("| measure | value | target |")
    print("|---|---:|---|")
    print(f"| first recall of a tenant, p50 / max ({args.sample} tenants) | {result['many']['first_recall']['p50_ms']:.1f} / "
          f"{result['many']['first_recall']['max_ms']:.1f} ms | ≤ 500 ms |")  # fmt: skip
    print(f"| RSS growth serving all {args.tenants} tenants | {t['rss_growth_mb']} MB | ≤ {t['rss_allowed_mb']} MB |")
    print(f"| steady recall p50, {args.tenants}-tenant store / alone | {result['many']['steady_recall']['p50_ms']:.2f} / "
          f"{result['alone']['steady_recall']['p50_ms']:.2f} ms = {t['steady_p50_ratio_many_over_alone']}x | ≤ 1.5x |")  # fmt: skip
    sv, cached = result["many"]["served_recall"], result["many"]["steady_recall"]
    print(f"| recall from the server / from the cache, p50, {args.per_tenant}-memory tenant | {sv['p50_ms']:.2f} / "
          f"{cached['p50_ms']:.2f} ms = {sv['p50_ms'] / cached['p50_ms']:.2f}x | |")  # fmt: skip
    if "procs" in result:
        pr = result["procs"]
        print(f"| {args.procs} processes' RSS / one process's | {pr['total_rss_mb']} / "
              f"{pr['one_process']['rss_served_mb']} MB = {pr['ratio_total_over_one']}x | ≤ 1.5x |")  # fmt: skip
        print(f"| tenants loaded but never served | {sum(len(x) for x in pr['loaded_not_served'])} | 0 |")
        fr = pr["one_process"]["first_recall"]
        print(f"| first recall of a {args.big_per_tenant:,}-memory tenant, p50 / max | {fr['p50_ms']:.1f} / "
              f"{fr['max_ms']:.1f} ms | |")  # fmt: skip
        bs = result["big_served"]
        print(f"| recall from the server / from the cache, p50, {args.big_per_tenant:,}-memory tenant | "
              f"{bs['served_recall']['p50_ms']:.2f} / {bs['steady_recall']['p50_ms']:.2f} ms = "
              f"{bs['served_recall']['p50_ms'] / bs['steady_recall']['p50_ms']:.2f}x | |")  # fmt: skip
        dl = bs["recall_during_load"]
        print(f"| recall during another thread's first load / that load, p50, {args.big_per_tenant:,} memories | "
              f"{dl['recall_during_load']['p50_ms']:.1f} / {dl['loading_recall']['p50_ms']:.1f} ms "
              f"({dl['served_while_loading']} of {dl['tenants']} served) | |")  # fmt: skip
    log(f"wrote {path} ({provenance.summary(block)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

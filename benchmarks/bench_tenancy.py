"""Tenancy benchmark: what isolation (tenant + confidentiality cap) costs a recall, and whether it
changes the answer.

One store holds the corpus of 10 tenants (`corpus.generate(n, seed=0, tenants=10, agents=4)`,
100k memories by default). The measured tenant is the one closest to 10% of the store (``umbrella``
holds 10,007 of 100,000). Every memory gets a level PUBLIC, INTERNAL or CONFIDENTIAL from a hash
of its key; corpus links are made through `Agent.link` (which raises the lower end's level).

Each query of the tenant (`corpus.queries`, asked as the agent the corpus names) runs k = 10,
hops = 1 under these visibilities, interleaved query by query in a shuffled order, so load on
the machine hits every configuration alike:

======================  ==============================================================================
``open``                the baseline, "without them": the tenant's data with no cap —
                        ``Visibility(T, agent, cap=RESTRICTED, cross_agent=True)``
``tenant+cap``          the isolation under test — ``Visibility(T, agent, cap=CONFIDENTIAL,
                        cross_agent=True)``; no memory of T is above the cap, so the answer must be
                        identical to ``open``'s, id for id
``namespaced``          the same through `NamespacedMemory(...).with_max_confidentiality(CONFIDENTIAL)
                        .with_cross_namespace_recall()` with ``agent_prefix="*"``: end to end, the
                        wrapper included; its answer must be identical too
``tenant+cap INTERNAL`` a cap that excludes a third of T (latency only; the answer differs by design)
``own view``            the agent's own namespace (its private memories and the shared ones), cap
                        CONFIDENTIAL (latency only)
``solo``                (reference) the same ``open`` recall on a store holding only T's memories:
                        what a tenant pays for sharing a store with nine others, and how often the
                        shared full-text statistics change its answer
======================  ==============================================================================

All recalls log on the ``injected`` channel: logged like any recall (the write is part of the
cost) but never reinforcing, so one configuration's reads cannot reorder another's answers.
The clock is fixed, so recency is the same for every configuration.

    python benchmarks/bench_tenancy.py                 # 100k memories, 200 queries, 3 rounds
    python benchmarks/bench_tenancy.py --n 20000       # a quick look

Prints a markdown table; writes benchmarks/results/tenancy.json.
"""

from __future__ import annotations

import argparse
import hashlib
import inspect
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import provenance  # noqa: E402
from engramdb import Channel, Confidentiality, DynamicMemoryEngine  # noqa: E402
from engramdb.agent import Agent  # noqa: E402
from engramdb.memories.model import Visibility  # noqa: E402
from engramdb.tenancy.contract import ALL_NAMESPACES, MemoryQuery, TenantScope  # noqa: E402
from engramdb.tenancy.namespaced import NamespacedMemory  # noqa: E402
from engramdb.testing import FixedClock  # noqa: E402

PUBLIC, INTERNAL, CONFIDENTIAL, RESTRICTED = (
    Confidentiality.PUBLIC,
    Confidentiality.INTERNAL,
    Confidentiality.CONFIDENTIAL,
    Confidentiality.RESTRICTED,
)
LEVELS = (PUBLIC, INTERNAL, CONFIDENTIAL)
BATCH = 1000
K, HOPS = 10, 1
MAX_RATIO = 1.2
# dedup-on-write searches the store once per item; a bulk load of distinct items does not need it
_NO_DEDUP = {"dedup": False} if "dedup" in inspect.signature(Agent.remember_many).parameters else {}


def level_of(key: str) -> Confidentiality:
    return LEVELS[hashlib.blake2b(key.encode(), digest_size=4).digest()[0] % len(LEVELS)]


def percentile(values: list[float], q: float) -> float:
    vals = sorted(values)
    return vals[min(len(vals) - 1, round(q / 100 * (len(vals) - 1)))]


def load(engine: DynamicMemoryEngine, items: list[corpus.MemorySpec]) -> dict[str, str]:
    """Write `items` (memories, then links) and return {corpus key: memory id}."""
    id_of: dict[str, str] = {}
    groups: dict[tuple[str, str], list[corpus.MemorySpec]] = {}
    for it in items:
        groups.setdefault((it.tenant, it.agent), []).append(it)
    for (tenant, agent), group in groups.items():
        me = engine.agent(agent, tenant=tenant)
        for i in range(0, len(group), BATCH):
            chunk = group[i : i + BATCH]
            fields = [
                {
                    "content": it.content, "type": it.type, "importance": it.importance, "salience": it.salience,
                    "confidence": it.confidence, "tags": list(it.tags), "entities": list(it.entities),
                    "title": it.title, "status": it.status, "created_at": it.created_at, "shared": it.shared,
                    "confidentiality": level_of(it.key),
                }
                for it in chunk
            ]  # fmt: skip
            for it, m in zip(chunk, me.remember_many(fields, **_NO_DEDUP), strict=True):
                id_of[it.key] = m.id
    conn = engine._backend.connection("engine")
    linked = [it for it in items if it.links]
    for i in range(0, len(linked), BATCH):
        with engine._backend.atomic(conn):  # one transaction per batch; each link is a savepoint in it
            for it in linked[i : i + BATCH]:
                me = engine.agent(it.agent, tenant=it.tenant)
                for target, etype in it.links:
                    if target in id_of and target != it.key:
                        me.link(id_of[it.key], id_of[target], etype)
    return id_of


Run = Callable[[corpus.QuerySpec], list[str]]


def recaller_run(engine: DynamicMemoryEngine, vis_for: Callable[[corpus.QuerySpec], Visibility]) -> Run:
    def run(q: corpus.QuerySpec) -> list[str]:
        recall, _ = engine._runtime.recaller.run(
            q.text, vis=vis_for(q), k=K, hops=HOPS, types=None, channel=Channel.INJECTED, trace_ref=None, dry_run=False
        )
        return [h.memory.id for h in recall]

    return run


def namespaced_run(engine: DynamicMemoryEngine) -> Run:
    def run(q: corpus.QuerySpec) -> list[str]:
        ns = NamespacedMemory(engine, q.agent).with_max_confidentiality(CONFIDENTIAL)
        ns = ns.with_cross_namespace_recall()
        query = MemoryQuery(q.text, k=K, hops=HOPS, agent_prefix=ALL_NAMESPACES, channel=Channel.INJECTED)
        return [h.memory.id for h in ns.recall(TenantScope(q.tenant), query)]

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="memories in the shared store (10 tenants)")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="times each query runs per configuration")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=provenance.OUT, help="folder (default: benchmarks/out/)")
    args = ap.parse_args()
    began = time.perf_counter()

    items = list(corpus.generate(args.n, seed=args.seed, tenants=10, agents=4))
    sizes = Counter(it.tenant for it in items)
    tenant = min(sizes, key=lambda t: abs(sizes[t] - len(items) / 10))
    mine = [it for it in items if it.tenant == tenant]
    queries = corpus.queries(mine, args.queries, args.seed)
    print(f"{len(items):,} memories, tenant {tenant} holds {len(mine):,}; {len(queries)} queries", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="bench-tenancy-") as tmp:
        start = max(it.created_at for it in items) + 86_400
        shared = DynamicMemoryEngine(Path(tmp) / "shared.db", clock=FixedClock(start))
        solo = DynamicMemoryEngine(Path(tmp) / "solo.db", clock=FixedClock(start))
        t0 = time.perf_counter()
        shared_ids = load(shared, items)
        solo_ids = load(solo, mine)
        load_s = time.perf_counter() - t0
        print(f"loaded in {load_s:.0f} s", file=sys.stderr)
        key_of_shared = {v: k for k, v in shared_ids.items()}
        key_of_solo = {v: k for k, v in solo_ids.items()}

        configs: dict[str, tuple[str, Run]] = {
            "open": (
                "Visibility(T, agent, RESTRICTED, cross_agent=True)",
                recaller_run(shared, lambda q: Visibility(q.tenant, q.agent, RESTRICTED, cross_agent=True)),
            ),
            "tenant+cap": (
                "Visibility(T, agent, CONFIDENTIAL, cross_agent=True)",
                recaller_run(shared, lambda q: Visibility(q.tenant, q.agent, CONFIDENTIAL, cross_agent=True)),
            ),
            "namespaced": ("NamespacedMemory, cap CONFIDENTIAL, agent_prefix='*'", namespaced_run(shared)),
            "tenant+cap INTERNAL": (
                "Visibility(T, agent, INTERNAL, cross_agent=True)",
                recaller_run(shared, lambda q: Visibility(q.tenant, q.agent, INTERNAL, cross_agent=True)),
            ),
            "own view": (
                "Visibility(T, agent, CONFIDENTIAL)",
                recaller_run(shared, lambda q: Visibility(q.tenant, q.agent, CONFIDENTIAL)),
            ),
            "solo": (
                "a store of T only: Visibility(T, agent, RESTRICTED, cross_agent=True)",
                recaller_run(solo, lambda q: Visibility(q.tenant, q.agent, RESTRICTED, cross_agent=True)),
            ),
        }
        for _, run in configs.values():  # warm the vector caches and statement caches
            for q in queries[:20]:
                run(q)
        rng = random.Random(args.seed)
        lat: dict[str, list[float]] = {name: [] for name in configs}
        answers: dict[str, list[list[str]]] = {name: [] for name in configs}
        for rnd in range(args.rounds):
            for q in queries:
                order = list(configs)
                rng.shuffle(order)
                for name in order:
                    run = configs[name][1]
                    t = time.perf_counter()
                    ids = run(q)
                    lat[name].append(time.perf_counter() - t)
                    if rnd == 0:
                        answers[name].append(ids)
        shared.close()
        solo.close()

    def keys(name: str) -> list[list[str]]:
        table = key_of_solo if name == "solo" else key_of_shared
        return [[table[i] for i in ids] for ids in answers[name]]

    p50 = {name: percentile(v, 50) * 1e3 for name, v in lat.items()}
    p99 = {name: percentile(v, 99) * 1e3 for name, v in lat.items()}
    base = keys("open")
    same = {name: sum(a == b for a, b in zip(keys(name), base, strict=True)) for name in configs}
    overlap = {
        name: statistics.mean(len(set(a) & set(b)) / max(len(b), 1) for a, b in zip(keys(name), base, strict=True))
        for name in configs
    }
    rows = []
    for name, (vis, _) in configs.items():
        rows.append(
            {
                "config": name,
                "visibility": vis,
                "p50_ms": round(p50[name], 3),
                "p99_ms": round(p99[name], 3),
                "p50_ratio_to_open": round(p50[name] / p50["open"], 3),
                "identical_answers": same[name],
                "mean_overlap_at_10": round(overlap[name], 4),
            }
        )
    ratio = p50["tenant+cap"] / p50["open"]
    ns_ratio = p50["namespaced"] / p50["open"]
    verdict = {
        "isolation_p50_ratio": round(ratio, 3),
        "namespaced_p50_ratio": round(ns_ratio, 3),
        "within_1_2x": ratio <= MAX_RATIO,
        "answers_unchanged": same["tenant+cap"] == same["namespaced"] == len(queries),
    }
    machine = {
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_average_1_5_15": list(os.getloadavg()),
    }
    lines = [
        f"{len(items):,} memories in one store, 10 tenants; tenant `{tenant}` holds {len(mine):,} "
        f"({len(mine) / len(items):.1%}); {len(queries)} queries × {args.rounds} rounds, k = {K}, hops = {HOPS}; "
        f"{machine['cpus']} CPUs, load {machine['load_average_1_5_15'][0]:.1f}.",
        "",
        "| configuration | visibility | p50 (ms) | p99 (ms) | p50 / open | answers identical to open | overlap@10 |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | `{r['visibility']}` | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['p50_ratio_to_open']:.3f}× | {r['identical_answers']}/{len(queries)} | {r['mean_overlap_at_10']:.3f} |"
        )
    lines += [
        "",
        f"Isolation (tenant + cap) costs {ratio:.3f}× the open recall's p50 (limit {MAX_RATIO}×: "
        f"{'met' if verdict['within_1_2x'] else 'NOT met'}); through NamespacedMemory {ns_ratio:.3f}×. "
        f"Answers for the owning tenant {'unchanged' if verdict['answers_unchanged'] else 'CHANGED'}.",
    ]
    md = "\n".join(lines)
    print(md)
    args.out.mkdir(parents=True, exist_ok=True)
    out = {
        "benchmark": "recall latency with and without tenant isolation and a confidentiality cap",
        "command": "python " + " ".join([f"benchmarks/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "machine": machine,
        "n": len(items),
        "tenants": dict(sizes),
        "tenant": tenant,
        "tenant_memories": len(mine),
        "queries": len(queries),
        "rounds": args.rounds,
        "k": K,
        "hops": HOPS,
        "load_s": round(load_s, 1),
        "total_s": round(time.perf_counter() - began, 1),
        "results": rows,
        "verdict": verdict,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tenancy.json").write_text(json.dumps(provenance.stamp(out), indent=2) + "\n")


if __name__ == "__main__":
    main()

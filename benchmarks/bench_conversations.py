"""Conversations in and filters (issue #33): what a session and metadata cost where users feel it.

Per backend, a store of ``--warm`` memories of the synthetic corpus (`benchmarks/corpus.py`),
each with a session (one of ``--sessions``) and metadata (``project``: one of 20, ``n``: its
position), written with `remember_many`, then one recall (caches loaded, as in use). Then,
interleaved across the backends (which goes first alternates):

- ``remember(messages=…)`` of a 10-turn conversation (a new session each), ``--n`` times;
- recall of corpus queries unfiltered, by one session (~warm/sessions memories), by a selective
  metadata value (1/20 of the store), by a broad range (``n < warm/2``);
- ``forget_where(session=…)`` of one stored conversation (10 turns).

p50 / p99 of each call. The filter's cost is what recall pays over the unfiltered one: the
query that resolves the filter's keys and the masks (SQLite), or the filter inside the server's
queries (a tenant served by PostgreSQL: ``cache_budget=0``, also measured).

    python benchmarks/bench_conversations.py                 # SQLite and PostgreSQL (pgserver)
    python benchmarks/bench_conversations.py --backends sqlite

Prints a table and writes benchmarks/out/conversations.json (commit, tree, machine, load).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402
import provenance  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def location(backend: str, tmp: Path, pg_url: str | None) -> Iterator[str]:
    if backend == "sqlite":
        yield str(tmp / "conversations.db")
        return
    from tests import pg_server

    if pg_url:
        os.environ["ENGRAMDB_TEST_PG_URL"] = pg_url
    with pg_server.fresh_database("edbconv") as url:
        yield url


def _conversation(rng: random.Random, specs: list[corpus.MemorySpec]) -> list[dict[str, str]]:
    """Ten turns: user and assistant alternating, texts of the corpus."""
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": rng.choice(specs).content} for i in range(10)]


def _stats(ts: list[float]) -> dict[str, float]:
    s = sorted(ts)
    return {
        "p50_ms": round(1000 * statistics.median(s), 3),
        "p99_ms": round(1000 * s[int(0.99 * (len(s) - 1))], 3),
        "n": len(s),
    }


def run(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, Any]]:
    from engramdb import DynamicMemoryEngine

    specs = list(corpus.generate(args.warm, seed=args.seed, tenants=1, agents=4))
    queries = [q.text for q in corpus.queries(specs, args.queries, seed=args.seed)]
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    rng = random.Random(args.seed)
    out: dict[str, dict[str, Any]] = {}
    with contextlib.ExitStack() as stack:
        agents: dict[str, Any] = {}
        for b in backends:
            where = stack.enter_context(location(b, tmp, args.pg_url))
            eng = stack.enter_context(DynamicMemoryEngine(where))
            agents[b] = agent = eng.agent("writer")
            t0 = time.perf_counter()
            agent.remember_many(
                [
                    {"content": s.content, "type": s.type, "entities": list(s.entities), "created_at": s.created_at,
                     "session": f"s{i % args.sessions}", "metadata": {"project": f"p{i % 20}", "n": i}}
                    for i, s in enumerate(specs)
                ],
                dedup=False,
            )  # fmt: skip
            log(f"{b}: {args.warm} memories in {time.perf_counter() - t0:.1f}s")
            agent.recall("status update")
            if b == "postgres":
                served = stack.enter_context(DynamicMemoryEngine(where, cache_budget=0))
                agents["postgres-served"] = served.agent("writer")
                agents["postgres-served"].recall("status update")
        names = list(agents)
        out = {b: {"backend": b} for b in names}
        cases: dict[str, Callable[[Any, str], Any]] = {
            "recall": lambda a, q: a.recall(q, k=10),
            "recall_session": lambda a, q: a.recall(q, k=10, session="s7"),
            "recall_project": lambda a, q: a.recall(q, k=10, where={"project": "p3"}),
            "recall_range": lambda a, q: a.recall(q, k=10, where={"n": {"$lt": args.warm // 2}}),
        }
        for name, call in cases.items():
            times: dict[str, list[float]] = {b: [] for b in names}
            for r in range(args.rounds):
                for i, q in enumerate(queries):
                    for b in names if (i + r) % 2 == 0 else names[::-1]:
                        t0 = time.perf_counter()
                        call(agents[b], q)
                        times[b].append(time.perf_counter() - t0)
            for b in names:
                out[b][name] = _stats(times[b])
        writers = [b for b in names if b != "postgres-served"]
        times_in: dict[str, list[float]] = {b: [] for b in writers}
        times_out: dict[str, list[float]] = {b: [] for b in writers}
        for i in range(args.n):
            chat = _conversation(rng, specs)
            for b in writers if i % 2 == 0 else writers[::-1]:
                t0 = time.perf_counter()
                agents[b].remember(messages=chat, session=f"chat-{i}")
                times_in[b].append(time.perf_counter() - t0)
        for i in range(min(args.n, args.forgets)):
            for b in writers if i % 2 == 0 else writers[::-1]:
                t0 = time.perf_counter()
                done = agents[b].forget_where(session=f"chat-{i}")
                times_out[b].append(time.perf_counter() - t0)
                assert done.count == 10, done
        for b in writers:
            out[b]["remember_10_turns"] = _stats(times_in[b])
            out[b]["forget_session_10_turns"] = _stats(times_out[b])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", type=int, default=10_000)
    ap.add_argument("--sessions", type=int, default=500)
    ap.add_argument("--n", type=int, default=200, help="10-turn conversations remembered")
    ap.add_argument("--forgets", type=int, default=50, help="of them forgotten by session")
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backends", default="sqlite,postgres")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pg-url", default=None)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    block = provenance.provenance(["benchmarks/bench_conversations.py", *(argv if argv is not None else sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="edb-conv-") as tmp:
        rows = run(args, Path(tmp))
    path = provenance.write_json(
        provenance.out_path("conversations.json", args.out), {"rows": list(rows.values())}, block
    )
    cols = [
        "remember_10_turns",
        "recall",
        "recall_session",
        "recall_project",
        "recall_range",
        "forget_session_10_turns",
    ]
    print("| backend | " + " | ".join(f"{c} p50 / p99 ms" for c in cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for b, row in rows.items():
        cells = [f"{row[c]['p50_ms']} / {row[c]['p99_ms']}" if c in row else "-" for c in cols]
        print(f"| {b} | " + " | ".join(cells) + " |")
    log(f"wrote {path} ({provenance.summary(block)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

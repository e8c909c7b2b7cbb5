"""LLM extraction (issue #33): the caller's latency with an extractor configured, and what a flaky
model and a worker killed again and again cost in data (nothing, is the target).

**Latency.** A SQLite store of ``--warm`` memories of the synthetic corpus (`benchmarks/corpus.py`,
as `bench_conversations.py`), then ``--n`` ``remember(messages=…)`` calls of 10 turns each, in
three set-ups measured interleaved: no extraction; ``queue_extraction=True`` (a worker elsewhere);
``extractor=`` given (the engine's own worker thread running the queued jobs against the local
scripted model meanwhile). The first two are interleaved; the third runs after them, alone (its
worker thread shares the process, and would slow the others' calls). p50 / p99 per call.

**Reliability.** ``--conversations`` conversations of 10 turns (one person each, two facts said),
remembered by this process while a worker *process* runs the queue against a scripted
OpenAI-compatible server (`engramdb.llm.scripted`) that fails ``--fail`` of its calls at random
(HTTP 500, 429, malformed JSON, or an answer slower than the client's timeout); the worker is
SIGKILLed ``--kills`` times at random moments and started again each time. Then the worker
drains the queue and the store is checked: every turn stored (by text), every job done (or
failed, and listed), every expected fact present once, and no job's decisions applied twice
(extracted access records per job).

    python benchmarks/bench_extraction.py
    python benchmarks/bench_extraction.py --conversations 200 --kills 5     # quicker

Prints a table and writes benchmarks/out/extraction.json (commit, tree, machine, load).
"""

from __future__ import annotations

import argparse
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402
import provenance  # noqa: E402


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _stats(ts: list[float]) -> dict[str, float]:
    s = sorted(ts)
    return {"p50_ms": round(1000 * statistics.median(s), 3), "p99_ms": round(1000 * s[int(0.99 * (len(s) - 1))], 3),
            "n": len(s)}  # fmt: skip


def latency(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from engramdb import DynamicMemoryEngine
    from engramdb.llm import ChatClient, LLMExtractor
    from engramdb.llm.scripted import ScriptedChatServer, rule_extractor_script

    specs = list(corpus.generate(args.warm, seed=args.seed, tenants=1, agents=4))
    rng = random.Random(args.seed)
    rows = [
        {"content": s.content, "type": s.type, "entities": list(s.entities), "created_at": s.created_at,
         "session": f"s{i % 500}", "metadata": {"project": f"p{i % 20}", "n": i}}
        for i, s in enumerate(specs)
    ]  # fmt: skip
    with ScriptedChatServer(rule_extractor_script) as server:
        setups = {
            "no extraction": {},
            "queue (worker elsewhere)": {"queue_extraction": True},
            "extractor thread": {"extractor": LLMExtractor(ChatClient(server.url, "scripted"))},
        }
        agents: dict[str, Any] = {}
        engines = []
        for i, (name, options) in enumerate(setups.items()):
            eng = DynamicMemoryEngine(str(tmp / f"latency{i}.db"), **options)
            engines.append(eng)
            agents[name] = agent = eng.agent("writer")
            agent.remember_many(rows, dedup=False)
            agent.recall("status update")
        times: dict[str, list[float]] = {name: [] for name in agents}
        names = list(agents)
        chats = [
            [{"role": "user" if t % 2 == 0 else "assistant", "name": f"user{i}" if t % 2 == 0 else "assistant",
              "content": rng.choice(specs).content if t != 2 else f"I live in City{i}"} for t in range(10)]
            for i in range(args.n)
        ]  # fmt: skip
        # The first two interleaved; the thread's set-up after them, alone: its worker shares this
        # process (and its GIL), and would slow the others' calls while it runs.
        for phase in (names[:2], names[2:]):
            for i, chat in enumerate(chats):
                for name in phase if i % 2 == 0 else phase[::-1]:
                    t0 = time.perf_counter()
                    agents[name].remember(messages=chat, session=f"chat-{i}")
                    times[name].append(time.perf_counter() - t0)
        deadline = time.monotonic() + 120
        threaded = engines[2]
        while threaded.pending() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = len(threaded.pending())
        for eng in engines:
            eng.close()
    return {"rows": [{"setup": n, **_stats(times[n])} for n in names], "thread_jobs_left": left,
            "model_calls": len(server.requests)}  # fmt: skip


WORKER = """
import sys
from engramdb import DynamicMemoryEngine
from engramdb.llm import ChatClient, LLMExtractor
db, url = sys.argv[1], sys.argv[2]
eng = DynamicMemoryEngine(db)
w = eng.extraction_worker(LLMExtractor(ChatClient(url, "scripted", timeout=1.0, retries=1, backoff=0.05)),
                          lease=float(sys.argv[3]), retry_base=0.2, retry_cap=2.0, max_attempts=12, batch=2)
import time
while True:
    if w.run_once().claimed == 0:
        time.sleep(0.05)
"""


def reliability(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    from engramdb import DynamicMemoryEngine
    from engramdb.llm.scripted import ScriptedChatServer, failing, rule_extractor_script

    rng = random.Random(args.seed)
    db = tmp / "reliability.db"
    script = tmp / "worker.py"
    script.write_text(WORKER)
    n = args.conversations
    with ScriptedChatServer(failing(rule_extractor_script, args.fail, seed=args.seed, timeout_delay=1.5)) as server:
        eng = DynamicMemoryEngine(str(db), queue_extraction=True)
        me = eng.agent("assistant")
        me.remember("warm-up", type="scratch")

        def start() -> subprocess.Popen[bytes]:
            return subprocess.Popen([sys.executable, str(script), str(db), server.url, str(args.lease)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip

        proc = start()
        kills_at = sorted(rng.sample(range(1, n), args.kills))
        kills = 0
        t0 = time.perf_counter()
        for i in range(n):
            chat = []
            for t in range(10):
                if t == 2:
                    text = f"I live in City{i}"
                elif t == 6:
                    text = f"I like sport{i}"
                else:
                    text = f"turn {t} of conversation {i}: nothing to keep"
                chat.append({"role": "user" if t % 2 == 0 else "assistant",
                             "name": f"user{i}" if t % 2 == 0 else "assistant", "content": text})  # fmt: skip
            me.remember(messages=chat, session=f"c{i}")
            while kills < len(kills_at) and kills_at[kills] == i:
                time.sleep(rng.uniform(0.0, 0.3))  # somewhere in whatever the worker is doing
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                proc = start()
            time.sleep(args.pace)
        stored_s = time.perf_counter() - t0
        log(f"stored {n} conversations in {stored_s:.1f}s with {kills} SIGKILLs; draining")
        deadline = time.monotonic() + args.drain_timeout
        while eng.pending(statuses=["pending"]) and time.monotonic() < deadline:
            time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # Anything still failing is retried once more here, with a reliable client (as `requeue` would be).
        failed_before = len(eng.pending(statuses=["failed"]))
        total_s = time.perf_counter() - t0
        calls = len(server.requests)
        jobs = eng.pending(statuses=["pending", "failed", "done"])
        done = [j for j in jobs if j.status == "done"]
        eng.close()
    eng = DynamicMemoryEngine(str(db))
    turns = {m.content for m in eng.agent("assistant").memories(types=["episode"])}
    expected_turns = {f"user{i}: I live in City{i}" for i in range(n)} | {f"user{i}: I like sport{i}" for i in range(n)}
    facts = [m.content for m in eng.agent("assistant").memories(types=["info"])]
    expected_facts = {f"user{i} lives in City{i}" for i in range(n)} | {f"user{i} likes sport{i}" for i in range(n)}
    eng.close()
    raw = sqlite3.connect(db)
    per_job = dict(raw.execute("SELECT trace_ref, count(*) FROM engram_access WHERE channel = 'extracted' "
                               "GROUP BY trace_ref").fetchall())  # fmt: skip
    episodes = raw.execute("SELECT count(*) FROM engram_memories WHERE type = 'episode'").fetchone()[0]
    raw.close()
    # One application of a job's answer logs 2 extracted records per fact it adds (the fact, its turn).
    twice = sum(1 for j in done if per_job.get(j.job_id, 0) > 2 * sum(d["op"] == "add" for d in j.decisions))
    attempts = [j.attempts for j in jobs]
    return {
        "conversations": n, "turns_stored": episodes, "turns_expected": 10 * n,
        "turns_lost": len(expected_turns - turns) + (10 * n - episodes),
        "jobs_done": len(done), "jobs_failed": failed_before, "jobs_pending": len(jobs) - len(done) - failed_before,
        "facts": len(facts), "facts_missing": len(expected_facts - set(facts)),
        "facts_duplicated": len(facts) - len(set(facts)), "facts_unexpected": len(set(facts) - expected_facts),
        "jobs_applied_twice": twice, "kills": kills, "fail_share": args.fail, "model_calls": calls,
        "attempts_max": max(attempts), "attempts_mean": round(statistics.fmean(attempts), 3),
        "stored_s": round(stored_s, 1), "all_done_s": round(total_s, 1),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--warm", type=int, default=10_000)
    ap.add_argument("--n", type=int, default=200, help="10-turn conversations timed per set-up")
    ap.add_argument("--conversations", type=int, default=1000)
    ap.add_argument("--fail", type=float, default=0.2, help="share of model calls failing")
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--lease", type=float, default=3.0, help="the worker's lease, seconds")
    ap.add_argument("--pace", type=float, default=0.02, help="seconds between stored conversations")
    ap.add_argument("--drain-timeout", type=float, default=900.0)
    ap.add_argument("--skip-latency", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    block = provenance.provenance(["benchmarks/bench_extraction.py", *(argv if argv is not None else sys.argv[1:])])
    with tempfile.TemporaryDirectory(prefix="edb-extract-") as tmp:
        lat = None if args.skip_latency else latency(args, Path(tmp))
        rel = reliability(args, Path(tmp))
    path = provenance.write_json(provenance.out_path("extraction.json", args.out),
                                 {"latency": lat, "reliability": rel}, block)  # fmt: skip
    if lat is not None:
        print(f"remember of a 10-turn conversation, SQLite, {args.warm:,} memories stored")
        print("| set-up | p50 ms | p99 ms | n |")
        print("|---|---:|---:|---:|")
        for row in lat["rows"]:
            print(f"| {row['setup']} | {row['p50_ms']} | {row['p99_ms']} | {row['n']} |")
        print(f"(the thread's queue afterwards: {lat['thread_jobs_left']} jobs left)")
    print()
    print(f"{rel['conversations']} conversations, {rel['kills']} SIGKILLs of the worker, "
          f"{rel['fail_share']:.0%} of {rel['model_calls']} model calls failing")  # fmt: skip
    print("| turns stored / expected | turns lost | jobs done | failed | pending | facts | missing | duplicated "
          "| applied twice | all done after s |")  # fmt: skip
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {rel['turns_stored']} / {rel['turns_expected']} | {rel['turns_lost']} | {rel['jobs_done']} | "
          f"{rel['jobs_failed']} | {rel['jobs_pending']} | {rel['facts']} | {rel['facts_missing']} | "
          f"{rel['facts_duplicated']} | {rel['jobs_applied_twice']} | {rel['all_done_s']} |")  # fmt: skip
    log(f"wrote {path} ({provenance.summary(block)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The in-memory BM25 channel answers exactly what a direct computation over the stored rows does,
for any sequence of writes, updates, forgets and reads by any reader — through the delta, the
merge into the main postings and the bulk path alike."""

from __future__ import annotations

import contextlib
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb import Confidentiality, DynamicMemoryEngine, EngramError
from engramdb.memories.model import Visibility
from engramdb.retrieval import lexical_channel as lc
from engramdb.retrieval.keywords import stem
from engramdb.storage.ports import Backend
from engramdb.testing import FixedClock

WORDS = ["alpha", "beta", "gamma", "delta", "kiwi", "mango", "ports", "rotating", "keys", "the", "and"]
AGENTS = ["ann", "bob"]
TENANTS = ["t1", "t2"]

sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=6).map(" ".join)
op = st.one_of(
    st.tuples(
        st.just("remember"),
        st.sampled_from(TENANTS),
        st.sampled_from(AGENTS),
        sentence,
        st.booleans(),
        st.integers(0, 2),
    ),
    st.tuples(st.just("update"), st.integers(0, 40), sentence),
    st.tuples(st.just("forget"), st.integers(0, 40)),
    st.tuples(st.just("search"), st.sampled_from(TENANTS), st.sampled_from(AGENTS), sentence, st.integers(0, 2)),
    st.tuples(st.just("recall"), st.sampled_from(TENANTS), st.sampled_from(AGENTS), sentence),
    st.tuples(st.just("rescore"), st.integers(0, 40), st.floats(0, 10)),
)


def naive(store: Backend, stems: list[str], vis: Visibility, limit: int) -> dict[int, float]:
    shown = set(store.memories.visible_keys(vis))
    rows = [(r[0], r[8], r[9]) for r in store.memories.index_rows(-1) if r[0] in shown]
    if not rows:
        return {}
    docs = {n: set(terms.split()) for n, terms, _ in rows}
    length = {n: max(float(t or 1), 1.0) for n, _, t in rows}
    avg = sum(length.values()) / len(rows)
    scores: dict[int, float] = {}
    for s in dict.fromkeys(stems):
        holders = [n for n, d in docs.items() if s in d]
        if not holders:
            continue
        idf = math.log1p((len(rows) - len(holders) + 0.5) / (len(holders) + 0.5))
        for n in holders:
            norm = (lc.K1 + 1) / (1 + lc.K1 * (1 - lc.B + lc.B * length[n] / avg))
            scores[n] = scores.get(n, 0.0) + idf * norm
    return scores


@pytest.mark.parametrize("merge_at,bulk", [(10**9, 10**9), (3, 10**9), (10**9, 2)])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=25))
def test_channel_matches_a_direct_bm25(
    monkeypatch: pytest.MonkeyPatch, merge_at: int, bulk: int, ops: list[tuple[Any, ...]]
) -> None:
    monkeypatch.setattr(lc, "MERGE_AT", merge_at)
    monkeypatch.setattr(lc, "BULK", bulk)
    with tempfile.TemporaryDirectory() as d:
        eng = DynamicMemoryEngine(Path(d) / "m.db", clock=FixedClock(1_000_000.0), memory_embedder=None)
        try:
            ids: list[tuple[str, str, str]] = []  # (tenant, agent, memory id)
            recaller = eng._runtime.recaller
            db = eng._backend
            for o in ops:
                if o[0] == "remember":
                    _, tenant, agent, text, shared, level = o
                    a = eng.agent(agent, tenant=tenant)
                    m = a.remember(text, shared=shared, confidentiality=Confidentiality(level), dedup=False, force=True)
                    ids.append((tenant, agent, m.id))
                elif o[0] == "recall":  # moves access rings (and strengths) of what it returns
                    eng.agent(o[2], tenant=o[1]).recall(o[3], k=3)
                elif o[0] == "rescore" and ids:
                    tenant, agent, mid = ids[o[1] % len(ids)]
                    with contextlib.suppress(EngramError):
                        eng.agent(agent, tenant=tenant).update(mid, importance=o[2])
                elif o[0] in ("update", "forget") and ids:
                    tenant, agent, mid = ids[o[1] % len(ids)]
                    a = eng.agent(agent, tenant=tenant)
                    try:
                        if o[0] == "update":
                            a.update(mid, content=o[2])
                        else:
                            a.forget(mid)
                    except EngramError:  # forgotten already, or not this agent's to change
                        pass
                elif o[0] == "search":
                    _, tenant, agent, text, cap = o
                    vis = Visibility(tenant, agent, Confidentiality(cap))
                    stems = [stem(w) for w in text.split()]
                    recaller.lexical.refresh(db)
                    got = recaller.lexical.search(stems, 5, vis)
                    want = naive(db, stems, vis, 5)
                    assert len(got) == min(5, len(want))
                    for n, score in got.items():
                        assert score == pytest.approx(want[n], rel=1e-4, abs=1e-5)
                    if got:
                        cut = min(got.values())
                        assert all(s <= cut + 1e-4 for n, s in want.items() if n not in got)
                    # recall's scoring fields and cue overlap, from memory, equal the stored rows'
                    shown = set(db.memories.visible_keys(vis))
                    distinct = set(stems)
                    # IndexRow: key, …, type [7], terms [8], importance [10], ring [11], old_* [12:15]
                    expected = [
                        (
                            r[0],
                            r[7],
                            r[10],
                            r[11],
                            (r[12], r[13], r[14]),
                            round(len(distinct & set(r[8].split())) / len(distinct), 9),
                        )
                        for r in sorted(db.memories.index_rows(-1))
                        if r[0] in shown
                    ]
                    every = list(range(0, 60))
                    fields = recaller.lexical.fields(every, vis, stems)
                    assert sorted((*f[:5], round(f[5], 9)) for f in fields) == expected
                    # coverage: the IDF-weighted share of the query's stems, IDF over what vis shows
                    rows = {r[0]: set(r[8].split()) for r in db.memories.index_rows(-1) if r[0] in shown}
                    idf = {
                        s: math.log1p((len(rows) - (df := sum(s in t for t in rows.values())) + 0.5) / (df + 0.5))
                        for s in distinct
                    }
                    total = sum(idf.values())
                    for f in fields:
                        want_cov = sum(idf[s] for s in distinct & rows[f[0]]) / total if total else 0.0
                        assert f[8] == pytest.approx(want_cov, abs=1e-9)
        finally:
            eng.close()


@pytest.mark.parametrize("merge_at,bulk", [(10**9, 10**9), (1, 10**9), (10**9, 1)])
def test_changed_text_leaves_no_stale_postings(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, merge_at: int, bulk: int
) -> None:
    monkeypatch.setattr(lc, "MERGE_AT", merge_at)
    monkeypatch.setattr(lc, "BULK", bulk)
    eng = DynamicMemoryEngine(tmp_path / "m.db", clock=FixedClock(1_000_000.0), memory_embedder=None)
    a = eng.agent("ann")
    kiwi = [a.remember(f"kiwi alpha number {i}", dedup=False).id for i in range(4)]
    assert {h.memory.id for h in a.search("kiwi", k=10)} == set(kiwi)  # loaded (bulk or delta, merged or not)
    a.update(kiwi[0], content="mango only now")
    a.forget(kiwi[1])
    later = a.remember("kiwi arrives late", dedup=False).id
    got = {h.memory.id for h in a.search("kiwi", k=10)}
    assert got == {kiwi[2], kiwi[3], later}
    assert {h.memory.id for h in a.search("mango", k=10)} == {kiwi[0]}
    eng.close()


@settings(max_examples=100, deadline=None)
@given(
    docs=st.lists(
        st.tuples(sentence, st.sampled_from(AGENTS), st.booleans(), st.sampled_from([30.0, 30.0, 0.0, 5000.0])),
        min_size=1,
        max_size=14,
    ),
    query=sentence,
    limit=st.integers(1, 6),
)
def test_document_expansion_matches_a_direct_computation(
    docs: list[tuple[str, str, bool, float]], query: str, limit: int
) -> None:
    # bm25_prev: a key's BM25 plus 0.3 of the previous key's, when that one is visible and was made
    # 0 < Δt ≤ window before it; the pruned search returns the same top as the direct computation
    with tempfile.TemporaryDirectory() as d:
        eng = DynamicMemoryEngine(Path(d) / "m.db", clock=FixedClock(1_000_000.0), memory_embedder=None)
        try:
            t = 1_000_000.0
            for text, agent, shared, gap in docs:
                t += gap
                eng.agent(agent).remember(text, shared=shared, dedup=False, force=True, created_at=t)
            db, lexical = eng._backend, eng._runtime.recaller.lexical
            vis = Visibility("default", "ann", Confidentiality(0))
            stems = [stem(w) for w in query.split()]
            lexical.refresh(db)
            plain = naive(db, stems, vis, 10**9)
            shown = set(db.memories.visible_keys(vis))
            created = {r[0]: r[15] for r in db.memories.index_rows(-1)}
            want = dict(plain)
            for n, s in plain.items():
                m = n + 1
                if m in shown and 0 < created[m] - created[n] <= 3600.0:
                    want[m] = want.get(m, 0.0) + 0.3 * s
            got = lexical.search(stems, limit, vis, prev_weight=0.3, window=3600.0)
            assert len(got) == min(limit, len(want))
            for n, score in got.items():
                assert score == pytest.approx(want[n], rel=1e-4, abs=1e-5)
            if got:
                cut = min(got.values())
                assert all(s <= cut + 1e-4 for n, s in want.items() if n not in got)
        finally:
            eng.close()

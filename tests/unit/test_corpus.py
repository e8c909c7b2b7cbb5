"""The synthetic benchmark corpus (benchmarks/corpus.py): deterministic, proportioned, well-formed."""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter
from datetime import UTC, datetime
from itertools import islice
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import corpus

N = 5000


@pytest.fixture(scope="module")
def items() -> list[corpus.MemorySpec]:
    return list(corpus.generate(N, seed=0))


@pytest.fixture(scope="module")
def by_key(items: list[corpus.MemorySpec]) -> dict[str, corpus.MemorySpec]:
    return {m.key: m for m in items}


def test_same_seed_same_output_and_different_seed_differs() -> None:
    first = list(corpus.generate(400, seed=7))
    again = list(corpus.generate(400, seed=7))
    other = list(corpus.generate(400, seed=8))
    assert first == again
    assert [m.content for m in first] != [m.content for m in other]
    assert sum(a.content == b.content for a, b in zip(first, other, strict=True)) < 40


def test_streams_lazily() -> None:
    stream = corpus.generate(10_000_000, seed=1)
    head = list(islice(stream, 3))
    assert [m.key for m in head] == ["c000000", "c000001", "c000002"]


def test_keys_unique_and_stable(items: list[corpus.MemorySpec]) -> None:
    keys = [m.key for m in items]
    assert keys == [f"c{i:06d}" for i in range(N)]


def test_type_proportions(items: list[corpus.MemorySpec]) -> None:
    counts = Counter(m.type for m in items)
    assert set(counts) == set(corpus.TYPES)
    for type_, share in corpus.TYPE_WEIGHTS.items():
        assert abs(counts[type_] / N - share) < 0.03, (type_, counts[type_] / N)


def test_shared_links_duplicates_contradictions_rates(items: list[corpus.MemorySpec]) -> None:
    assert 0.26 < sum(m.shared for m in items) / N < 0.34
    assert 0.15 < sum(bool(m.links) for m in items) / N < 0.25
    assert 0.02 < sum(m.duplicate_of is not None for m in items) / N < 0.04
    contradicting = sum(any(edge == "contradicts" for _, edge in m.links) for m in items)
    assert 0.012 < contradicting / N < 0.03


def test_links_point_backwards_within_tenant_to_visible_memories(
    items: list[corpus.MemorySpec], by_key: dict[str, corpus.MemorySpec]
) -> None:
    for m in items:
        assert len(m.links) <= 3
        assert len({k for k, _ in m.links}) == len(m.links)
        for other_key, edge in m.links:
            assert edge in corpus.EDGE_TYPES
            other = by_key[other_key]
            assert other.key < m.key and other.created_at <= m.created_at
            assert other.tenant == m.tenant
            assert other.shared or other.agent == m.agent
    linked = [m for m in items if m.links]
    sharing = sum(
        any(set(by_key[k].entities) & set(m.entities) or by_key[k].topic == m.topic for k, _ in m.links) for m in linked
    )
    assert sharing / len(linked) > 0.9


def test_agents_tenants_and_ids(items: list[corpus.MemorySpec]) -> None:
    assert {m.tenant for m in items} == set(corpus.TENANTS[:4])
    assert len({m.agent for m in items}) == 8
    for m in items:
        assert corpus.AGENT_ID_RULE.match(m.agent), m.agent
    many = list(corpus.generate(300, seed=2, agents=20, tenants=12))
    assert all(corpus.AGENT_ID_RULE.match(m.agent) for m in many)
    assert {m.tenant for m in many} <= set(corpus.TENANTS)


def test_only_todos_have_status(items: list[corpus.MemorySpec]) -> None:
    for m in items:
        if m.type == "todo":
            assert m.status in ("open", "done", "dropped")
        else:
            assert m.status is None
    statuses = Counter(m.status for m in items if m.type == "todo")
    assert len(statuses) == 3


def test_fields_in_range(items: list[corpus.MemorySpec]) -> None:
    lengths = [len(m.content) for m in items]
    assert 100 <= statistics.mean(lengths) <= 250
    for m in items:
        assert 8 <= len(m.content.split()) <= 60, m.content
        assert len(m.tags) <= 3 and len(set(m.tags)) == len(m.tags)
        assert 0.0 <= m.importance <= 10.0
        assert 0.0 <= m.salience <= 1.0
        assert 0.0 <= m.confidence <= 1.0
        assert len(m.title) <= 80
    importance = [m.importance for m in items]
    assert statistics.mean(importance) < 5.5
    assert sum(i >= 9 for i in importance) / N < 0.12
    assert 0.15 < sum(not m.title for m in items) / N < 0.4


def test_timestamps_ordered_with_daily_and_weekly_rhythm(items: list[corpus.MemorySpec]) -> None:
    start = 1_735_689_600.0
    times = [m.created_at for m in items]
    assert times == sorted(times)
    assert start <= times[0] and times[-1] < start + 180 * 86400
    assert times[-1] - times[0] > 170 * 86400
    stamps = [datetime.fromtimestamp(t, UTC) for t in times]
    night = sum(s.hour < 6 for s in stamps)
    office = sum(9 <= s.hour < 17 for s in stamps)
    assert office > 5 * night
    weekend_share = sum(s.weekday() >= 5 for s in stamps) / N
    assert weekend_share < 0.15  # 2/7 ≈ 0.29 if there were no weekly rhythm


def test_entities_recur_with_zipfian_popularity(items: list[corpus.MemorySpec]) -> None:
    counts = Counter(e for m in items for e in m.entities)
    ranked = [c for _, c in counts.most_common()]
    assert len(ranked) > 500
    assert ranked[0] > 50 * statistics.median(ranked)
    for m in items:
        for entity in m.entities:
            surface = entity.split(" ", 1)[0]
            assert surface in m.content, (entity, m.content)


def test_vocabulary_realistic_and_sublinear(items: list[corpus.MemorySpec]) -> None:
    small = corpus.vocabulary(items[: N // 10])
    large = corpus.vocabulary(items)
    assert len(large) > 1500
    assert len(large) < len(small) * 10**0.8  # Heaps-like: 10x the text, far fewer than 10x the words
    ranked = [c for _, c in large.most_common()]
    assert ranked[0] > 100 * ranked[len(ranked) // 2]


def test_restatements_and_contradictions(items: list[corpus.MemorySpec], by_key: dict[str, corpus.MemorySpec]) -> None:
    for m in items:
        if m.duplicate_of is not None:
            original = by_key[m.duplicate_of]
            assert original.key < m.key and original.tenant == m.tenant
            assert (original.template, original.facts) == (m.template, m.facts)
            assert original.content != m.content
        for other_key, edge in m.links:
            if edge == "contradicts":
                original = by_key[other_key]
                assert original.template == m.template
                changed = [k for (k, v), (_, w) in zip(original.facts, m.facts, strict=True) if v != w]
                assert len(changed) == 1


def test_queries_have_known_relevant_keys(items: list[corpus.MemorySpec], by_key: dict[str, corpus.MemorySpec]) -> None:
    sample = items[:3000]
    qs = corpus.queries(sample, 90, seed=0)
    assert len(qs) == 90
    assert qs == corpus.queries(sample, 90, seed=0)
    assert Counter(q.kind for q in qs) == {"exact": 30, "partial": 30, "paraphrase": 30}
    sample_keys = {m.key for m in sample}
    for q in qs:
        assert q.text and 1 <= len(q.relevant_keys) <= 5
        assert q.target in q.relevant_keys
        for key in q.relevant_keys:
            assert key in sample_keys
            m = by_key[key]
            assert m.tenant == q.tenant and (m.shared or m.agent == q.agent)
        target = by_key[q.target]
        if q.kind == "exact":
            content = target.content.lower()
            assert all(word.lower() in content for word in q.text.split())
    overlap = statistics.mean(
        len(set(corpus.tokens(q.text)) & set(corpus.tokens(by_key[q.target].content))) / len(set(corpus.tokens(q.text)))
        for q in qs
        if q.kind == "paraphrase"
    )
    assert overlap < 0.5


def test_cli_writes_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "corpus.jsonl"
    assert corpus.main(["--n", "60", "--seed", "0", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 60
    expected = [m.to_json() for m in corpus.generate(60, seed=0)]
    assert rows == json.loads(json.dumps(expected))
    assert all(isinstance(link, list) for row in rows for link in row["links"])
    assert "items/s" in capsys.readouterr().out


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        corpus.generate(10, tenants=0)
    with pytest.raises(ValueError):
        corpus.generate(10, tenants=len(corpus.TENANTS) + 1)
    with pytest.raises(ValueError):
        corpus.generate(-1)


def test_templates_are_consistent() -> None:
    for tpl in corpus.TEMPLATE_INDEX.values():
        assert tpl.type in corpus.TYPES and tpl.topic in corpus.TOPICS
        assert tpl.question_keys <= set(tpl.content.keys), tpl.id
        assert (tpl.question is None) == (tpl.type == "scratch"), tpl.id
    for topic in corpus.TOPICS:
        assert {t.type for t in corpus.TEMPLATE_INDEX.values() if t.topic == topic} == set(corpus.TYPES)

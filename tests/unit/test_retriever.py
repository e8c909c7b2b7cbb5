"""MemoryRetriever: keyword hits dominate recency at any span, whole-table candidates, dedup, scope."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from engramdb import DynamicMemoryEngine, MemoryRetriever, ScopeViolation, SqlError

if TYPE_CHECKING:
    import numpy
    import numpy.typing as npt

DAY = 86_400


def _table(engine: DynamicMemoryEngine, rows: list[tuple[str, int]]) -> None:
    shared = engine.get_shared_scope()
    shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT, created_ts INTEGER)")
    shared.executemany("INSERT INTO shared_notes (content, created_ts) VALUES (?, ?)", rows)


@pytest.mark.parametrize("days_apart", [0, 1, 12, 13, 365, 36_500])
def test_keyword_match_beats_any_recency(engine: DynamicMemoryEngine, days_apart: int) -> None:
    # hits·1e6 + created_ts lets a newer row win once rows are ~11.6 days (1e6 s) apart; ours never does.
    _table(
        engine,
        [
            ("the deploy key rotates weekly", 1_000_000_000),
            ("an unrelated newer note", 1_000_000_000 + days_apart * DAY),
        ],
    )
    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes", content_column="content")
    ranked = r.rank("when does the deploy key rotate")
    assert ranked[0].content == "the deploy key rotates weekly"
    assert ranked[0].hits == 2


def test_more_hits_rank_first_and_recency_breaks_ties(engine: DynamicMemoryEngine) -> None:
    _table(engine, [("alpha beta", 3), ("alpha", 1), ("alpha", 2), ("beta gamma alpha", 0)])
    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes", include_unmatched=False)
    ranked = r.rank("alpha beta gamma")
    assert [x.rowid for x in ranked] == [4, 1, 3]  # 3 hits, 2 hits, then the newer "alpha" (dup of row 2 removed)


def test_candidates_come_from_the_whole_table(engine: DynamicMemoryEngine) -> None:
    rows = [("the needle is in the oldest row", 0)] + [(f"filler note number {i}", i + 1) for i in range(5_000)]
    _table(engine, rows)
    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes", token_budget=64)
    assert "[shared_notes row 1] the needle is in the oldest row" in r.retrieve("needle")


def test_whole_words_only(engine: DynamicMemoryEngine) -> None:
    _table(engine, [("start the engine", 1), ("modern art", 2)])
    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes", include_unmatched=False)
    assert [x.content for x in r.rank("art")] == ["modern art"]


def test_duplicates_are_shown_once(engine: DynamicMemoryEngine) -> None:
    _table(engine, [("Fact: water boils at 100 C", 1), ("fact:  WATER boils at 100 c", 2), ("other", 3)])
    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes")
    text = r.retrieve("water boils")
    assert text.count("boils") == 1


def test_unmatched_rows_fill_by_recency_or_not_at_all(engine: DynamicMemoryEngine) -> None:
    _table(engine, [("old", 1), ("new", 2), ("match here", 0)])
    scope = engine.get_shared_scope()
    assert [x.content for x in MemoryRetriever(scope=scope, table="shared_notes").rank("match")] == [
        "match here",
        "new",
        "old",
    ]
    assert [
        x.content for x in MemoryRetriever(scope=scope, table="shared_notes", include_unmatched=False).rank("match")
    ] == ["match here"]


def test_custom_token_counter_and_budget(engine: DynamicMemoryEngine) -> None:
    _table(engine, [(f"note {i} " + "word " * 20, i) for i in range(50)])

    def words(s: str) -> int:
        return len(s.split())

    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes", token_budget=100, token_counter=words)
    text = r.retrieve("note word")
    assert 0 < words(text) <= 100


def test_retriever_reads_only_its_scope(engine: DynamicMemoryEngine) -> None:
    engine.get_private_scope("bob").execute("CREATE TABLE private_bob_secrets (content TEXT)")
    with pytest.raises(ScopeViolation):
        MemoryRetriever(scope=engine.get_shared_scope(), table="private_bob_secrets")
    with pytest.raises(ScopeViolation):
        MemoryRetriever(scope=engine.get_private_scope("alice"), table="private_bob_secrets")


def test_bad_columns_are_clear_errors(engine: DynamicMemoryEngine) -> None:
    _table(engine, [("x", 1)])
    scope = engine.get_shared_scope()
    with pytest.raises(SqlError, match="no column body"):
        MemoryRetriever(scope=scope, table="shared_notes", content_column="body")
    with pytest.raises(SqlError, match="plain column name"):
        MemoryRetriever(scope=scope, table="shared_notes", content_column='content" FROM x --')
    with pytest.raises(SqlError, match="no such table"):
        MemoryRetriever(scope=scope, table="shared_missing")


def test_rowid_is_the_default_recency(engine: DynamicMemoryEngine) -> None:
    shared = engine.get_shared_scope()
    shared.execute("CREATE TABLE shared_log (content TEXT)")
    shared.executemany("INSERT INTO shared_log VALUES (?)", [("first",), ("second",)])
    r = MemoryRetriever(scope=shared, table="shared_log")
    assert r.recency_column is None
    assert [x.content for x in r.rank("nothing matches")] == ["second", "first"]


def test_semantic_ranking_with_an_injected_embedder(tmp_path: object) -> None:
    np = pytest.importorskip("numpy")

    class TwoTopics:
        name, dim = "two-topics@1", 2

        def embed(self, texts: Sequence[str]) -> npt.NDArray[numpy.float32]:
            out: npt.NDArray[numpy.float32] = np.array(
                [[1.0, 0.0] if "cat" in t or "kitten" in t else [0.0, 1.0] for t in texts], dtype=np.float32
            )
            return out

    eng = DynamicMemoryEngine(f"{tmp_path}/s.db", enable_embeddings=True, embedder=TwoTopics())
    _table(eng, [("a kitten sleeps", 1), ("stock prices fell", 2), ("bonds rallied", 3)])
    r = MemoryRetriever(scope=eng.get_shared_scope(), table="shared_notes")
    assert r.semantic
    # No keyword matches "cat": the semantically closest row comes first, not the newest.
    assert r.rank("cat")[0].content == "a kitten sleeps"
    # New rows are embedded on the next retrieve; deleted rows drop out.
    eng.get_shared_scope().execute("INSERT INTO shared_notes (content, created_ts) VALUES ('my cat purrs', 4)")
    eng.get_shared_scope().execute("DELETE FROM shared_notes WHERE content = 'a kitten sleeps'")
    ranked = r.rank("cat")
    assert ranked[0].content == "my cat purrs" and all(x.content != "a kitten sleeps" for x in ranked)
    eng.close()


def test_early_stopping_gives_the_same_top_rows_as_a_full_scan(engine: DynamicMemoryEngine) -> None:
    import random

    from engramdb.retrieval.keywords import hits, keywords, words

    rng = random.Random(3)
    vocab = [
        "go",
        "good",
        "going",
        "ago",
        "deploy",
        "deployed",
        "key",
        "keys",
        "monkey",
        "rotate",
        "art",
        "start",
        "smart",
    ]
    rows = [(" ".join(rng.choices(vocab, k=rng.randint(1, 8))), rng.randint(0, 50)) for _ in range(3000)]
    _table(engine, rows)
    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes", include_unmatched=False)
    for _ in range(25):
        q = " ".join(rng.choices(vocab, k=rng.randint(1, 4)))
        kws = keywords(q)
        brute = sorted(
            ((hits(c, kws), ts, i + 1, c) for i, (c, ts) in enumerate(rows) if hits(c, kws)),
            key=lambda x: (-x[0], -x[1], -x[2]),
        )
        seen: set[str] = set()
        expected = []
        for h, _, rid, c in brute:
            key = " ".join(words(c))
            if key not in seen:
                seen.add(key)
                expected.append((rid, h))
        for limit in (1, 7, 40):
            got = [(x.rowid, x.hits) for x in r.rank(q, limit=limit)]
            assert got == expected[:limit], q


def test_like_wildcards_in_keywords_are_literal_and_non_ascii_case_folds(engine: DynamicMemoryEngine) -> None:
    _table(engine, [("the user_id column", 1), ("userXid is not it", 2), ("Über alles", 3), ("ÜBER CAPS", 4)])
    r = MemoryRetriever(scope=engine.get_shared_scope(), table="shared_notes", include_unmatched=False)
    assert [x.content for x in r.rank("user_id")] == ["the user_id column"]
    assert {x.content for x in r.rank("über")} == {"Über alles", "ÜBER CAPS"}


@pytest.mark.parametrize(
    "query",
    ["a" * 60_000, "hello " + "b" * 100_000, " ".join(f"w{i}" for i in range(5_000)), "%_\\" * 1_000, "x" * 60_000],
)
def test_retrieval_never_fails_on_the_shape_of_a_query(query: str, tmp_path: Path) -> None:
    """SQLite refuses LIKE patterns past 50,000 bytes ("LIKE or GLOB pattern too complex"): a query
    made of one huge word, or of thousands of words, still ranks."""
    eng = DynamicMemoryEngine(tmp_path / "q.db")
    shared = eng.get_shared_scope()
    shared.execute("CREATE TABLE shared_notes (id INTEGER PRIMARY KEY, content TEXT)")
    shared.executemany("INSERT INTO shared_notes (content) VALUES (?)", [("x" * 60_000,), ("hello world",)])
    r = MemoryRetriever(scope=shared, token_budget=200, table="shared_notes", content_column="content")
    text = r.retrieve(query)
    assert text.startswith("--- UNTRUSTED EVIDENCE START") and "hello world" in text
    eng.close()

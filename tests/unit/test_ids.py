"""New memory and recall ids: the second they were minted, then 64 random bits."""

from __future__ import annotations

import re

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.memories.reading import looks_like_recall_id
from engramdb.memories.text import id_tokens
from engramdb.testing import FixedClock


def test_tokens_sort_by_their_second_and_never_repeat() -> None:
    early, late = id_tokens(1_700_000_000.9, 500), id_tokens(1_700_000_001.0, 500)
    assert all(re.fullmatch(r"[0-9a-f]{24}", t) for t in early + late)
    assert {t[:8] for t in early} == {f"{1_700_000_000:08x}"} and {t[:8] for t in late} == {f"{1_700_000_001:08x}"}
    assert max(early) < min(late)
    assert len(set(early + late)) == 1_000


@pytest.mark.parametrize(
    ("now", "stamp"),
    [
        (-5.0, "00000000"),
        (float("nan"), "00000000"),
        (float("inf"), "ffffffff"),
        (float("-inf"), "00000000"),
        (1e12, "ffffffff"),
    ],
)
def test_a_clock_outside_the_stamps_range_still_mints_ids(now: float, stamp: str) -> None:
    tokens = id_tokens(now, 3)
    assert [t[:8] for t in tokens] == [stamp] * 3 and len(set(tokens)) == 3


def test_memory_and_recall_ids_carry_the_writers_second() -> None:
    clock = FixedClock(1_750_000_000.0)
    with DynamicMemoryEngine(":memory:", clock=clock) as eng:
        me = eng.agent("alice")
        first = me.remember("the deploy rota changes on Mondays")
        clock.advance(2)
        batch = me.remember_many([{"content": "the staging cluster runs in region 3"}, {"content": "lunch is at noon"}])
        recall = me.recall("deploy rota")
    assert first.id == f"alice:{1_750_000_000:08x}" + first.id[-16:]
    assert all(m.id.startswith(f"alice:{1_750_000_002:08x}") for m in batch)
    assert first.id < min(m.id for m in batch)
    assert recall.recall_id is not None and recall.recall_id.startswith(f"rc_{1_750_000_002:08x}")
    assert looks_like_recall_id(recall.recall_id)


def test_recall_ids_minted_before_the_stamp_still_read_as_recall_ids() -> None:
    assert looks_like_recall_id("rc_0123456789abcdef")  # 16 digits: made before ids carried a second
    assert looks_like_recall_id("rc_6924810091eb70280328b042")
    assert not looks_like_recall_id("rc_0123456789abcde")
    assert not looks_like_recall_id("rc_0123456789abcdef01")

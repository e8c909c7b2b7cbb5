"""Dedup among memories of the very same vector (#15 review): the ties are tried stored first,
oldest first, so one call at a time and a batch decide alike, a text remembered again meets its
own earlier copy however many others share its vector (up to `DEDUP_MATCHES`), and int8 rows (an
`AnnIndex` once compact) tie as float32 ones do. The first three cases come from an adversarial
review of the change that made dedup try ties; each failed on it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from engramdb import DynamicMemoryEngine
from engramdb.embeddings.hashing import HashingEmbedder

LOW = "we deploy the billing api on friday"
CAPS = "WE DEPLOY THE BILLING API ON FRIDAY"


def test_one_by_one_a_tie_goes_to_the_oldest_memory_as_in_a_batch(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    e = make_engine(memory_embedder=HashingEmbedder(dim=64))
    a = e.agent("alice")
    a.remember_many([{"content": f"filler number {i} about topic {i * 7 % 13}"} for i in range(4)], dedup=False)
    low = a.remember(LOW)
    caps = a.remember(CAPS, dedup=False)  # the same statement, stored a second time on purpose
    assert caps.id != low.id
    batch = a.remember_many([{"content": LOW}] + [{"content": f"totally new thing {i}"} for i in range(4)])
    assert batch[0].id == low.id
    assert a.remember(LOW).id == low.id  # the CAPITALS memory says it too, but is younger
    assert a.remember(CAPS).id == low.id


def test_a_text_meets_its_own_copy_among_more_than_four_of_its_vector(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    """The same words about five people: five memories of one vector, none repeating another (an
    entity each). Remembering Eve's again reinforces Eve's; it was stored again on every call
    while only four ties were tried."""
    e = make_engine(memory_embedder=HashingEmbedder(dim=64))
    a = e.agent("alice")
    names = ["Ann", "Ben", "Cat", "Dan", "Eve", "Fay"]
    first = {n: a.remember("had lunch at the corner cafe", entities=[n]).id for n in names}
    assert len(set(first.values())) == len(names)
    for n in ("Eve", "Fay", "Ann"):
        assert a.remember("had lunch at the corner cafe", entities=[n]).id == first[n]
    assert a.remember_many([{"content": "had lunch at the corner cafe", "entities": ["Fay"]}])[0].id == first["Fay"]
    assert a.browse(limit=100).total == len(names)


@pytest.mark.parametrize("compact", [True, False])
def test_a_batch_ties_a_stored_memory_as_one_call_at_a_time_does(
    make_engine: Callable[..., DynamicMemoryEngine], compact: bool
) -> None:
    """Past the IVF's training size the default index holds int8 rows: a stored memory's cosine with
    an item is ~1e-3 below the float32 one an earlier item of the batch gets, so the stored copy
    lost the tie to the batch's. Items are now compared with earlier items as those will be stored."""
    pytest.importorskip("faiss")
    from engramdb.vectors.ann import AnnIndex

    def build(name: str) -> tuple[DynamicMemoryEngine, str]:
        e = make_engine(
            name,
            memory_embedder=HashingEmbedder(dim=64),
            vector_index=lambda dim: AnnIndex(dim, train_at=40, nlist=4, rebuild_growth=0, compact=compact),
        )
        a = e.agent("alice")
        a.remember_many([{"content": f"filler number {i} about topic {i * 7 % 13}"} for i in range(60)], dedup=False)
        return e, a.remember(LOW).id

    # LOW about Ann: the same vector, but a fact the stored memory (about no one) does not hold;
    # LOW itself then repeats both the stored memory and that one.
    about_ann: dict[str, Any] = {"content": LOW, "entities": ["Ann"]}
    one, low = build("one")
    a = one.agent("alice")
    assert one._runtime.vectors is not None and one._runtime.vectors.approximate
    assert a.remember(**about_ann).id != low
    assert a.remember(LOW).id == low

    many, low = build("many")
    out = many.agent("alice").remember_many([about_ann, {"content": LOW}])
    assert out[0].id != low
    assert out[1].id == low

"""Confidentiality is never lowered by a race, and a shared memory is raised only by its author.

The race is made to happen, not hoped for: the embedder of the updating thread waits (between
the update's first read and its write) until another thread has raised the level and committed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
import pytest

from engramdb import Confidentiality, DynamicMemoryEngine, Tombstone, ValidationError
from engramdb.testing import fake_embedder

PUBLIC, INTERNAL, CONFIDENTIAL = Confidentiality.PUBLIC, Confidentiality.INTERNAL, Confidentiality.CONFIDENTIAL


class GatedEmbedder:
    """The fast test embedder, except that while `gate` is armed, an `embed` call on another
    thread than the arming one signals `entered` and waits for `release`."""

    def __init__(self) -> None:
        self._inner = fake_embedder()
        self.armed_by: int | None = None
        self.entered, self.release = threading.Event(), threading.Event()

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def dim(self) -> int:
        return self._inner.dim

    def embed(self, texts: Sequence[str]) -> Any:
        if self.armed_by is not None and threading.get_ident() != self.armed_by:
            self.entered.set()
            assert self.release.wait(10)
        return np.asarray(self._inner.embed(texts))


@pytest.fixture
def gated(make_engine: Callable[..., DynamicMemoryEngine]) -> tuple[DynamicMemoryEngine, GatedEmbedder]:
    emb = GatedEmbedder()
    return make_engine(memory_embedder=emb), emb


def _race(emb: GatedEmbedder, slow: Callable[[], object], fast: Callable[[], object]) -> list[BaseException]:
    """Run `slow` on a thread until it embeds, then `fast` here, then let `slow` finish."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            slow()
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    emb.armed_by = threading.get_ident()
    worker = threading.Thread(target=run)
    worker.start()
    try:
        assert emb.entered.wait(10), "the slow update never reached its embedding"
        fast()
    finally:
        emb.release.set()
        worker.join(10)
        emb.armed_by = None
    return errors


def test_a_content_update_racing_a_level_raise_keeps_the_raise(
    gated: tuple[DynamicMemoryEngine, GatedEmbedder],
) -> None:
    eng, emb = gated
    me = eng.agent("alice")
    m = me.remember("the launch plan, draft one")
    errors = _race(
        emb,
        slow=lambda: me.update(m.id, content="the launch plan, draft two"),
        fast=lambda: eng.agent("alice").update(m.id, confidentiality=CONFIDENTIAL),
    )
    assert errors == []
    final = me.get(m.id, touch=False)
    assert final.content == "the launch plan, draft two" and final.confidentiality is CONFIDENTIAL
    assert eng.agent("alice", cap=INTERNAL).memories() == []  # hidden from the lower cap, as raised


def test_a_content_update_racing_a_link_to_a_higher_memory_keeps_the_raise(
    gated: tuple[DynamicMemoryEngine, GatedEmbedder],
) -> None:
    eng, emb = gated
    me = eng.agent("alice")
    low = me.remember("the offsite venue shortlist")
    high = me.remember("the offsite budget ceiling", confidentiality=CONFIDENTIAL)
    errors = _race(
        emb,
        slow=lambda: me.update(low.id, content="the offsite venue shortlist, revised"),
        fast=lambda: eng.agent("alice").link(low.id, high.id, "related"),
    )
    assert errors == []
    assert me.get(low.id, touch=False).confidentiality is CONFIDENTIAL


def test_only_the_author_raises_a_shared_memory(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    """Decided: linking a shared memory into a more confidential one would raise it and hide it from
    the team's readers below that level, so only its author may do that (by a link or an update)."""
    eng = make_engine(memory_embedder=fake_embedder())
    alice, bob = eng.agent("alice"), eng.agent("bob")
    team = alice.remember("the on-call rota for December", shared=True)
    secret = bob.remember("bob's confidential review notes", confidentiality=CONFIDENTIAL)
    with pytest.raises(ValidationError, match="only its author"):
        bob.link(secret.id, team.id, "related")
    with pytest.raises(ValidationError, match="only its author"):
        bob.update(team.id, confidentiality=CONFIDENTIAL)
    assert bob.edges(secret.id) == [] and alice.get(team.id, touch=False).confidentiality is PUBLIC
    assert [m.id for m in eng.agent("carol", cap=PUBLIC).memories()] == [team.id]  # still the team's
    bob.update(team.id, content="the on-call rota for December, week 2 swapped")  # editing stays open
    own_secret = alice.remember("alice's confidential plan", confidentiality=CONFIDENTIAL)
    alice.link(own_secret.id, team.id, "related")  # the author may
    assert alice.get(team.id, touch=False).confidentiality is CONFIDENTIAL


def test_a_capped_copy_never_reads_the_queries_of_an_uncapped_one(
    make_engine: Callable[..., DynamicMemoryEngine],
) -> None:
    eng = make_engine(memory_embedder=fake_embedder())
    full = eng.agent("alice")
    note = full.remember("the quarterly numbers review")
    trusted = full.recall("quarterly numbers before the zqsecret merger announcement", trace_ref="zqtrace")
    capped = eng.agent("alice", cap=INTERNAL)
    assert trusted.recall_id is not None
    seen = capped.accesses(note.id)
    assert all(a.query is None and a.trace_ref is None for a in seen if a.recall_id == trusted.recall_id)
    assert "zqsecret" not in repr(seen) and "zqtrace" not in repr(seen)
    from engramdb import NotFound

    with pytest.raises(NotFound):
        capped.explain(trusted.recall_id)
    # its own recalls, and the uncapped handle's view, are unchanged
    mine = capped.recall("quarterly numbers")
    assert capped.explain(mine.recall_id or "").query == "quarterly numbers"
    assert any(a.query and "zqsecret" in a.query for a in full.accesses(note.id))
    assert full.explain(trusted.recall_id).query.startswith("quarterly numbers before")


def test_a_tombstone_tells_a_writer_below_its_level_nothing(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    from engramdb import Forgotten

    eng = make_engine(memory_embedder=fake_embedder())
    lead = eng.agent("alice")
    secret = lead.remember("zqproject falcon ships in May", shared=True, confidentiality=CONFIDENTIAL)
    lead.forget(secret.id, reason="zqreason: the board asked")
    low = eng.agent("bob", cap=INTERNAL)
    # bob could never see the forgotten memory: no refusal, so no id, author or reason, and not
    # even the fact that this exact text once existed above his cap
    stored = low.remember("zqproject falcon ships in May", shared=True)
    assert stored.confidentiality is PUBLIC
    low.forget(stored.id, reason="bob's own")
    with pytest.raises(Forgotten) as err:  # a writer at the level is still told, with what it may see
        eng.agent("carol").remember("zqproject falcon ships in May", shared=True)
    assert cast(Tombstone, err.value.tombstone).memory_id in (secret.id, stored.id)
    high = eng.agent("carol")
    with pytest.raises(Forgotten) as err:
        high.remember("zqproject falcon ships in May", shared=True, confidentiality=CONFIDENTIAL)
    assert cast(Tombstone, err.value.tombstone).confidentiality in (PUBLIC, CONFIDENTIAL)
    # the capped writer is told only of the tombstone at its own level (bob's), never of alice's
    with pytest.raises(Forgotten) as err:
        low.remember("zqproject falcon ships in May", shared=True)
    assert cast(Tombstone, err.value.tombstone).memory_id == stored.id and "zqreason" not in str(err.value)

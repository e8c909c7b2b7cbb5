"""Visibility is one value with two compiled forms: the backend's SQL predicate and the array mask
of the in-memory channels. For random rows and random readers they must select the same memories.

The rows are stored through the ports (on whichever backend runs the suite); the SQL side is
`MemoryRows.visible_keys`, the array side `VisibilityColumns.mask` (and `mask_at`) over `MemoryRows.visibility_rows`.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engramdb.memories.model import Confidentiality, MemoryType, TodoStatus, Visibility
from engramdb.retrieval.columns import VisibilityColumns
from engramdb.storage.ports import Backend
from tests.contract.conftest import memory, put

TENANTS = ("default", "acme", "t-3")
AGENTS = ("alice", "bob", "carol")
TIMES = (None, 50.0, 100.0, 150.0, 200.0)
TYPES = ("info", "episode", "skill", "todo")


def populate(backend: Backend, seed: int, n: int = 240) -> None:
    rnd = random.Random(seed)
    ms = []
    for _ in range(n):
        lo = rnd.choice(TIMES)
        hi = rnd.choice([t for t in TIMES if t is None or lo is None or t >= lo])
        mtype = MemoryType(rnd.choice(TYPES))
        ms.append(
            memory(
                tenant=rnd.choice(TENANTS),
                owner=rnd.choice(("", *AGENTS)),
                confidentiality=Confidentiality(rnd.randrange(4)),
                valid_from=lo,
                valid_to=hi,
                type=mtype,
                status=None if mtype is not MemoryType.TODO else TodoStatus.OPEN,
            )
        )
    keys = put(backend, ms)
    archived = [k for k in keys if rnd.random() < 0.25]
    backend.memories.archive_keys(archived, backend.changes.next("default"))


def masked(backend: Backend, vis: Visibility, types: list[str] | None) -> list[int]:
    rows = backend.memories.visibility_rows()
    n = max(r[0] for r in rows) + 1
    cols = VisibilityColumns(n)
    cols.set_many(np.array([r[0] for r in rows], dtype=np.int64), [r[1:] for r in rows])
    found = [int(k) for k in np.flatnonzero(cols.mask(vis, n, types))]
    # The rule at a few rows only (dedup's candidates) is the same rule.
    some = np.array(sorted(random.Random(n).sample(range(n), n // 3)), dtype=np.int64)
    assert [int(k) for k in some[cols.mask_at(vis, some, types)]] == [k for k in found if k in set(some.tolist())]
    return found


readers = st.builds(
    Visibility,
    tenant=st.sampled_from((*TENANTS, "nobody")),
    reader=st.sampled_from((*AGENTS, "dave")),
    cap=st.sampled_from(list(Confidentiality)),
    as_of=st.sampled_from((None, 0.0, 50.0, 99.5, 100.0, 175.0, 500.0)),
    cross_agent=st.booleans(),
    include_archived=st.booleans(),
    own_only=st.booleans(),
)


@pytest.mark.parametrize("seed", [1, 2])
def test_predicate_and_mask_select_the_same_rows(backend: Backend, seed: int) -> None:
    populate(backend, seed)

    @settings(max_examples=120, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(
        vis=readers, types=st.one_of(st.none(), st.lists(st.sampled_from(TYPES), min_size=1, max_size=2, unique=True))
    )
    def check(vis: Visibility, types: list[str] | None) -> None:
        sql = backend.memories.visible_keys(vis, types=types)
        assert sql == masked(backend, vis, types), vis

    check()


def test_the_check_can_fail(backend: Backend) -> None:
    # The comparison above is not vacuous: readers see different, non-empty sets.
    populate(backend, 3)
    seen = {
        tuple(backend.memories.visible_keys(Visibility(t, a, Confidentiality.RESTRICTED)))
        for t in TENANTS
        for a in AGENTS
    }
    assert len(seen) == len(TENANTS) * len(AGENTS) and all(seen)

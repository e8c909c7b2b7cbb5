"""The inspector on the configured backend (``--backend=sqlite|postgres``): the same crawl of every
page and JSON answer as tests/interfaces/test_inspector.py finds nothing the viewing agent may not
see, and leaves the access stream as it was."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the inspect extra is not installed")

from starlette.testclient import TestClient

from engramdb import DynamicMemoryEngine
from engramdb.inspector import create_app
from engramdb.testing import FixedClock, fake_embedder
from tests.inspector_data import MARKERS, Store, crawl, populate, viewer


def _stream(engine: DynamicMemoryEngine) -> Any:
    a = engine.agent("alice")
    return [(m.id, m.strength, m.access_count, a.accesses(m.id)) for m in a.memories(include_archived=True)]


def test_nothing_hidden_and_nothing_changed(make_engine: Callable[..., DynamicMemoryEngine], clock: FixedClock) -> None:
    engine = make_engine(memory_embedder=fake_embedder())
    store = Store(path=None)
    populate(engine, clock, store)
    before = _stream(engine)
    inspector = create_app(viewer(engine))
    with TestClient(inspector.app, base_url="http://127.0.0.1", follow_redirects=False) as c:
        assert c.get(f"/?token={inspector.token}").status_code == 303
        pages = crawl(c, store)
        assert len(pages) > 60
        for url, r in pages.items():
            assert r.status_code in (200, 400, 404), (url, r.status_code)
            assert not [m for m in MARKERS if m in r.text], url
        for mid in store.hidden_ids:
            assert pages[f"/api/memory/{mid}"].status_code == 404
        top = c.get("/api/recall?q=when+does+the+deploy+key+rotate&k=3").json()["hits"][0]
        assert top["id"] == store.ids["deploy"]
        rows = c.get("/api/tables?table=shared_notes&page=2").json()["rows"]
        assert (len(rows["rows"]), rows["more"]) == (10, False)
        refused = c.get("/api/tables?sql=SELECT+body+FROM+private_bob_secret").json()["result"]
        assert "error" in refused and "Qx7" not in refused["message"]
    assert _stream(engine) == before

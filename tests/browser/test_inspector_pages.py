"""The inspector's pages in a real headless Chromium: each loads without a console error or an
uncaught exception (a Content-Security-Policy violation is one), the playground finds the expected
top hit, nothing hidden is rendered, and a visit without the token is refused."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the inspect extra is not installed")

from engramdb.testing import FixedClock
from tests.inspector_data import MARKERS, Store, build, open_engine, viewer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build(tmp_path_factory.mktemp("browser") / "memory.db", FixedClock())


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[Any]:
    from engramdb.inspector import InspectorServer

    assert store.path is not None
    with open_engine(store.path, FixedClock(1_770_000_000.0)) as engine:
        srv = InspectorServer(viewer(engine))
        srv.start()
        try:
            yield srv
        finally:
            srv.stop()


class Page:
    """A browser tab that remembers every console error and uncaught exception."""

    def __init__(self, tab: Any) -> None:
        self.tab = tab
        self.errors: list[str] = []
        tab.on("console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None)
        tab.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))

    def open(self, url: str) -> Any:
        response = self.tab.goto(url, wait_until="load")
        return response


@pytest.fixture
def page(browser: Any, server: Any) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    tab = Page(context.new_page())
    assert tab.open(server.url).status == 200  # the token once; the cookie from then on
    try:
        yield tab
    finally:
        context.close()


def _no_hidden(tab: Any) -> None:
    html = tab.content()
    for marker in MARKERS:
        assert marker not in html


def test_every_page_loads_cleanly(page: Page, server: Any, store: Store) -> None:
    base = server.base
    assert page.tab.url == base + "/"  # the token left the address bar
    pages = [
        ("/", "#memories"),
        ("/?status=archived", "#memories"),
        ("/?status=forgotten", "#tombstones"),
        (f"/memory/{store.ids['deploy']}", "#timeline"),
        (f"/graph/{store.ids['postgres']}?depth=2", "#graph[data-ready]"),
        ("/recall?q=who+is+on+call+for+payments", "#scores"),
        ("/stats", "#types"),
        ("/tables?table=shared_notes", "table.rows"),
        ("/tables?sql=SELECT+*+FROM+private_bob_secret", "#sql-error"),
    ]
    for path, selector in pages:
        response = page.open(base + path)
        assert response.status == 200, path
        page.tab.wait_for_selector(selector, state="attached", timeout=10_000)
        _no_hidden(page.tab)
        assert page.errors == [], (path, page.errors)
    # the charts drew something (a blank canvas would be all zeros)
    page.open(base + "/stats")
    drawn = page.tab.evaluate(
        "() => [...document.querySelectorAll('canvas')].map(c => c.getContext('2d')"
        ".getImageData(0, 0, c.width, c.height).data.some(v => v !== 0))"
    )
    assert drawn == [True, True, True, True]
    page.open(base + f"/graph/{store.ids['postgres']}?depth=2")
    assert page.tab.wait_for_selector("#graph[data-ready]").get_attribute("data-ready") == "3"
    assert page.errors == []


def test_the_playground_finds_the_expected_top_hit(page: Page, server: Any, store: Store) -> None:
    page.open(server.base + "/recall")
    page.tab.fill("input[name=q]", "when does the deploy key rotate?")
    page.tab.fill("input[name=k]", "3")
    page.tab.click("button[type=submit]")
    page.tab.wait_for_selector("#hits")
    first = page.tab.locator("#hits tbody tr").first
    assert first.locator("a").get_attribute("href") == f"/memory/{store.ids['deploy']}"
    assert page.tab.locator("#hits tbody tr").count() == 3
    assert page.tab.locator("#near-misses tbody tr").count() >= 1
    chart = page.tab.evaluate(
        "() => { const c = Chart.getChart('scores'); return [c.data.labels.length, c.data.datasets.map(d => d.label)] }"
    )
    assert chart == [3, ["rel", "rec", "imp", "when", "entity", "ctx", "dated", "spread"]]
    assert page.errors == []


def test_without_the_token_the_browser_is_refused(browser: Any, server: Any, store: Store) -> None:
    context = browser.new_context()
    try:
        tab = Page(context.new_page())
        for path in ("/", f"/memory/{store.ids['deploy']}", "/api/stats", "/static/inspector.js"):
            response = tab.open(server.base + path)
            assert response.status == 403, path
            assert "refused" in tab.tab.content() and "deploy" not in tab.tab.content()
        assert tab.open(server.base + "/?token=wrong").status == 403
    finally:
        context.close()

"""Screenshots of the web inspector's main pages for the docs: ``docs/inspector/*.png``.

    .venv/bin/python scripts/inspector_screenshots.py [--out docs/inspector] [--chromium /usr/bin/chromium]

Builds a small team store — the tables and memories of ``python -m engramdb.demo``, plus a week
of work by the researcher and the writer (recalls, links, an update, a forgotten memory, a todo) —
starts the inspector as the researcher (cap ``internal``) and saves the memory list, a memory, its
graph, the recall playground, the stats and the tables with the system's headless Chromium
(Playwright's Python package; needs the ``test`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright

from engramdb import DynamicMemoryEngine
from engramdb.demo import run as run_demo
from engramdb.inspector import InspectorServer
from engramdb.memories.model import Confidentiality
from engramdb.testing import FixedClock

ROOT = Path(__file__).resolve().parents[1]
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
DAY = 86_400.0


def build(path: Path, clock: FixedClock) -> dict[str, str]:
    """The demo's store, and a week of the team's work on top of it; the ids worth a picture."""
    with contextlib.redirect_stdout(io.StringIO()):
        run_demo(path)
    with DynamicMemoryEngine(path, clock=clock) as engine:
        me, writer = engine.agent("researcher"), engine.agent("writer")
        fsync = next(m for m in me.memories() if m.content.startswith("fsync in the write-ahead log"))
        batching = next(m for m in me.memories() if m.content.startswith("Batching 64 writes"))
        nvme = me.remember("The NVMe box runs firmware 1.2; 1.4 fixes flush latency", tags=["hardware"], importance=6)
        bench = me.remember(
            "Benchmark run 14: p99 fell from 38 ms to 4 ms with group commit", type="episode", shared=True,
            tags=["latency", "benchmark"], entities=["run 14"],
        )  # fmt: skip
        me.link(bench.id, batching.id, "supports")
        me.link(nvme.id, fsync.id, "related")
        skill = me.remember(
            "To measure fsync cost: fio --fsync=1 --rw=write --bs=4k on the data disk", type="skill", shared=True
        )
        me.link(skill.id, fsync.id, "related")
        todo = me.remember("Re-run the fsync measurement on the NVMe box", type="todo", status="open")
        me.link(todo.id, nvme.id, "part_of")
        writer.remember("Draft section 3 says p99 is 38 ms; update it after run 14", shared=True, tags=["draft"])
        writer.remember("The editor wants the latency chart as SVG", shared=True, tags=["draft"])
        me.remember("Budget for new hardware is approved", shared=True, confidentiality=Confidentiality.CONFIDENTIAL)
        gone = me.remember("Vendor contact: jane@example.com", tags=["people"])
        me.forget(gone.id, reason="personal data, not needed")
        for day in range(6):
            clock.advance(DAY)
            me.recall("why is p99 latency high?", k=3)
            writer.recall("what did benchmark run 14 show?", k=2)
            if day % 2 == 0:
                me.recall("how do I measure fsync cost", k=2)
            if day == 3:
                me.update(nvme.id, content="The NVMe box runs firmware 1.2; 1.4 fixes flush latency (vendor note)")
            me.ride_along("latency", max_todos=2)
            if day == 4:
                me.get(todo.id)  # an injected todo, then read deliberately: "injected then used"
        return {"memory": fsync.id, "graph": fsync.id}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "inspector")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="engramdb-inspector-") as tmp:
        path = Path(tmp) / "team.db"
        clock = FixedClock(time.time())
        ids = build(path, clock)
        with DynamicMemoryEngine(path, clock=clock) as engine:
            server = InspectorServer(engine.agent("researcher", cap=Confidentiality.INTERNAL))
            server.start()
            try:
                shots = {
                    "list": "/",
                    "memory": f"/memory/{ids['memory']}",
                    "graph": f"/graph/{ids['graph']}?depth=2",
                    "playground": "/recall?q=why+is+p99+latency+high%3F&k=5",
                    "stats": "/stats",
                    "tables": "/tables?table=shared_notes&sql=SELECT+agent_id%2C+count(*)+FROM+shared_notes+GROUP+BY+agent_id",
                }
                with sync_playwright() as pw:
                    browser = pw.chromium.launch(executable_path=args.chromium, args=ARGS, headless=True)
                    page = browser.new_page(viewport={"width": 1280, "height": 860})
                    page.goto(server.url)
                    for name, route in shots.items():
                        page.goto(server.base + route, wait_until="load")
                        if name == "graph":
                            page.wait_for_selector("#graph[data-ready]")
                        page.wait_for_timeout(300)
                        target = args.out / f"{name}.png"
                        page.screenshot(path=str(target), full_page=True)
                        print(target.relative_to(ROOT) if target.is_relative_to(ROOT) else target)
                    browser.close()
            finally:
                server.stop()


if __name__ == "__main__":
    main()

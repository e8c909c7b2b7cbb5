"""A real headless Chromium for the inspector's pages (Debian's, driven by Playwright's Python
package; never ``playwright install``). One browser and one server per module.

Without a Chromium (or without Playwright) these tests skip and say why — except when the
environment variable ``CI`` is set: there a missing browser fails, so CI never skips them quietly
(``.ci/run`` installs Chromium first).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("ENGRAMDB_CHROMIUM", "/usr/bin/chromium")
#: without the background-networking flags Chromium keeps dialling out, and a closed network
#: refuses it loudly
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"browser tests cannot run under CI: {why}", pytrace=False)
    pytest.skip(why)


# Module scope, not session: Playwright's sync API keeps an asyncio loop marked running on this
# thread while it is open, which breaks every later test that calls asyncio.run (the async
# mirrors, MCP). Ended with the module, it leaves the thread as it found it.
@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable('Playwright is not installed (pip install -e ".[test]")')
    if not (Path(CHROMIUM).is_file() or shutil.which(CHROMIUM)):
        _unavailable(f"no Chromium at {CHROMIUM} (apt-get install -y chromium, or set ENGRAMDB_CHROMIUM)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()

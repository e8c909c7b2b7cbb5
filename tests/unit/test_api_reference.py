"""docs/api.md is rendered from the package's signatures and docstrings (scripts/api_reference.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "scripts" / "api_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_api_page_is_the_packages_own_signatures_and_docstrings() -> None:
    """Run ``python scripts/api_reference.py --write`` after changing a public signature or docstring."""
    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    assert page == _script().render(), "docs/api.md is stale: run python scripts/api_reference.py --write"


def test_every_export_is_on_the_page() -> None:
    import engramdb

    page = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    missing = [name for name in engramdb.__all__ if f"`{name}" not in page]
    assert not missing, missing

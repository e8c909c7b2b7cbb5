"""Bad input gets a clear, typed error that says what was wrong, and changes nothing (issue 14)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engramdb import ConfigError, DynamicMemoryEngine, ValidationError


@pytest.mark.sqlite_only
def test_a_folder_or_a_missing_tree_is_not_a_database_path(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="is a folder"):
        DynamicMemoryEngine(tmp_path)
    with pytest.raises(ConfigError, match="does not exist; create it first"):
        DynamicMemoryEngine(tmp_path / "no" / "such" / "memory.db")
    assert not (tmp_path / "no").exists()  # nothing was made
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        DynamicMemoryEngine(tmp_path / "file" / "memory.db")
    # the database's own folder alone is made (spec 000's ".naqsha/memory.db")
    with DynamicMemoryEngine(tmp_path / ".engramdb" / "memory.db") as e:
        assert e.path.is_file()


@pytest.mark.sqlite_only
@pytest.mark.parametrize("option", [{"synchronous": "SOMETIMES"}, {"synchronous": 3}, {"secure_delete": "OFF"}])
def test_bad_sqlite_settings_are_config_errors(tmp_path: Path, option: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DynamicMemoryEngine(tmp_path / "m.db", **option)  # type: ignore[arg-type]


@pytest.mark.parametrize("batch", [0, -3, 2.5, True, "10"])
def test_stream_needs_a_positive_batch(engine: DynamicMemoryEngine, batch: object) -> None:
    shared = engine.get_shared_scope()
    with pytest.raises(ValidationError, match="batch must be"):
        shared.stream("SELECT 1", batch=batch)  # type: ignore[arg-type]
    assert [rows for rows in shared.stream("SELECT 1 UNION ALL SELECT 2", batch=1)] == [[(1,)], [(2,)]]

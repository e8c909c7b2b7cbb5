"""Bad input gets a clear, typed error that says what was wrong, and changes nothing (issue 14)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engramdb import ConfigError, DynamicMemoryEngine, Limits, ValidationError


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


@pytest.mark.parametrize("interval", [-1, 61, float("nan"), True, "1"])
def test_a_bad_checkpoint_interval_is_a_config_error_and_makes_no_file(tmp_path: Path, interval: object) -> None:
    with pytest.raises(ConfigError, match="checkpoint_interval must be seconds from 0 to 60"):
        DynamicMemoryEngine(tmp_path / "m.db", checkpoint_interval=interval)  # type: ignore[arg-type]
    assert not (tmp_path / "m.db").exists()


@pytest.mark.sqlite_only
def test_checkpoint_interval_zero_runs_no_thread(tmp_path: Path) -> None:
    with DynamicMemoryEngine(tmp_path / "m.db", checkpoint_interval=0) as e:
        e.agent("a").remember("one memory, so a commit happens")
        assert e._backend._store.checkpointer is None  # type: ignore[attr-defined]
    with DynamicMemoryEngine(tmp_path / "n.db", checkpoint_interval=0.5) as e:
        e.agent("a").remember("one memory, so a commit happens")
        checkpointer = e._backend._store.checkpointer  # type: ignore[attr-defined]
        assert checkpointer is not None and checkpointer._thread is not None


@pytest.mark.parametrize("batch", [0, -3, 2.5, True, "10"])
def test_stream_needs_a_positive_batch(engine: DynamicMemoryEngine, batch: object) -> None:
    shared = engine.get_shared_scope()
    with pytest.raises(ValidationError, match="batch must be"):
        shared.stream("SELECT 1", batch=batch)  # type: ignore[arg-type]
    assert [rows for rows in shared.stream("SELECT 1 UNION ALL SELECT 2", batch=1)] == [[(1,)], [(2,)]]


# -- limits on every input ------------------------------------------------------------------------


def test_oversized_content_title_tags_and_queries_are_refused_and_change_nothing(engine: DynamicMemoryEngine) -> None:
    me = engine.agent("alice")
    me.remember("the one memory")
    before = me.stats()
    huge = "word " * 2_000_000  # 10 MB
    for call in (
        lambda: me.remember(huge),
        lambda: me.remember("ok", title="t" * 1_001),
        lambda: me.remember("ok", tags=["x" * 201]),
        lambda: me.remember("ok", tags=[f"t{i}" for i in range(65)]),
        lambda: me.remember_many([{"content": "fine"}, {"content": huge}]),
        lambda: me.recall("q" * 8_001),
        lambda: me.search("q" * 8_001),
        lambda: me.explain("q" * 8_001),
    ):
        with pytest.raises(ValidationError, match=r"limit|at most"):
            call()
    assert me.stats() == before and len(me.memories()) == 1


def test_limits_are_configurable(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    small = make_engine(limits=Limits(content_chars=10, query_chars=5)).agent("alice")
    with pytest.raises(ValidationError, match="more than the limit of 10"):
        small.remember("eleven char")
    small.remember("ten chars!")
    with pytest.raises(ValidationError, match="query is 6 characters"):
        small.recall("sixsix")
    with pytest.raises(ConfigError, match=r"Limits\.query_chars"):
        Limits(query_chars=0)


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_an_empty_query_is_an_error(engine: DynamicMemoryEngine, query: str) -> None:
    me = engine.agent("alice")
    me.remember("something")
    with pytest.raises(ValidationError, match="query is empty"):
        me.recall(query)


@pytest.mark.parametrize("bad", ["lone \ud800 surrogate", "tail \udfff", "\udc80"])
def test_lone_surrogates_are_validation_errors(engine: DynamicMemoryEngine, bad: str) -> None:
    me = engine.agent("alice")
    m = me.remember("a clean memory")
    for call in (
        lambda: me.remember(bad),
        lambda: me.remember("ok", title=bad),
        lambda: me.remember("ok", tags=[bad]),
        lambda: me.recall(bad),
        lambda: me.update(m.id, content=bad),
    ):
        with pytest.raises(ValidationError, match="not valid Unicode"):
            call()
    assert [x.content for x in me.memories()] == ["a clean memory"]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"created_at": float("inf")}, "created_at must be epoch seconds"),
        ({"created_at": float("nan")}, "created_at must be epoch seconds"),
        ({"created_at": True}, "created_at must be epoch seconds"),
        ({"shared": "no"}, "shared must be True or False"),
        ({"shared": 1}, "shared must be True or False"),
        ({"valid_from": float("-inf")}, "valid_from must be epoch seconds"),
        ({"created_at": 1e20}, "created_at must be epoch seconds from year 1 to 9999"),
        ({"valid_from": -1e20}, "valid_from must be epoch seconds from year 1 to 9999"),
        ({"valid_to": 253_402_300_800.0}, "valid_to must be epoch seconds from year 1 to 9999"),
    ],
)
def test_bad_times_and_flags_are_refused(engine: DynamicMemoryEngine, fields: dict[str, object], match: str) -> None:
    me = engine.agent("alice")
    with pytest.raises(ValidationError, match=match):
        me.remember("a memory", **fields)  # type: ignore[call-overload]
    assert me.memories() == []


@pytest.mark.parametrize("as_of", ["yesterday", float("nan"), float("inf"), True, [1.0], 1e20, -1e300])
def test_as_of_must_be_a_time(engine: DynamicMemoryEngine, as_of: object) -> None:
    me = engine.agent("alice")
    me.remember("a memory")
    with pytest.raises(ValidationError, match="as_of must be epoch seconds"):
        me.recall("memory", as_of=as_of)  # type: ignore[arg-type]


@pytest.mark.parametrize("tenant", [" acme", "acme ", "\tacme"])
def test_tenants_with_surrounding_spaces_are_refused(engine: DynamicMemoryEngine, tenant: str) -> None:
    with pytest.raises(ValidationError, match="tenant"):
        engine.agent("alice", tenant=tenant)


# -- scope results are bounded --------------------------------------------------------------------

COUNT = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT {n}) SELECT x FROM c"


@pytest.mark.sqlite_only  # PostgreSQL scopes cap results too: tests/integration/test_pg_scope_escapes.py
def test_a_runaway_select_stops_at_the_result_cap(make_engine: Callable[..., DynamicMemoryEngine]) -> None:
    from engramdb import ResourceLimitExceeded

    eng = make_engine(max_result_rows=1_000, max_result_bytes=100_000)
    shared = eng.get_shared_scope()
    assert len(shared.query(COUNT.format(n=1_000))) == 1_000
    for call in (shared.query, shared.execute):
        with pytest.raises(ResourceLimitExceeded, match="more than 1,000 rows"):
            call(COUNT.format(n=10_000_000))
    wide = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 900) SELECT printf('%.*c', 500, 'x') FROM c"
    with pytest.raises(ResourceLimitExceeded, match="more than 100,000 bytes"):
        shared.query(wide)
    # stream() reads any number of rows in batches, and the scope works on after a refusal
    assert sum(len(b) for b in shared.stream(COUNT.format(n=5_000), batch=500)) == 5_000
    shared.execute("CREATE TABLE shared_t (x INTEGER)")
    shared.execute("INSERT INTO shared_t VALUES (1)")
    assert shared.query("SELECT x FROM shared_t") == [(1,)]
    with pytest.raises(ConfigError, match="max_result_rows"):
        make_engine("other", max_result_rows=0)


def test_values_the_driver_cannot_bind_are_sql_errors_on_every_backend(engine: DynamicMemoryEngine) -> None:
    from engramdb import SqlError

    shared = engine.get_shared_scope()
    shared.execute("CREATE TABLE shared_t (id bigint PRIMARY KEY, v text)")
    for params in [(1 << 70, "x"), (1, "\udc80 lone surrogate")]:
        for call in (shared.execute, shared.query):
            with pytest.raises(SqlError):
                call("INSERT INTO shared_t (id, v) VALUES (?, ?)", params)
    for bad in (object(), 5):
        with pytest.raises(SqlError):
            shared.executemany("INSERT INTO shared_t (id, v) VALUES (?, ?)", bad)  # type: ignore[arg-type]
    assert shared.query("SELECT count(*) FROM shared_t") == [(0,)]
    me = engine.agent("alice")
    me.remember("a memory to recall")
    with pytest.raises(ValidationError):
        me.recall("memory", trace_ref="\udc80")

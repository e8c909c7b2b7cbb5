"""Config loading, agent tools, agent ids, migrations, and the public surface."""

from __future__ import annotations

import ast
import inspect
import sqlite3
from pathlib import Path

import pytest

import engramdb
from engramdb import (
    LIST_MEMORY_TABLES_TOOL,
    MEMORY_SCHEMA_TOOL,
    ConfigError,
    DynamicMemoryEngine,
    InvalidAgentId,
    SchemaVersionError,
    TeamMemoryConfig,
    list_memory_tables,
    load_config,
    memory_schema,
    tool_specs,
)
from engramdb import errors as errors_module

# -- config -----------------------------------------------------------------------------------


def test_precedence_defaults_toml_env_args(tmp_path: Path) -> None:
    toml = tmp_path / "team.toml"
    toml.write_text('[memory]\ndb_path = "data/m.db"\nenable_embeddings = true\nbusy_timeout = 3\n')
    assert load_config(env={}) == TeamMemoryConfig()
    cfg = load_config(toml, env={})
    assert cfg.db_path == tmp_path / "data/m.db" and cfg.enable_embeddings and cfg.busy_timeout == 3.0
    cfg = load_config(toml, env={"ENGRAMDB_ENABLE_EMBEDDINGS": "false", "ENGRAMDB_UNRELATED": "x"})
    assert cfg.enable_embeddings is False
    cfg = load_config(toml, env={"ENGRAMDB_ENABLE_EMBEDDINGS": "false"}, enable_embeddings=True)
    assert cfg.enable_embeddings is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[memory]\ndb_pth = "x.db"\n', "unknown key 'db_pth'"),
        ("[memory]\nenable_embeddings = 3\n", "enable_embeddings must be true or false"),
        ('[memory]\nbusy_timeout = "soon"\n', "busy_timeout must be a number"),
        ('[memory]\nsynchronous = "MAYBE"\n', "synchronous must be one of"),
        ("[memory\n", "not valid TOML"),
        ("memory = 3\n", "must be a table"),
    ],
)
def test_bad_config_names_the_problem(tmp_path: Path, text: str, message: str) -> None:
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(toml, env={})


def test_unknown_argument_key() -> None:
    with pytest.raises(ConfigError, match="unknown key 'dbpath'"):
        load_config(env={}, dbpath="x")


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.toml", env={})


# -- tools ------------------------------------------------------------------------------------


def test_tool_specs_are_valid_for_function_calling() -> None:
    assert [t.name for t in tool_specs()][:2] == ["memory_schema", "list_memory_tables"]
    openai = MEMORY_SCHEMA_TOOL.as_openai()
    assert openai["type"] == "function" and openai["function"]["parameters"]["required"] == ["sql"]
    assert LIST_MEMORY_TABLES_TOOL.as_anthropic()["input_schema"]["type"] == "object"


class _Deps:
    def __init__(self, engine: DynamicMemoryEngine) -> None:
        self.shared = engine.get_shared_scope()
        self.private = engine.get_private_scope("researcher")


class _RunContext:  # shaped like pydantic-ai's RunContext
    def __init__(self, deps: object) -> None:
        self.deps = deps


def test_memory_schema_routes_to_the_owning_scope_and_never_raises(engine: DynamicMemoryEngine) -> None:
    ctx = _RunContext(_Deps(engine))
    assert memory_schema("CREATE TABLE shared_facts (x)", ctx).startswith("OK: created shared_facts")
    assert memory_schema("CREATE TABLE private_researcher_scratch (x)", ctx).startswith(
        "OK: created private_researcher_scratch"
    )
    for sql, expected in [
        ("DROP TABLE shared_facts", "REFUSED (ForbiddenDDLError): DROP TABLE is not permitted by the DDL safelist"),
        ("CREATE TABLE private_other_x (a)", "REFUSED (ScopeViolation)"),
        ("SELECT * FROM shared_facts", "REFUSED: memory_schema only changes schema"),
        ("CREATE TABL shared_x (a)", "REFUSED (ForbiddenDDLError)"),
        ("CREATE TABLE shared_y (a", "REFUSED (SqlError)"),
        ("", "REFUSED (InvalidStatement)"),
    ]:
        assert memory_schema(sql, ctx).startswith(expected), sql
    assert memory_schema("CREATE TABLE shared_z (a)", object()).startswith("ERROR (TypeError)")
    listing = list_memory_tables(ctx)
    assert listing == "shared: shared_facts\nprivate:researcher: private_researcher_scratch"


# -- agent ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", "A", "a_b", "-a", "a" * 64, "ä", "a b", None, 3, "a\n"])
def test_bad_agent_ids_say_the_rule(engine: DynamicMemoryEngine, bad: object) -> None:
    with pytest.raises(InvalidAgentId, match=r"lower-case a–z, digits and '-'"):
        engine.get_private_scope(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("good", ["a", "a-b", "researcher", "0", "a" * 63])
def test_good_agent_ids(engine: DynamicMemoryEngine, good: str) -> None:
    assert engine.get_private_scope(good).prefix == f"private_{good}_"


# -- migrations -------------------------------------------------------------------------------


def test_migrations_are_recorded_and_newer_files_refuse_to_open(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    DynamicMemoryEngine(path).close()
    db = sqlite3.connect(path)
    versions = [r[0] for r in db.execute("SELECT version FROM engram_migrations ORDER BY version")]
    assert versions == list(range(1, len(versions) + 1))
    db.execute("INSERT INTO engram_migrations VALUES (999, 'from the future', 0)")
    db.commit()
    db.close()
    with pytest.raises(SchemaVersionError, match="newer than this engramdb knows"):
        DynamicMemoryEngine(path)


def test_reopening_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with DynamicMemoryEngine(path) as e:
        e.get_shared_scope().execute("CREATE TABLE shared_t (a)")
        e.get_shared_scope().execute("INSERT INTO shared_t VALUES (1)")
    with DynamicMemoryEngine(path) as e:
        assert e.get_shared_scope().query("SELECT a FROM shared_t") == [(1,)]


def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(engramdb.BackendError):
        DynamicMemoryEngine(path)


def test_closed_engine_is_a_clear_error(tmp_path: Path) -> None:
    e = DynamicMemoryEngine(tmp_path / "c.db")
    e.close()
    with pytest.raises(engramdb.BackendError, match="closed"):
        e.get_shared_scope().query("SELECT 1")


# -- public surface ---------------------------------------------------------------------------


def test_all_is_unique_and_importable() -> None:
    names = engramdb.__all__
    assert len(set(names)) == len(names)  # the order is ruff's (RUF022), checked by `make lint`
    for name in names:
        assert hasattr(engramdb, name), name


def test_init_imports_are_exactly_all() -> None:
    tree = ast.parse(inspect.getsource(engramdb))
    imported = {a.asname or a.name for node in tree.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert imported | {"__version__"} == set(engramdb.__all__)


def test_every_error_is_exported_and_documented() -> None:
    classes = [c for _, c in inspect.getmembers(errors_module, inspect.isclass) if issubclass(c, engramdb.EngramError)]
    doc = errors_module.__doc__ or ""
    for cls in classes:
        assert cls.__name__ in engramdb.__all__, cls
        assert cls.__name__ in doc, f"{cls.__name__} is missing from the error tree in errors.py"
        assert cls.__doc__
    assert issubclass(engramdb.ScopeViolation, ValueError)
    assert issubclass(engramdb.ForbiddenDDLError, engramdb.CallerError)


def test_every_public_name_has_a_docstring() -> None:
    for name in engramdb.__all__:
        obj = getattr(engramdb, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name


def test_memory_tools_never_raise(tmp_path: Path) -> None:
    from engramdb.testing import FixedClock, fake_embedder
    from engramdb.tools import recall, remember

    eng = DynamicMemoryEngine(tmp_path / "t.db", clock=FixedClock(), memory_embedder=fake_embedder())
    me = eng.agent("scribe")
    assert remember("The release train leaves on Thursdays", me, importance=6).startswith("OK: remembered as scribe:")
    assert remember("", me).startswith("REFUSED (ValidationError)")
    assert remember("x", object()).startswith("ERROR (TypeError)")
    text = recall("when does the release train leave", _RunContext(me))
    assert "UNTRUSTED EVIDENCE START" in text and "Thursdays" in text
    assert recall("x", me, k=0).startswith("REFUSED (ValidationError)")
    assert memory_schema("CREATE TABLE private_scribe_notes (a)", me).startswith("OK")
    assert [t.name for t in tool_specs()][-2:] == ["remember", "recall"]
    eng.close()


def test_every_config_key_is_documented() -> None:
    import dataclasses

    doc = TeamMemoryConfig.__doc__ or ""
    assert all(f"{f.name}:" in doc for f in dataclasses.fields(TeamMemoryConfig))


def test_url_wins_over_db_path(tmp_path: Path) -> None:
    toml = tmp_path / "team.toml"
    toml.write_text('[memory]\ndb_path = "m.db"\nurl = "postgresql://engram@db/team"\n')
    assert load_config(toml, env={}).url == "postgresql://engram@db/team"
    assert load_config(env={"ENGRAMDB_URL": "postgres://x@y/z"}).url == "postgres://x@y/z"
    with pytest.raises(ConfigError, match="url must be a postgresql:// URL"):
        load_config(env={"ENGRAMDB_URL": "mysql://x"})

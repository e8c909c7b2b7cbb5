"""Everything engramdb raises is an `EngramError`: a walk of the whole public API with wrong values.

For every callable in ``engramdb.__all__`` and every public method of `Agent`, `MemoryToolbox`,
`MemoryRetriever`, `NamespacedMemory` and `MemoryScope` (a scope's SQL methods), each parameter in turn gets each value of `WRONG` while
the others get a valid value; whatever the call raises, if anything, must be an `EngramError`.
A new public function or parameter is walked without being listed here; a required parameter whose
name the walk has no valid value for fails the test until `VALID` gets one.

Out of scope, as standard Python behaviour of their kind: enum classes called with a value that is
not a member (``MemoryType("x")`` raises ValueError like every `enum.Enum`), Protocols and abstract
classes (not instantiable), and the ``a``-prefixed async twins, which run the same sync method in a
worker thread (`engramdb.aio.in_thread`) and so raise what it raises.
"""

from __future__ import annotations

import enum
import inspect
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import engramdb
from engramdb import (
    Channel,
    Components,
    DynamicMemoryEngine,
    EngramError,
    ForgettingPolicy,
    MemoryEntry,
    MemoryQuery,
    MemoryRetriever,
    MemoryToolbox,
    NamespacedMemory,
    TenantScope,
)

WRONG: tuple[object, ...] = (
    object(),
    -1,
    1 << 70,  # past SQLite's 64-bit integers
    -0.5,
    1e308,
    float("inf"),
    "",
    "\x00",
    "\udc80",  # a lone surrogate: a str that is not valid text
    None,
    float("nan"),
    [1],
    {"a": 1},
    b"x",
    True,
)


class World:
    """What valid arguments are made of: one engine, an agent, its export, a SQL table."""

    def __init__(self, engine: DynamicMemoryEngine, tmp: Path) -> None:
        self.engine = engine
        self.tmp = tmp
        self.agent = engine.agent("alice")
        self.agent.shared.execute("CREATE TABLE IF NOT EXISTS shared_notes (id INTEGER PRIMARY KEY, content TEXT)")
        self.agent.shared.execute("INSERT INTO shared_notes (content) VALUES ('walk the api')")
        self.note = self.agent.remember("a note about the walk", shared=True)
        self.recall = self.agent.recall("note")
        self.export = tmp / "export.jsonl"
        self.agent.export_jsonl(self.export)
        self.ns = NamespacedMemory(engine, "assistant")
        self.scope = TenantScope("acme")
        self.ns_memory = self.ns.store(self.scope, MemoryEntry("a namespaced note"))
        self._n = itertools.count()

    def fresh_id(self) -> str:
        """A memory of its own for a call that may change or remove it."""
        return self.agent.remember(f"fresh memory number {next(self._n)}").id

    def fresh_ns_id(self) -> str:
        return self.ns.store(self.scope, MemoryEntry(f"fresh namespaced {next(self._n)}")).id


def _components() -> Components:
    return Components(rel=0.5, rec=0.5, imp=0.5)


#: a valid value per parameter name (a callable of the `World`); `OVERRIDES` for a name that means
#: different things in different callables
VALID: dict[str, Callable[[World], object]] = {
    "memory_id": lambda w: w.fresh_id(),
    "old_id": lambda w: w.fresh_id(),
    "new_id": lambda w: w.fresh_id(),
    "target": lambda w: w.note.id,
    "query": lambda w: "note",
    "recall_or_query": lambda w: "note",
    "recall": lambda w: w.recall,
    "content": lambda w: f"some content {next(w._n)}",
    "out": lambda w: w.tmp / "out.jsonl",
    "records": lambda w: [],
    "items": lambda w: [],
    "text": lambda w: "note",
    "name": lambda w: "recall",
    "sql": lambda w: "CREATE TABLE IF NOT EXISTS shared_walked (id INTEGER PRIMARY KEY)",
    "ctx": lambda w: w.agent,
    "scope": lambda w: w.scope,
    "id": lambda w: w.fresh_ns_id(),
    "related_id": lambda w: w.ns_memory.id,
    "what": lambda w: "note",
    "entry": lambda w: MemoryEntry(f"entry {next(w._n)}"),
    "min_strength": lambda w: 0.5,
    "min_age": lambda w: 3600.0,
    "level": lambda w: engramdb.Confidentiality.PUBLIC,
    "memory": lambda w: w.note,
    "policy": lambda w: ForgettingPolicy(),
    "now": lambda w: 1_700_000_000.0,
    "token_budget": lambda w: 100,
    "limit": lambda w: 10,
    "root": lambda w: w.tmp,
    "path": lambda w: w.tmp / "walked.db",
    "table": lambda w: "shared_notes",
    "agent": lambda w: w.agent,
    "inner": lambda w: w.engine,
    "agent_name": lambda w: "assistant",
    "runtime": lambda w: w.engine._runtime,
    "agent_id": lambda w: "bob",
    "shared": lambda w: w.agent.shared,
    "private": lambda w: lambda: w.agent.private,
    # plain value types: any well-typed value will do
    "ts": lambda w: 1.0,
    "channel": lambda w: Channel.RECALLED,
    "reader": lambda w: "alice",
    "rel": lambda w: 0.5,
    "rec": lambda w: 0.5,
    "imp": lambda w: 0.5,
    "source": lambda w: w.note.id,
    "type": lambda w: engramdb.EdgeType.RELATED,
    "label": lambda w: "label",
    "body": lambda w: "body",
    "rowcount": lambda w: 0,
    "lastrowid": lambda w: None,
    "rows": lambda w: [],
    "title": lambda w: "title",
    "rank": lambda w: 1,
    "score": lambda w: 0.5,
    "components": lambda w: _components(),
    "selected": lambda w: True,
    "recall_id": lambda w: None,
    "k": lambda w: 5,
    "hops": lambda w: 1,
    "hits": lambda w: (),
    "near_misses": lambda w: (),
    "tenant": lambda w: "default",
    "owner": lambda w: "alice",
    "author": lambda w: "alice",
    "kind": lambda w: "file",
    "key": lambda w: "a.txt",
    "run_id": lambda w: "run",
    "started_at": lambda w: 1.0,
    "steps": lambda w: (),
    "duration_s": lambda w: 0.0,
    "interrupted": lambda w: False,
    "stopped_in": lambda w: None,
    "rowid": lambda w: 1,
    "recency": lambda w: None,
    "memories": lambda w: 0,
    "total": lambda w: 0,
    "offset": lambda w: 0,
    "archived": lambda w: 0,
    "tenant_id": lambda w: "acme",
    "start": lambda w: 0.0,
    "end": lambda w: 1.0,
    "content_hash": lambda w: "0" * 16,
    "forgotten_by": lambda w: "alice",
    "forgotten_at": lambda w: 1.0,
    "reason": lambda w: "",
    "description": lambda w: "a tool",
    "value": lambda w: "x",
    "version": lambda w: 1,
    "changed_at": lambda w: 1.0,
    "changed_by": lambda w: "alice",
    "weights": lambda w: {},
}

OVERRIDES: dict[tuple[str, str], Callable[[World], object]] = {
    ("Agent.import_jsonl", "source"): lambda w: w.export,
    ("NamespacedMemory.recall", "query"): lambda w: MemoryQuery("note"),
    ("MemoryScope.executemany", "sql"): lambda w: "INSERT INTO shared_notes (content) VALUES (?)",
    ("MemoryScope.executemany", "seq_of_params"): lambda w: [("walked",)],
    ("Recall", "hits"): lambda w: (),
    ("Trigger", "kind"): lambda w: "event",
    ("Hit", "memory"): lambda w: w.note,
}


def _skipped(obj: object) -> bool:
    """Not walked: exceptions, enums, Protocols and abstract classes (see the module docstring)."""
    if not callable(obj):
        return True
    if inspect.isclass(obj):
        return (
            issubclass(obj, (BaseException, enum.Enum))
            or bool(getattr(obj, "_is_protocol", False))
            or inspect.isabstract(obj)
        )
    return False


def _targets(w: World) -> Iterator[tuple[str, Callable[..., Any]]]:
    for name in engramdb.__all__:
        obj = getattr(engramdb, name)
        if not _skipped(obj):
            yield name, obj
    retriever = MemoryRetriever(scope=w.agent.shared, table="shared_notes")
    instances: list[tuple[str, object]] = [
        ("Agent", w.agent),
        ("MemoryToolbox", MemoryToolbox(w.agent)),
        ("MemoryRetriever", retriever),
        ("NamespacedMemory", w.ns),
        ("MemoryScope", w.agent.shared),
    ]
    for label, instance in instances:
        for attr in sorted(dir(instance)):
            if attr.startswith("_"):
                continue
            if attr.startswith("a") and attr[1:] in dir(instance):  # async twin: same checks, in a thread
                continue
            fn = getattr(instance, attr)
            if callable(fn) and not inspect.isclass(fn):
                yield f"{label}.{attr}", fn


_WALKED = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.KEYWORD_ONLY,
)


def _call(label: str, fn: Callable[..., Any], params: list[inspect.Parameter], bad: inspect.Parameter,
          value: object, w: World) -> None:  # fmt: skip
    args: list[object] = []
    kwargs: dict[str, object] = {}
    for p in params:
        if p is bad:
            given = value
        elif p.default is not inspect.Parameter.empty:
            continue
        else:
            given = (OVERRIDES.get((label, p.name)) or VALID[p.name])(w)
        if p.kind is inspect.Parameter.KEYWORD_ONLY or (p.default is not inspect.Parameter.empty):
            kwargs[p.name] = given
        else:
            args.append(given)
    result = fn(*args, **kwargs)
    if inspect.isgenerator(result):
        list(result)
    if isinstance(result, DynamicMemoryEngine):
        result.close()


@pytest.fixture
def world(make_engine: Callable[..., DynamicMemoryEngine], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    # Relative paths among the wrong values ("x" files, folders) land in the test's own folder.
    monkeypatch.chdir(tmp_path)
    # load_config() and open_team_memory_engine() read ENGRAMDB_* from the environment.
    for key in [k for k in os.environ if k.startswith("ENGRAMDB_")]:
        monkeypatch.delenv(key)
    return World(make_engine(memory_embedder=None), tmp_path)


def _walk(targets: Iterator[tuple[str, Callable[..., Any]]], world: World) -> tuple[set[str], list[str], int]:
    """(required parameters with no valid value, calls that let a builtin escape, calls made)."""
    escaped: list[str] = []
    unknown: set[str] = set()
    walked = 0
    for label, fn in targets:
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # a typing alias such as TokenCounter: nothing to call
            continue
        params = [p for p in sig.parameters.values() if p.kind in _WALKED and p.name != "self"]
        missing = {
            p.name
            for p in params
            if p.default is inspect.Parameter.empty and (label, p.name) not in OVERRIDES and p.name not in VALID
        }
        if missing:
            unknown |= {f"{label}({name})" for name in missing}
            continue
        for bad in params:
            for value in WRONG:
                walked += 1
                try:
                    _call(label, fn, params, bad, value, world)
                except EngramError:
                    pass
                except Exception as exc:  # the contract under test: nothing else may escape
                    escaped.append(f"{label}({bad.name}={value!r}): {type(exc).__name__}: {exc}"[:200])
    return unknown, escaped, walked


def test_every_public_callable_raises_only_engram_errors(world: World) -> None:
    """Each wrong value of each parameter of each public callable: an `EngramError` or nothing."""
    unknown, escaped, walked = _walk(_targets(world), world)
    assert not unknown, f"give these required parameters a valid value in VALID: {sorted(unknown)}"
    assert not escaped, "builtin errors escaped the public API:\n" + "\n".join(escaped)
    assert walked > 2000  # the walk reached the API, not an empty list


def test_the_walk_catches_an_escaping_builtin(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """A new public function that lets a TypeError out is walked and reported (the walk is not vacuous)."""

    def leaky(text: str) -> int:
        return len(text)  # TypeError for an int

    monkeypatch.setattr(engramdb, "leaky", leaky, raising=False)
    monkeypatch.setattr(engramdb, "__all__", [*engramdb.__all__, "leaky"])
    targets = [t for t in _targets(world) if t[0] == "leaky"]
    assert targets == [("leaky", leaky)]
    _, escaped, _ = _walk(iter(targets), world)
    assert any(line.startswith("leaky(text=-1): TypeError") for line in escaped)


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda w: w.agent.recall("note", types=1), engramdb.ValidationError),
        (lambda w: w.agent.remember("x", entities=True), engramdb.ValidationError),
        (lambda w: w.agent.reflect(progress="x"), engramdb.ValidationError),
        (lambda w: w.agent.export_jsonl(1), engramdb.ValidationError),
        (lambda w: DynamicMemoryEngine(w.tmp / "b.db", busy_timeout="x"), engramdb.ConfigError),  # type: ignore[arg-type]
        (lambda w: engramdb.ScoringConfig(candidates="x"), engramdb.ConfigError),  # type: ignore[arg-type]
        (lambda w: engramdb.load_config(""), engramdb.ConfigError),
        (lambda w: engramdb.approx_tokens(1), engramdb.ValidationError),  # type: ignore[arg-type]
    ],
)
def test_wrong_arguments_are_caller_errors_and_value_errors(
    world: World, call: Callable[[World], object], error: type[Exception]
) -> None:
    """The classes the README promises: a `CallerError`, so also a `ValueError`."""
    with pytest.raises(error) as info:
        call(world)
    assert isinstance(info.value, engramdb.CallerError)
    assert isinstance(info.value, ValueError)


def test_a_wrong_engine_option_creates_no_file(tmp_path: Path) -> None:
    with pytest.raises(engramdb.ConfigError, match="busy_timeout"):
        DynamicMemoryEngine(tmp_path / "never.db", busy_timeout=float("nan"))
    assert not (tmp_path / "never.db").exists()

"""The package's layers: imports only point down, and nothing imports in a cycle.

``base → ports → adapters → services → facade`` (docs/architecture.md, "Layers"). Every import is
read from the source — module level, ``TYPE_CHECKING`` blocks and imports inside functions alike —
so a cycle cannot hide behind a late import. Every module must be placed in the table below: a new
module fails this test until its author says which layer it belongs to.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import engramdb

ROOT = Path(engramdb.__file__).resolve().parent

BASE, PORTS, ADAPTERS, SERVICES, FACADE = range(5)
NAMES = ("base", "ports", "adapters", "services", "facade")

#: module → layer (package ``__init__`` modules by their package's name)
LAYERS: dict[str, int] = {
    # base: records, rules and pure functions; no I/O
    "engramdb.errors": BASE,
    "engramdb.config": BASE,
    "engramdb.memories": BASE,  # the package itself (empty)
    "engramdb.memories.model": BASE,
    "engramdb.memories.filters": BASE,
    "engramdb.memories.scoring": BASE,
    "engramdb.memories.forgetting": BASE,
    "engramdb.memories.text": BASE,
    "engramdb.memories.triggers": BASE,
    "engramdb.memories.reflection_support": BASE,
    "engramdb.llm.protocol": BASE,  # the Extractor protocol, decisions and their check
    "engramdb.retrieval": BASE,  # the package itself (empty)
    "engramdb.retrieval.when": BASE,
    "engramdb.retrieval.keywords": BASE,
    "engramdb.retrieval.budget": BASE,
    "engramdb.retrieval.evidence": BASE,
    "engramdb.retrieval.results": BASE,
    "engramdb.scopes": BASE,  # the package itself (empty)
    "engramdb.scopes.classify": BASE,  # the statement classifier: pure
    "engramdb.scopes.namespace": BASE,  # table namespaces and their names
    "engramdb.tenancy": BASE,
    "engramdb.tenancy.ids": BASE,
    "engramdb.tenancy.contract": BASE,  # MemoryEntry, MemoryQuery, the MemoryStore Protocol
    "engramdb.observability": BASE,  # the package itself (empty)
    "engramdb.aio": BASE,  # the one sync-to-async mechanism
    "engramdb.progress": BASE,  # progress callback types
    # ports: what services need, as Protocols
    "engramdb.storage": PORTS,
    "engramdb.storage.ports": PORTS,
    "engramdb.embeddings": PORTS,
    "engramdb.embeddings.base": PORTS,
    "engramdb.vectors": PORTS,
    "engramdb.vectors.base": PORTS,
    # adapters: storage backends, embedders, vector indexes
    "engramdb.storage.memory_rows": ADAPTERS,  # the row format both SQL adapters share
    "engramdb.embeddings.hashing": ADAPTERS,
    "engramdb.embeddings.openai_compat": ADAPTERS,
    "engramdb.embeddings.http": ADAPTERS,
    "engramdb.llm.client": ADAPTERS,  # the OpenAI-compatible chat client
    "engramdb.llm.shipped": ADAPTERS,  # the shipped extractor, reconciler and reasoner
    "engramdb.llm.scripted": ADAPTERS,  # a scripted local chat server for tests and benchmarks
    "engramdb.storage.sqlite.jobs": ADAPTERS,
    "engramdb.storage.postgres.jobs": ADAPTERS,
    "engramdb.embeddings.rerank": ADAPTERS,
    "engramdb.embeddings.fastembed": ADAPTERS,
    "engramdb.embeddings.sentence_transformers": ADAPTERS,
    "engramdb.embeddings.static": ADAPTERS,
    "engramdb.embeddings.wordpiece": ADAPTERS,
    "engramdb.vectors.exact": ADAPTERS,
    "engramdb.vectors.ann": ADAPTERS,
    "engramdb.vectors.npz": ADAPTERS,
    # services: written against the ports
    "engramdb.memories.access": SERVICES,
    "engramdb.memories.reading": SERVICES,
    "engramdb.memories.writing": SERVICES,
    "engramdb.memories.conversation": SERVICES,
    "engramdb.llm.worker": SERVICES,  # the extraction worker
    "engramdb.memories.prospective": SERVICES,
    "engramdb.memories.references": SERVICES,
    "engramdb.memories.resolvers": SERVICES,
    "engramdb.memories.reflection": SERVICES,
    "engramdb.memories.similarity": SERVICES,
    "engramdb.memories.runtime": SERVICES,
    "engramdb.memories.transfer": SERVICES,
    "engramdb.memories.reembed": SERVICES,
    "engramdb.retrieval.recall": SERVICES,
    "engramdb.retrieval.sequence": SERVICES,  # implicit episodes: reads the lexical channel
    "engramdb.retrieval.columns": SERVICES,
    "engramdb.retrieval.lexical_channel": SERVICES,
    "engramdb.retrieval.slots": SERVICES,
    "engramdb.retrieval.tenant_caches": SERVICES,
    "engramdb.retrieval.server_channels": SERVICES,
    "engramdb.retrieval.vector_channel": SERVICES,
    "engramdb.retrieval.side_files": SERVICES,
    "engramdb.retrieval.retriever": SERVICES,
    "engramdb.retrieval.row_vectors": SERVICES,
    "engramdb.observability.stats": SERVICES,
    "engramdb.observability.otel": SERVICES,
    # facade: what users and frameworks hold
    "engramdb": FACADE,
    "engramdb.__main__": FACADE,
    "engramdb.engine": FACADE,
    "engramdb.llm": FACADE,  # the package: re-exports the LLM layer
    "engramdb.engine_options": FACADE,
    "engramdb.agent": FACADE,
    "engramdb.tenancy.namespaced": FACADE,
    "engramdb.demo": FACADE,
    "engramdb.testing": FACADE,
}

#: whole packages in one layer: every module under them
PACKAGES: dict[str, int] = {
    "engramdb.storage.sqlite": ADAPTERS,
    "engramdb.storage.postgres": ADAPTERS,
    "engramdb.cli": FACADE,
    "engramdb.tools": FACADE,
    "engramdb.mcp": FACADE,
    "engramdb.adapters": FACADE,
    "engramdb.inspector": FACADE,
}

#: the storage adapters: only the facade that opens a store, and storage itself, may name them
BACKENDS = ("engramdb.storage.sqlite", "engramdb.storage.postgres")
#: driver modules only an adapter may import
DRIVERS = ("sqlite3", "psycopg", "psycopg_pool", "pgvector")


def modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = modules()


def imports(name: str, path: Path) -> list[tuple[str, int]]:
    """Every module `name` imports, with its line: absolute and relative, at any depth of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            out.append((target, node.lineno))
            # `from pkg import sub` imports the submodule pkg.sub
            out += [(f"{target}.{a.name}", node.lineno) for a in node.names if f"{target}.{a.name}" in MODULES]
    return out


def layer(name: str) -> int:
    if name in LAYERS:
        return LAYERS[name]
    for package, where in PACKAGES.items():
        if name == package or name.startswith(package + "."):
            return where
    raise KeyError(name)


def internal_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        edges[name] = {t for t, _ in imports(name, path) if t in MODULES and t != name}
    return edges


def test_every_module_has_a_layer() -> None:
    missing = []
    for name in MODULES:
        try:
            layer(name)
        except KeyError:
            missing.append(name)
    assert not missing, f"place these modules in a layer in {__file__}: {missing}"


def test_imports_only_point_down() -> None:
    upward = []
    for name, path in MODULES.items():
        for target, line in imports(name, path):
            if target in MODULES and target != name and layer(target) > layer(name):
                upward.append(f"{name}:{line} ({NAMES[layer(name)]}) imports {target} ({NAMES[layer(target)]})")
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    edges = internal_edges()
    # Tarjan's strongly connected components; any component of two or more modules is a cycle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, f"import cycles: {cycles}"


def test_services_never_name_a_backend() -> None:
    """Services reach storage through the ports; only storage and the engine pick a backend."""
    allowed = ("engramdb.storage", "engramdb.engine")
    bad = []
    for name, path in MODULES.items():
        if name.startswith(allowed):
            continue
        bad += [f"{name}:{line} imports {t}" for t, line in imports(name, path) if t.startswith(BACKENDS)]
    assert not bad, bad


def test_drivers_only_in_adapters() -> None:
    bad = []
    for name, path in MODULES.items():
        if name.startswith(BACKENDS):
            continue
        for target, line in imports(name, path):
            if target.split(".")[0] in DRIVERS:
                bad.append(f"{name}:{line} imports {target}")
    assert not bad, bad


def test_engine_tables_are_named_only_in_adapters() -> None:
    """No SQL against engine tables outside the storage adapters: no string in any other module
    names an ``engram_*`` table (docstrings may mention one)."""
    bad = []
    for name, path in MODULES.items():
        if name.startswith(BACKENDS):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and "engram_" in node.value
                and node.value != "engram_"  # the reserved prefix itself (scopes refuse it by name)
            ):
                bad.append(f"{name}:{node.lineno}: {node.value[:60]!r}")
    assert not bad, bad


def test_the_reader_sees_late_and_type_checking_imports(tmp_path: Path) -> None:
    # A cycle hidden behind TYPE_CHECKING or a function-level import must still be an edge.
    src = tmp_path / "mod.py"
    src.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from engramdb.agent import Agent\n"
        "def f():\n"
        "    from ..engine import DynamicMemoryEngine\n"
        "    import engramdb.tools\n",
        encoding="utf-8",
    )
    found = {t for t, _ in imports("engramdb.memories.model", src)}
    assert {"engramdb.agent", "engramdb.engine", "engramdb.tools"} <= found
    assert layer("engramdb.agent") > layer("engramdb.memories.model")
    assert layer("engramdb.storage.sqlite.rows") == ADAPTERS
    with pytest.raises(KeyError):
        layer("engramdb.memories.not_placed_yet")


def test_the_agent_facade_is_typed_without_any() -> None:
    """`Agent` is the handle given to LLM tools and frameworks: every public method is annotated,
    and no parameter or return type is `Any`."""
    import inspect

    from engramdb.agent import Agent

    loose = []
    for name, fn in inspect.getmembers(Agent, inspect.isfunction):
        if name.startswith("_"):
            continue
        for param, note in fn.__annotations__.items():
            if "Any" in str(note).replace("Anything", ""):
                loose.append(f"{name}({param}: {note})")
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        missing = [p.name for p in params if p.name not in fn.__annotations__]
        if missing or "return" not in fn.__annotations__:
            loose.append(f"{name}: unannotated {missing or 'return'}")
    assert not loose, loose

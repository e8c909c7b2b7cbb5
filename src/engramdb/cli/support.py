"""What every CLI command shares: opening the store, printing text or JSON, exit codes, progress bars."""

from __future__ import annotations

import dataclasses
import enum
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from engramdb.errors import CallerError, EngineFailure, EngramError, NotFound, ValidationError
from engramdb.memories.model import Confidentiality

if TYPE_CHECKING:
    from tqdm import tqdm

    from engramdb.agent import Agent
    from engramdb.embeddings.base import Embedder, Reranker
    from engramdb.engine import DynamicMemoryEngine


class Exit(enum.IntEnum):
    """The exit codes of ``engramdb``: scripts can test them."""

    OK = 0
    FAILED = 1  # something unexpected went wrong
    USAGE = 2  # bad command line (click's own code)
    REFUSED = 3  # the engine refused the request (a CallerError: validation, scope, limits)
    NOT_FOUND = 4  # no such memory, recall or file
    BACKEND = 5  # the store or an optional package failed (EngineFailure)


#: the forms of ``--embedder``
EMBEDDER_FORMS = "default, hashing, none, fake (tests), fastembed:MODEL or openai-compat:MODEL@BASE_URL"
#: the forms of ``--reranker``
RERANKER_FORMS = "none, fastembed:MODEL, http:MODEL@BASE_URL, llamacpp:MODEL@BASE_URL or tei@URL"
#: where the CLI reads the key of an embedding or rerank server, when it is set
EMBEDDER_KEY_ENV, RERANKER_KEY_ENV = "ENGRAMDB_EMBEDDER_API_KEY", "ENGRAMDB_RERANKER_API_KEY"


def _model_at(spec: str, kind: str, forms: str) -> tuple[str, str]:
    """``MODEL@URL`` (the model may hold ``/`` and ``:``; the URL starts at the last ``@http``)."""
    body = spec.split(":", 1)[1]
    model, at, url = body.rpartition("@")
    if not at or not model or not url.startswith(("http://", "https://")):
        raise ValidationError(
            f"{kind} {spec!r}: write MODEL@BASE_URL, e.g. nomic-embed-text@http://localhost:11434/v1 ({forms})"
        )
    return model, url


def _key(env: str) -> str | None:
    """`env` when it holds a key (the client reads it there), else None: a local server needs none."""
    import os

    return env if os.environ.get(env) else None


def make_embedder(spec: str) -> Embedder | str | None:
    """The memory embedder a ``--embedder`` value stands for (see `EMBEDDER_FORMS`)."""
    if spec == "default":
        return "default"
    if spec == "none":
        return None
    if spec == "hashing":
        from engramdb.embeddings.hashing import HashingEmbedder

        return HashingEmbedder()
    if spec == "fake":
        from engramdb.testing import fake_embedder

        return fake_embedder()
    if spec.startswith("fastembed:") and spec.removeprefix("fastembed:"):
        from engramdb.embeddings.fastembed import FastEmbedEmbedder

        return FastEmbedEmbedder(spec.removeprefix("fastembed:"))
    if spec.startswith("openai-compat:"):
        from engramdb.embeddings.openai_compat import OpenAICompatibleEmbedder

        model, url = _model_at(spec, "--embedder", EMBEDDER_FORMS)
        return OpenAICompatibleEmbedder(url, model, api_key_env=_key(EMBEDDER_KEY_ENV))
    raise ValidationError(f"--embedder {spec!r} is none of: {EMBEDDER_FORMS}")


def make_reranker(spec: str) -> Reranker | None:
    """The reranker a ``--reranker`` value stands for (see `RERANKER_FORMS`)."""
    if spec == "none":
        return None
    if spec.startswith("fastembed:") and spec.removeprefix("fastembed:"):
        from engramdb.embeddings.fastembed import FastEmbedReranker

        return FastEmbedReranker(spec.removeprefix("fastembed:"))
    from engramdb.embeddings.rerank import HttpReranker

    if spec.startswith("tei@"):
        return HttpReranker(spec.removeprefix("tei@"), api="tei", api_key_env=_key(RERANKER_KEY_ENV))
    if spec.startswith(("http:", "llamacpp:")):
        model, url = _model_at(spec, "--reranker", RERANKER_FORMS)
        if spec.startswith("llamacpp:"):  # the llama.cpp server answers a cross-encoder's raw logits
            return HttpReranker(url, model, scores="logit", api_key_env=_key(RERANKER_KEY_ENV))
        return HttpReranker(url, model, api_key_env=_key(RERANKER_KEY_ENV))
    raise ValidationError(f"--reranker {spec!r} is none of: {RERANKER_FORMS}")


def parse_location(db: str) -> Path | str:
    """The store a ``--db`` / ``ENGRAMDB_URL`` value names: a SQLite path or ``sqlite:///path``, or a
    ``postgresql://`` URL (passed to the engine as it is)."""
    if db.startswith("sqlite:///"):
        return Path(db.removeprefix("sqlite:///"))
    if db.startswith("sqlite://"):
        raise ValidationError("write SQLite URLs as sqlite:///relative/path or sqlite:////absolute/path")
    if "://" in db:
        scheme = db.split("://", 1)[0]
        if scheme.lower() in ("postgresql", "postgres"):
            return db
        raise ValidationError(
            f"engramdb opens SQLite files (a path or sqlite:///path) and postgresql:// URLs, not {scheme}:// URLs"
        )
    return Path(db).expanduser()


@dataclass
class Settings:
    """The global options, and the engine opened from them on first use."""

    db: str | None
    agent_id: str
    tenant: str
    cap: Confidentiality
    embedder: str
    as_json: bool
    progress: bool
    reranker: str = "none"
    _engine: DynamicMemoryEngine | None = field(default=None, repr=False)

    def engine(self) -> DynamicMemoryEngine:
        if self._engine is None:
            if not self.db:
                raise click.UsageError("no store given: pass --db PATH or set ENGRAMDB_URL")
            from engramdb.engine import DynamicMemoryEngine

            self._engine = DynamicMemoryEngine(
                parse_location(self.db),
                memory_embedder=make_embedder(self.embedder),
                reranker=make_reranker(self.reranker),
            )
        return self._engine

    def agent(self) -> Agent:
        return self.engine().agent(self.agent_id, tenant=self.tenant, cap=self.cap)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None


def settings() -> Settings:
    """The settings of the running command."""
    return click.get_current_context().find_object(Settings)  # type: ignore[return-value]


def jsonable(value: Any) -> Any:
    """`value` as plain JSON data (dataclasses, enums, tuples, paths)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: jsonable(v) for k, v in dataclasses.asdict(value).items()}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def emit(data: Any, text: str | Callable[[], str]) -> None:
    """Print `data` as JSON with ``--json``, else `text`."""
    if settings().as_json:
        click.echo(json.dumps(jsonable(data), ensure_ascii=False, indent=None))
    else:
        click.echo(text() if callable(text) else text)


def fail(exc: BaseException) -> NoReturn:
    """Report `exc` (as JSON with ``--json``) on stderr and exit with its code."""
    if isinstance(exc, NotFound):
        code = Exit.NOT_FOUND
    elif isinstance(exc, CallerError):
        code = Exit.REFUSED
    elif isinstance(exc, (EngineFailure, EngramError)):
        code = Exit.BACKEND
    elif isinstance(exc, FileNotFoundError):
        code = Exit.NOT_FOUND
    else:
        code = Exit.FAILED
    ctx = click.get_current_context(silent=True)
    as_json = ctx is not None and ctx.find_object(Settings) is not None and settings().as_json
    kind = type(exc).__name__
    if as_json:
        click.echo(json.dumps({"error": kind, "message": str(exc), "exit_code": int(code)}), err=True)
    else:
        click.echo(f"engramdb: {kind}: {exc}", err=True)
    sys.exit(int(code))


@contextmanager
def progress_bars() -> Iterator[Callable[[str, int, int | None], None]]:
    """A progress callback (`engramdb.progress.Progress`) drawing one tqdm bar per stage on
    stderr; silent with ``--no-progress``, with ``--json`` and when stderr is not a terminal."""
    from tqdm import tqdm

    s = settings()
    quiet = not s.progress or s.as_json or not sys.stderr.isatty()
    bars: dict[str, tqdm[Any]] = {}

    def show(stage: str, done: int, total: int | None) -> None:
        if quiet:
            return
        base = stage.split(":", 1)[0]
        bar = bars.get(base)
        if bar is None:
            bar = bars[base] = tqdm(total=total, desc=base, unit="", file=sys.stderr, leave=False, dynamic_ncols=True)
        if total is not None and bar.total != total:
            bar.total = total
        if ":" in stage:
            bar.set_postfix_str(stage.split(":", 1)[1], refresh=False)
        bar.update(done - bar.n)

    try:
        yield show
    finally:
        for bar in bars.values():
            bar.close()

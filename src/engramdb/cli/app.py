"""The ``engramdb`` command line: the commands, for people and for agents.

Every command takes the global options (``--db`` or ``ENGRAMDB_URL``, ``--agent``, ``--tenant``,
``--cap``, ``--embedder``, ``--json``), prints text or, with ``--json``, one JSON document, and
exits with a code from `engramdb.cli.support.Exit`. See ``docs/cli.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click

from engramdb.cli.support import (
    EMBEDDER_FORMS,
    EMBEDDER_KEY_ENV,
    RERANKER_FORMS,
    RERANKER_KEY_ENV,
    Settings,
    emit,
    fail,
    jsonable,
    parse_location,
    progress_bars,
    settings,
)
from engramdb.errors import ConfigError, MissingExtra, NotFound, ValidationError
from engramdb.memories.model import Confidentiality, EdgeType, Memory, MemoryType, TodoStatus
from engramdb.observability import otel
from engramdb.scopes.classify import Kind, Statement, classify
from engramdb.storage.ports import MemoryScope
from engramdb.tools.sql import pick_scope

_LEVELS = [c.name.lower() for c in Confidentiality]


def _memory_line(m: Memory) -> str:
    owner = "shared" if m.shared else m.owner
    status = f" [{m.status.value}]" if m.status else ""
    return f"{m.id}  {m.type.value}{status}  {owner}  {m.content}"


def _json_here(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.ensure_object(Settings).as_json = True


#: ``--json`` is accepted after the command too (``engramdb recall "x" --json``).
json_option = click.option(
    "--json", "json_here", is_flag=True, expose_value=False, callback=_json_here, help="Print one JSON document."
)


def _wants_json(argv: list[str]) -> bool:
    """Whether a command line asks for ``--json`` (before a ``--``), read before click parses it:
    a usage error is found while parsing, so the parsed option is not there yet."""
    return "--json" in (argv[: argv.index("--")] if "--" in argv else argv)


class _Group(click.Group):
    """Runs every command with engramdb's errors turned into messages and exit codes; with
    ``--json``, click's own usage errors (unknown option, bad value) are JSON on stderr too."""

    def main(  # type: ignore[override]
        self,
        args: list[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:  # a caller that handles click's exceptions itself
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            if not _wants_json(argv):
                exc.show()
            else:
                kind = "UsageError" if isinstance(exc, click.UsageError) else type(exc).__name__
                message = {"error": kind, "message": exc.format_message(), "exit_code": exc.exit_code}
                click.echo(json.dumps(message), err=True)
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort, SystemExit):
            raise
        except Exception as exc:
            fail(exc)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option(
    "--db",
    envvar="ENGRAMDB_URL",
    help="The store: a SQLite file path, sqlite:///path, or a postgresql:// URL [env ENGRAMDB_URL].",
)
@click.option(
    "--agent",
    "agent_id",
    envvar="ENGRAMDB_AGENT",
    default="cli",
    show_default=True,
    help="Act as this agent [env ENGRAMDB_AGENT].",
)
@click.option(
    "--tenant",
    envvar="ENGRAMDB_TENANT",
    default="default",
    show_default=True,
    help="The agent's tenant [env ENGRAMDB_TENANT].",
)
@click.option(
    "--cap",
    type=click.Choice(_LEVELS),
    default="restricted",
    show_default=True,
    help="The most confidential level this agent may read.",
)
@click.option(
    "--embedder",
    envvar="ENGRAMDB_EMBEDDER",
    default="default",
    show_default=True,
    help=f"Memory embedder: {EMBEDDER_FORMS} (a server's key from {EMBEDDER_KEY_ENV}) [env ENGRAMDB_EMBEDDER].",
)
@click.option(
    "--reranker",
    envvar="ENGRAMDB_RERANKER",
    default="none",
    show_default=True,
    help=f"Recall's second stage: {RERANKER_FORMS} (a server's key from {RERANKER_KEY_ENV}) [env ENGRAMDB_RERANKER].",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of text.")
@click.option(
    "--progress/--no-progress", default=True, help="Progress bars on stderr for long work (only on a terminal)."
)
@click.version_option(package_name="engramdb")
@click.pass_context
def cli(
    ctx: click.Context,
    db: str | None,
    agent_id: str,
    tenant: str,
    cap: str,
    embedder: str,
    reranker: str,
    as_json: bool,
    progress: bool,
) -> None:
    """engramdb: memory for LLM agents, from the shell.

    Exit codes: 0 ok, 1 unexpected failure, 2 bad command line, 3 refused (invalid request,
    scope or limit), 4 not found, 5 store or missing optional package.
    """
    s = Settings(db, agent_id, tenant, Confidentiality[cap.upper()], embedder, as_json, progress, reranker)
    ctx.obj = s
    ctx.call_on_close(s.close)


@cli.command()
@json_option
def init() -> None:
    """Create the store (or bring an existing one up to date) and print where it is."""
    engine = settings().engine()
    emit({"db": engine.location, "tables": engine.list_all_tables()}, f"ready: {engine.location}")


def _json_arg(option: str, text: str | None, kind: type = dict) -> Any:
    """The JSON `text` of `option` (None when not given); a `ValidationError` unless it is a `kind`."""
    if text is None:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValidationError(f"{option} is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(value, kind):
        what = "a JSON object" if kind is dict else "a JSON array"
        raise ValidationError(f"{option} must be {what}, got {type(value).__name__}")
    return value


_session_option = click.option("--session", help="The conversation or run id (filterable later).")
_where_option = click.option(
    "--where", help='Only memories whose metadata matches this JSON filter, e.g. \'{"project": "apollo"}\'.'
)


@cli.command()
@click.argument("content", required=False)
@click.option("--type", "mtype", type=click.Choice([t.value for t in MemoryType]), default="info", show_default=True)
@click.option("--importance", type=click.FloatRange(0, 10), default=5.0, show_default=True)
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--entity", "entities", multiple=True, help="A named entity the memory is about (repeatable).")
@click.option("--shared", is_flag=True, help="Share with every agent of the tenant.")
@click.option("--force", is_flag=True, help="Store it even if this text was forgotten before.")
@_session_option
@click.option("--metadata", help='A JSON object stored with the memory, e.g. \'{"source": "email"}\'.')
@click.option(
    "--messages",
    type=click.File("r", encoding="utf-8"),
    help="Instead of CONTENT: a JSON file ('-' for stdin) of chat messages [{role, content, name?, "
    "created_at?}, ...], stored one episode per turn.",
)
@click.option(
    "--extract/--no-extract",
    default=None,
    help="With --messages: queue the turns for the extraction worker (`engramdb worker`), or not.",
)
@json_option
def remember(
    content: str | None,
    mtype: str,
    importance: float,
    tags: tuple[str, ...],
    entities: tuple[str, ...],
    shared: bool,
    force: bool,
    session: str | None,
    metadata: str | None,
    messages: Any,
    extract: bool | None,
) -> None:
    """Store a memory (or, with --messages, a conversation); prints its id (one per turn)."""
    meta = _json_arg("--metadata", metadata)
    agent = settings().agent()
    if messages is not None:
        if content is not None:
            raise ValidationError("give CONTENT or --messages, not both")
        turns = agent.remember(
            messages=_json_arg("--messages", messages.read(), list), session=session, metadata=meta,
            shared=shared, force=force, tags=tags or None, extract=extract,
        )  # fmt: skip
        emit(turns, "\n".join(t.id for t in turns))
        return
    if extract is not None:
        raise ValidationError("--extract/--no-extract go with --messages (a conversation)")
    if content is None:
        raise ValidationError("remember needs CONTENT (or --messages FILE)")
    m = agent.remember(
        content, type=mtype, importance=importance, tags=tags, entities=entities, shared=shared, force=force,
        session=session, metadata=meta,
    )  # fmt: skip
    emit(m, m.id)


@cli.command()
@click.argument("query")
@click.option("-k", "k", type=click.IntRange(1, 1000), default=5, show_default=True, help="How many memories.")
@click.option("--hops", type=click.IntRange(0, 5), default=1, show_default=True, help="Spreading over edges.")
@click.option("--evidence", is_flag=True, help="Print the untrusted-evidence block an LLM would get.")
@click.option("--budget", type=click.IntRange(16), default=800, show_default=True, help="Token budget of --evidence.")
@click.option(
    "--min-relevance",
    type=click.FloatRange(0, 1),
    help="Leave out memories less relevant than this (0-1, the relevance column): an empty answer "
    "instead of the least bad ones.",
)
@_session_option
@_where_option
@json_option
def recall(
    query: str,
    k: int,
    hops: int,
    evidence: bool,
    budget: int,
    min_relevance: float | None,
    session: str | None,
    where: str | None,
) -> None:
    """Recall the memories most relevant to QUERY (logged, and reinforcing them).

    Each line: rank, score (the ranking, relative to this recall), relevance (0-1, comparable
    across queries), the memory."""
    hits = (
        settings()
        .agent()
        .recall(query, k=k, hops=hops, min_relevance=min_relevance, session=session, where=_json_arg("--where", where))
    )
    data = {
        "recall_id": hits.recall_id,
        "hits": [
            {"rank": h.rank, "score": h.score, "relevance": h.relevance, "source": h.source, "memory": h.memory}
            for h in hits
        ],
        "note": hits.note,
    }
    if evidence:
        emit(data, hits.as_evidence(budget) or "(no memories matched)")
        return
    lines = [f"{h.rank}. {h.score:.3f}  rel {h.relevance:.2f}  {_memory_line(h.memory)}" for h in hits] or [
        "(no memories matched)"
    ]
    fewer = [f"fewer than asked: {hits.note}"] if hits.note else []
    emit(data, "\n".join([*lines, *fewer, f"recall id: {hits.recall_id}"]))


@cli.command()
@click.argument("what")
@click.option("-k", "k", type=click.IntRange(1, 1000), default=5, show_default=True)
@json_option
def explain(what: str, k: int) -> None:
    """Why a recall ranked what it did: a recall id (rc_…) or a query (a dry run)."""
    why = settings().agent().explain(what, k=k)

    def text() -> str:
        lines = [f"{why.recall_id or '(dry run)'}  query: {why.query}"]
        for label, entries in (("hit", why.hits), ("near miss", why.near_misses)):
            for e in entries:
                c = e.components
                lines.append(
                    f"{label:9} {e.rank:>3}  {e.score:.3f}  {e.memory_id}  rel {c.rel:.2f} rec {c.rec:.2f} "
                    f"imp {c.imp:.2f} spread {c.spread:.2f} cos {c.cos:.2f} bm25 {c.bm25:.2f}"
                )
        return "\n".join(lines)

    emit(why, text)


@cli.command()
@click.argument("memory_id", required=False)
@click.option("--reason", default="", help="Why (kept in the tombstone).")
@_session_option
@_where_option
@click.option("--everything", is_flag=True, help="Every memory this agent may write (its own and the shared ones).")
@click.option("--dry-run", is_flag=True, help="With --session/--where/--everything: count and list, change nothing.")
@json_option
def forget(
    memory_id: str | None, reason: str, session: str | None, where: str | None, everything: bool, dry_run: bool
) -> None:
    """Forget a memory for good, leaving a tombstone so the text is not stored again by accident;
    or, with --session, --where or --everything instead of MEMORY_ID, every memory they match."""
    bulk = session is not None or where is not None or everything
    if memory_id is not None and bulk:
        raise ValidationError("give MEMORY_ID or --session/--where/--everything, not both")
    if memory_id is None and not bulk:
        raise ValidationError("forget needs MEMORY_ID, or --session/--where/--everything for many")
    if memory_id is not None:
        if dry_run:
            raise ValidationError("--dry-run is for --session/--where/--everything")
        stone = settings().agent().forget(memory_id, reason=reason)
        emit(stone, f"forgot {stone.memory_id}")
        return
    report = (
        settings()
        .agent()
        .forget_where(
            session=session, where=_json_arg("--where", where), everything=everything, dry_run=dry_run, reason=reason
        )
    )
    verb = "would forget" if dry_run else "forgot"
    emit(report, "\n".join([*report.ids, f"{verb} {report.count} memories"]))


def _when(value: float | None) -> str:
    return "-" if value is None else dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")


@cli.command()
@click.argument("memory_id")
@json_option
def show(memory_id: str) -> None:
    """One memory this agent can see: its fields, its edges and earlier versions (not reinforced)."""
    agent = settings().agent()
    m = agent.get(memory_id, touch=False)
    edges = agent.edges(memory_id)
    versions = agent.history(memory_id)

    def text() -> str:
        level = Confidentiality(m.confidentiality).name.lower()
        lines = [
            f"{m.id}  {m.type.value}" + (f" [{m.status.value}]" if m.status else "") + ("  (archived)" if m.archived else ""),
            f"owner: {'shared' if m.shared else m.owner}  author: {m.author}  level: {level}  version: {m.version}",
            f"importance: {m.importance:g} ({m.importance_source})  salience: {m.salience:g}  confidence: {m.confidence:g}",
            f"created: {_when(m.created_at)}  last access: {_when(m.last_access)}  accesses: {m.access_count}",
        ]  # fmt: skip
        if m.title:
            lines.append(f"title: {m.title}")
        if m.tags or m.entities:
            lines.append(f"tags: {', '.join(m.tags) or '-'}  entities: {', '.join(m.entities) or '-'}")
        if m.session is not None or m.metadata:
            lines.append(f"session: {m.session or '-'}  metadata: {json.dumps(m.metadata, ensure_ascii=False)}")
        lines += ["", m.content]
        if edges:
            lines += ["", "edges:"]
            lines += [f"  {e.source} -{e.type.value} {e.weight:g}-> {e.target}" for e in edges]
        if versions:
            lines += ["", "earlier versions:"]
            lines += [f"  v{v.version} {_when(v.changed_at)} by {v.changed_by}: {v.content}" for v in versions]
        return "\n".join(lines)

    emit({"memory": m, "edges": edges, "history": versions}, text)


@cli.command("list")
@click.option("--contains", help="Only memories whose title, content or tags hold this text (any case).")
@click.option("--type", "types", multiple=True, type=click.Choice([t.value for t in MemoryType]), help="Only this type (repeatable).")  # fmt: skip
@click.option("--tag", help="Only memories with this tag.")
@click.option("--status", type=click.Choice(["active", "archived", "all"]), default="active", show_default=True)
@click.option("--offset", type=click.IntRange(0), default=0, show_default=True, help="Skip this many (for paging).")
@click.option("--limit", type=click.IntRange(1, 1000), default=50, show_default=True, help="At most this many.")
@_session_option
@_where_option
@json_option
def list_cmd(
    contains: str | None,
    types: tuple[str, ...],
    tag: str | None,
    status: str,
    offset: int,
    limit: int,
    session: str | None,
    where: str | None,
) -> None:
    """List the memories this agent can see, newest first, a page at a time (nothing reinforced)."""
    page = (
        settings()
        .agent()
        .browse(
            contains=contains, types=types or None, tag=tag, status=status, offset=offset, limit=limit,
            session=session, where=_json_arg("--where", where),
        )
    )  # fmt: skip
    data = {"total": page.total, "offset": page.offset, "limit": page.limit, "has_more": page.has_more,
            "memories": page.memories}  # fmt: skip

    def text() -> str:
        lines = [_memory_line(m) for m in page.memories] or ["(no memories matched)"]
        shown = f"{page.offset + 1}-{page.offset + len(page.memories)}" if page.memories else "0"
        more = f"; next page: --offset {page.offset + len(page.memories)}" if page.has_more else ""
        return "\n".join([*lines, f"{shown} of {page.total}{more}"])

    emit(data, text)


@cli.command()
@click.argument("memory_id")
@click.option("--content", help="The new text (the old one stays in the memory's history).")
@click.option("--title", help="The new title.")
@click.option("--importance", type=click.FloatRange(0, 10), help="How much it matters, 0-10.")
@click.option("--confidence", type=click.FloatRange(0, 1), help="How sure it is true, 0-1.")
@click.option("--status", type=click.Choice([t.value for t in TodoStatus]), help="A todo's status.")
@click.option("--tag", "tags", multiple=True, help="Replace the tags with these (repeatable).")
@click.option("--no-tags", is_flag=True, help="Remove every tag.")
@click.option("--level", type=click.Choice(_LEVELS), help="The confidentiality level (never below the agent's floor).")
@json_option
def update(
    memory_id: str,
    content: str | None,
    title: str | None,
    importance: float | None,
    confidence: float | None,
    status: str | None,
    tags: tuple[str, ...],
    no_tags: bool,
    level: str | None,
) -> None:
    """Change a memory this agent may write (its own or a shared one); prints the memory's id and version."""
    if tags and no_tags:
        raise ValidationError("give --tag or --no-tags, not both")
    new_tags = () if no_tags else (tags or None)
    if all(v is None for v in (content, title, importance, confidence, status, new_tags, level)):
        raise ValidationError("nothing to change: give at least one of --content, --title, --importance, "
                              "--confidence, --status, --tag, --no-tags, --level")  # fmt: skip
    m = settings().agent().update(
        memory_id, content=content, title=title, importance=importance, confidence=confidence, status=status,
        tags=new_tags, confidentiality=None if level is None else Confidentiality[level.upper()],
    )  # fmt: skip
    emit(m, f"updated {m.id} (version {m.version})")


@cli.command()
@click.argument("source")
@click.argument("target")
@click.option("--type", "edge_type", type=click.Choice([t.value for t in EdgeType]), default="related", show_default=True)  # fmt: skip
@click.option("--weight", type=click.FloatRange(0, 1, min_open=True), default=1.0, show_default=True)
@json_option
def link(source: str, target: str, edge_type: str, weight: float) -> None:
    """Add a typed edge from memory SOURCE to memory TARGET (recall spreads along it)."""
    e = settings().agent().link(source, target, edge_type, weight)
    emit(e, f"{e.source} -{e.type.value}-> {e.target}")


@cli.command()
@click.argument("content")
@click.option("--when", "when_", help="Fire at this time: ISO 8601 (2026-12-24T09:00Z) or seconds since 1970.")
@click.option("--every", type=click.FloatRange(0, min_open=True), help="With --when: fire again every this many seconds.")  # fmt: skip
@click.option("--on-event", help="Fire when this event is announced (engramdb due --event NAME).")
@click.option("--cue", help="Fire when a text holding this phrase is checked (engramdb due --text ...).")
@click.option("--repeat", is_flag=True, help="An event or cue intent keeps firing (default: once).")
@click.option("--importance", type=click.FloatRange(0, 10))
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@json_option
def intend(
    content: str,
    when_: str | None,
    every: float | None,
    on_event: str | None,
    cue: str | None,
    repeat: bool,
    importance: float | None,
    tags: tuple[str, ...],
) -> None:
    """Store an intent (something to do later) with one trigger: --when, --on-event or --cue."""
    when: float | str | None = when_
    if when_ is not None:
        try:
            when = float(when_)
        except ValueError:
            when = when_  # an ISO time: the engine parses and checks it
    m = (
        settings()
        .agent()
        .intend(
            content, when=when, every=every, on_event=on_event, cue=cue, repeat=repeat, importance=importance, tags=tags
        )
    )
    emit(m, m.id)


@cli.command()
@click.option("--event", help="Announce this event: fire the intents waiting for it.")
@click.option("--text", help="Check this text for the cue phrases of intents.")
@json_option
def due(event: str | None, text: str | None) -> None:
    """Fire and list this agent's intents that are due now (time), or match --event or --text."""
    fired = settings().agent().due(event=event, text=text)
    emit(fired, "\n".join(_memory_line(m) for m in fired) or "(nothing due)")


@cli.command()
@json_option
def compact() -> None:
    """Rewrite the store from its live rows, so that nothing forgotten survives on disk (slow on a big store)."""
    started = time.perf_counter()
    settings().engine().compact()
    seconds = round(time.perf_counter() - started, 2)
    emit({"compacted": True, "seconds": seconds}, f"compacted in {seconds:.2f}s")


@cli.group(invoke_without_command=True)
@click.option("--status", type=click.Choice(["open", "done", "dropped", "all"]), default="open", show_default=True)
@json_option
@click.pass_context
def todos(ctx: click.Context, status: str) -> None:
    """List todos; or add, complete, drop one (subcommands)."""
    if ctx.invoked_subcommand is not None:
        return
    items = settings().agent().todos(None if status == "all" else TodoStatus(status))
    emit(items, "\n".join(_memory_line(m) for m in items) or f"(no {status} todos)")


@todos.command("add")
@click.argument("content")
@click.option("--importance", type=click.FloatRange(0, 10), default=5.0, show_default=True)
@click.option("--shared", is_flag=True)
@json_option
def todos_add(content: str, importance: float, shared: bool) -> None:
    """Add an open todo; prints its id."""
    m = settings().agent().remember(content, type=MemoryType.TODO, importance=importance, shared=shared)
    emit(m, m.id)


@todos.command("done")
@click.argument("memory_id")
@json_option
def todos_done(memory_id: str) -> None:
    """Mark a todo done."""
    m = settings().agent().complete(memory_id)
    emit(m, f"done: {m.id}")


@todos.command("drop")
@click.argument("memory_id")
@json_option
def todos_drop(memory_id: str) -> None:
    """Drop a todo."""
    m = settings().agent().drop(memory_id)
    emit(m, f"dropped: {m.id}")


@cli.command()
@click.argument("statement")
@click.argument("params", nargs=-1)
@click.option("--max-rows", type=click.IntRange(1), default=1000, show_default=True)
@json_option
def sql(statement: str, params: tuple[str, ...], max_rows: int) -> None:
    """Run one SQL STATEMENT on this agent's tables, with ? PARAMS (strings).

    It runs in the scope whose names it uses (shared_… or private_<agent>_…); the scope's
    database authorizer refuses anything else. Write the store's SQL dialect (SQLite or
    PostgreSQL; `engramdb tables` names it; docs/sql-dialects.md).
    """
    agent = settings().agent()
    stmt = classify(statement)
    scope = pick_scope([agent.private, agent.shared], stmt)
    with otel.span(
        "engramdb.sql", tenant=agent.tenant, agent=agent.agent_id, scope=scope.label, statement=stmt.kind.value
    ):
        _sql(scope, stmt, statement, params, max_rows)


def _sql(scope: MemoryScope, stmt: Statement, statement: str, params: tuple[str, ...], max_rows: int) -> None:
    if stmt.kind is Kind.READ:
        page = scope.read_page(statement, params or None, limit=max_rows)
        data = {"scope": scope.label, "columns": page.columns, "rows": page.rows, "more": page.more}

        def text() -> str:
            out = [" | ".join(page.columns)] if page.columns else []
            out += [" | ".join("NULL" if v is None else str(v) for v in row) for row in page.rows]
            if page.more:
                out.append(f"… more rows (raise --max-rows {max_rows})")
            return "\n".join(out)

        emit(data, text)
        return
    result = scope.execute(statement, params or None)
    done = "schema changed" if stmt.is_ddl else f"{result.rowcount} row(s) changed"
    emit(
        {"scope": scope.label, "rowcount": result.rowcount, "lastrowid": result.lastrowid, "rows": result.rows},
        f"{done} in scope '{scope.label}'",
    )


@cli.command()
@json_option
def tables() -> None:
    """The tables this agent can use, by scope, with their columns, and the store's SQL dialect."""
    from engramdb.tools.dialects import dialect_of

    agent = settings().agent()
    spoken = dialect_of(agent.shared)
    data: dict[str, Any] = {s.label: {t: s.columns(t) for t in s.list_tables()} for s in (agent.shared, agent.private)}

    def text() -> str:
        lines = [f"SQL dialect: {spoken.name} (docs/sql-dialects.md)"] if spoken else []
        for label, found in data.items():
            lines.append(f"{label}:")
            lines += [f"  {t}({', '.join(cols)})" for t, cols in found.items()] or ["  (no tables)"]
        return "\n".join(lines)

    emit({**data, "dialect": spoken.name if spoken else None}, text)


@cli.command()
@json_option
def stats() -> None:
    """Usage statistics over the memories this agent can see."""
    st = jsonable(settings().agent().stats())
    emit(st, "\n".join(f"{k}: {v}" for k, v in st.items()))


@cli.command()
@click.option("--step", "steps", multiple=True, type=click.Choice(["merge", "reconcile", "link", "rescore", "abstract", "prune"]), help="Run only this step (repeatable).")  # fmt: skip
@json_option
def reflect(steps: tuple[str, ...]) -> None:
    """Consolidate this agent's memories: merge, link, rescore, prune (with progress)."""
    with progress_bars() as bar:
        rep = settings().agent().reflect(steps=steps or None, progress=bar)
    lines = [f"{s.step:10} changed {s.changed:>6}  examined {s.examined:>7}  {s.duration_s:.2f}s" + (f"  ({s.skipped})" if s.skipped else "") for s in rep.steps]  # fmt: skip
    emit(rep, "\n".join([*lines, f"{rep.run_id} in {rep.duration_s:.2f}s"]))


@cli.command()
@click.option("--all", "everything", is_flag=True, help="Embed every memory again, not only those without a vector.")
@json_option
def reembed(everything: bool) -> None:
    """Give the agent's memories vectors of the current --embedder (after switching embedders)."""
    with progress_bars() as bar:
        n = settings().agent().reembed(missing_only=not everything, progress=bar)
    emit({"embedded": n}, f"embedded {n} memories")


@cli.command("export")
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True), default="-")
@json_option
def export_cmd(path: str) -> None:
    """Export everything this agent can see as JSON Lines to PATH (default: stdout)."""
    agent = settings().agent()
    if path == "-":
        with progress_bars() as bar:  # the JSON Lines are the output, with or without --json
            agent.export_jsonl(sys.stdout, progress=bar)
        return
    with progress_bars() as bar:
        n = agent.export_jsonl(Path(path), progress=bar)
    emit({"path": path, "lines": n}, f"{n} lines written to {path}")


@cli.command("import")
@click.argument("path", type=click.Path(dir_okay=False, allow_dash=True))
@json_option
def import_cmd(path: str) -> None:
    """Import a JSON Lines export from PATH (``-``: stdin) as this agent; safe to run twice."""
    agent = settings().agent()
    with progress_bars() as bar:
        if path == "-":
            rep = agent.import_jsonl(sys.stdin, progress=bar)
        else:
            if not Path(path).is_file():
                raise NotFound(f"no file {path!r} to import")
            rep = agent.import_jsonl(Path(path), progress=bar)
    emit(
        rep,
        f"imported {rep.memories} memories, {rep.edges} edges, {rep.tombstones} tombstones; already present: "
        f"{rep.memories_present} memories, {rep.edges_present} edges, {rep.tombstones_present} tombstones; "
        f"kept forgotten: {rep.memories_forgotten} memories, {rep.edges_forgotten} edges"
        + (f"; {rep.reidentified} memories under new ids (from another tenant)" if rep.reidentified else ""),
    )


@cli.command()
@click.option("--transport", type=click.Choice(["stdio", "http"]), default="stdio", show_default=True)
@click.option("--host", default="127.0.0.1", show_default=True, help="HTTP: the address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8765, show_default=True, help="HTTP: the port.")
@click.option(
    "--token-env",
    metavar="VAR",
    help="HTTP: require this bearer token, read from the environment variable VAR (not an argument: "
    "other users can read a process's arguments). The server's --agent acts.",
)
@click.option(
    "--jwt-key",
    type=click.Path(exists=True, dir_okay=False),
    help="HTTP: accept JWT bearer tokens signed with this key (a file: an HS secret, or the issuer's PEM "
    "public key); each token's sub, tenant and cap claims say which agent acts (cap at most --cap).",
)
@click.option("--jwt-algorithm", help="HTTP: the JWT algorithm (default: RS256 for a PEM key, HS256 for a secret).")
@click.option("--issuer", help="HTTP: the iss every JWT must carry.")
@click.option("--audience", help="HTTP: the aud every JWT must carry: this server's URL, e.g. https://mem.example/mcp.")
@click.option("--allowed-host", multiple=True, help="HTTP: a Host header to accept besides loopback (repeatable).")
@click.option("--allowed-origin", multiple=True, help="HTTP: a browser Origin to accept besides loopback (repeatable).")
@json_option
def mcp(
    transport: str,
    host: str,
    port: int,
    token_env: str | None,
    jwt_key: str | None,
    jwt_algorithm: str | None,
    issuer: str | None,
    audience: str | None,
    allowed_host: tuple[str, ...],
    allowed_origin: tuple[str, ...],
) -> None:
    """Serve this agent's memory tools over MCP (stdio, or streamable HTTP); needs the mcp extra.

    Over HTTP beyond loopback a bearer token is required: --token-env (one user, the server's
    agent) or --jwt-key with --issuer and --audience (tokens name their agent)."""
    from engramdb.mcp import serve

    s = settings()
    if transport == "stdio" and s.as_json:
        raise ValidationError("--json does not apply to the MCP server")
    verifier = _verifier(transport, token_env, jwt_key, jwt_algorithm, issuer, audience)
    engine = s.engine()
    agent = s.agent()

    def agents(who: Any) -> Any:
        return engine.agent(who.agent_id, tenant=who.tenant, cap=who.cap, floor=agent.floor)

    serve(
        agent, transport=transport, host=host, port=port, verifier=verifier, agents=agents,
        allowed_hosts=allowed_host, allowed_origins=allowed_origin,
    )  # fmt: skip


def _verifier(
    transport: str,
    token_env: str | None,
    jwt_key: str | None,
    algorithm: str | None,
    issuer: str | None,
    audience: str | None,
) -> Any:
    """The bearer-token check the options ask for, or None; `ConfigError` for a half-given one."""
    if transport != "http":
        if token_env or jwt_key:
            raise ConfigError("--token-env and --jwt-key apply to --transport http only")
        return None
    if token_env and jwt_key:
        raise ConfigError("give one of --token-env and --jwt-key, not both")
    try:
        from engramdb.mcp.auth import JwtTokens, StaticToken
    except ImportError:
        raise MissingExtra("the MCP server", "mcp") from None
    if token_env:
        token = os.environ.get(token_env)
        if not token:
            raise ConfigError(f"the environment variable {token_env} (--token-env) is not set or empty")
        return StaticToken(token)
    if jwt_key:
        if not issuer or not audience:
            raise ConfigError("--jwt-key needs --issuer and --audience (this server's URL)")
        key = Path(jwt_key).read_bytes()
        pem = key.lstrip().startswith(b"-----BEGIN")
        return JwtTokens(
            key if pem else key.strip(), algorithms=[algorithm or ("RS256" if pem else "HS256")],
            issuer=issuer, audience=audience,
        )  # fmt: skip
    if issuer or audience or algorithm:
        raise ConfigError("--issuer, --audience and --jwt-algorithm go with --jwt-key")
    return None


@cli.command("inspect")
@click.option("--db", "db_here", help="The store (as the global --db).")
@click.option("--agent", "agent_here", help="View as this agent (as the global --agent).")
@click.option("--tenant", "tenant_here", help="The agent's tenant (as the global --tenant).")
@click.option("--cap", "cap_here", type=click.Choice(_LEVELS), help="The agent's cap (as the global --cap).")
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True, help="0: any free port.")
@json_option
def inspect_cmd(
    db_here: str | None, agent_here: str | None, tenant_here: str | None, cap_here: str | None, port: int
) -> None:
    """Serve a local, read-only web inspector of what one agent may see; needs the inspect extra.

    Listens on 127.0.0.1 only and prints the address to open, with its access token; never opens
    a browser itself. Stop it with Ctrl-C.
    """
    from engramdb.inspector import _require

    _require()
    from engramdb.inspector.server import InspectorServer

    s = settings()
    s.db = db_here or s.db
    s.agent_id = agent_here or s.agent_id
    s.tenant = tenant_here or s.tenant
    if cap_here:
        s.cap = Confidentiality[cap_here.upper()]
    if s.db and isinstance(where := parse_location(s.db), Path) and not where.exists():
        # Opening a missing file would create an empty store: a read-only viewer must not.
        raise NotFound(f"no store at {str(where)!r}; pass --db with an existing SQLite file or a postgresql:// URL")
    server = InspectorServer(s.agent(), port=port)
    emit({"url": server.url}, f"engramdb inspector: {server.url}")
    sys.stdout.flush()
    server.run()


# -- extraction (engramdb.llm) ------------------------------------------------------------------------


def _job_line(job: Any) -> str:
    error = f"  last error: {job.last_error}" if job.last_error else ""
    return (
        f"{job.job_id}  {job.status:<7}  {job.tenant}/{job.agent}  {len(job.memory_ids)} turns  "
        f"attempts {job.attempts}  queued {_when(job.created_at)}{error}"
    )


@cli.command()
@click.option("--all-tenants", is_flag=True, help="Every tenant's jobs, not only --tenant's.")
@click.option("--done", "with_done", is_flag=True, help="Also the jobs that are done.")
@json_option
def pending(all_tenants: bool, with_done: bool) -> None:
    """Extraction jobs not done yet: waiting, being run, or failed (with their last error)."""
    s = settings()
    statuses = ("pending", "failed", "done") if with_done else ("pending", "failed")
    jobs = s.engine().pending(tenant=None if all_tenants else s.tenant, statuses=statuses)
    emit(jobs, lambda: "\n".join(_job_line(j) for j in jobs) or "no extraction jobs pending")


@cli.command()
@click.argument("job_ids", nargs=-1)
@json_option
def requeue(job_ids: tuple[str, ...]) -> None:
    """Queue failed extraction jobs again (these JOB_IDS, or every failed one of --tenant)."""
    s = settings()
    n = s.engine().requeue(tenant=s.tenant, job_ids=list(job_ids) or None)
    emit({"requeued": n}, f"requeued {n} job(s)")


@cli.command("revert-extraction")
@click.argument("job_id")
@json_option
def revert_extraction(job_id: str) -> None:
    """Undo what one extraction job applied: its facts forgotten, what it superseded valid again."""
    s = settings()
    n = s.engine().revert_extraction(job_id, tenant=s.tenant)
    emit({"job_id": job_id, "undone": n}, f"{job_id}: {n} decision(s) undone")


@cli.command()
@click.option("--base-url", envvar="ENGRAMDB_LLM_URL", required=True,
              help="The chat server's API root, ending at /v1 [env ENGRAMDB_LLM_URL].")  # fmt: skip
@click.option("--model", envvar="ENGRAMDB_LLM_MODEL", required=True, help="The model name [env ENGRAMDB_LLM_MODEL].")
@click.option("--api-key-env", default=None, help="The environment variable holding the API key (none: no key).")
@click.option("--llm-cap", type=click.Choice(_LEVELS), default="internal", show_default=True,
              help="The most confidential turn or fact ever sent to the model.")  # fmt: skip
@click.option("--all-tenants", is_flag=True, help="Run every tenant's jobs, not only --tenant's.")
@click.option("--once", is_flag=True, help="Run the jobs due now, print what was done and exit.")
@click.option("--idle", type=click.FloatRange(0.05, 3600), default=2.0, show_default=True,
              help="Seconds between looks for new jobs.")  # fmt: skip
@click.option("--lease", type=click.FloatRange(1, 86400), default=120.0, show_default=True,
              help="Seconds a claimed job stays this worker's.")  # fmt: skip
@click.option("--timeout", type=click.FloatRange(0.1, 3600), default=60.0, show_default=True,
              help="Seconds to wait for one answer.")  # fmt: skip
@click.option("--schema-mode", type=click.Choice(["json_schema", "json_object", "none"]), default="json_schema",
              show_default=True, help="How structured output is asked for.")  # fmt: skip
@json_option
def worker(
    base_url: str, model: str, api_key_env: str | None, llm_cap: str, all_tenants: bool, once: bool,
    idle: float, lease: float, timeout: float, schema_mode: str,
) -> None:  # fmt: skip
    """Run queued extraction jobs with a chat model (any OpenAI-compatible server) until stopped.

    Conversations are queued by `remember --messages FILE --extract` (or an engine made with
    queue_extraction=True). Stop it with Ctrl-C or SIGTERM: the job being run finishes or stays
    queued; nothing is lost either way.
    """
    import signal
    import threading

    from engramdb.llm import ChatClient, LLMExtractor

    s = settings()
    client = ChatClient(base_url, model, api_key_env=api_key_env, timeout=timeout, schema_mode=schema_mode)
    w = s.engine().extraction_worker(
        LLMExtractor(client), tenant=None if all_tenants else s.tenant, llm_cap=Confidentiality[llm_cap.upper()],
        lease=lease,
    )  # fmt: skip
    if once:
        report = w.drain()
        emit(report, f"claimed {report.claimed}, done {report.done}, retried {report.retried}, "
                     f"failed {report.failed}; facts added {report.added}, updated {report.updated}, "
                     f"deleted {report.deleted}")  # fmt: skip
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    click.echo(f"engramdb worker {w.worker_id}: {client.url} model {model}; Ctrl-C to stop", err=True)
    try:
        while not stop.is_set():
            report = w.drain(should_stop=stop.is_set)
            if report.claimed:
                click.echo(f"done {report.done}, retried {report.retried}, failed {report.failed}", err=True)
            stop.wait(idle)
    except KeyboardInterrupt:
        pass


def main() -> None:
    """The console script ``engramdb``."""
    cli(prog_name="engramdb")

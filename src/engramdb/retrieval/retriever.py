"""`MemoryRetriever`: the best rows of one scope table, as token-budgeted untrusted evidence."""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engramdb.errors import ScopeViolation, SqlError, ValidationError
from engramdb.retrieval.budget import TokenCounter, approx_tokens
from engramdb.retrieval.evidence import EvidenceItem, render_evidence
from engramdb.retrieval.keywords import hits, keywords, words

if TYPE_CHECKING:
    from engramdb.embeddings.base import Embedder
    from engramdb.retrieval.row_vectors import RowVectors
    from engramdb.storage.ports import MemoryScope

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_RECENCY_COLUMNS = ("created_ts", "created_at", "ts", "timestamp")


@dataclass(frozen=True, slots=True)
class RetrievedRow:
    """One ranked row: its rowid, content, keyword hits, recency value and (if on) cosine."""

    rowid: int
    content: str
    hits: int
    recency: Any
    similarity: float | None = None


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _norm(text: str) -> str:
    return " ".join(words(text))


def _check_arguments(
    scope: object, table: object, token_budget: object, content_column: object, recency_column: object,
    token_counter: object, semantic: object, include_unmatched: object, candidate_limit: object,
) -> None:  # fmt: skip
    """Wrong-typed `MemoryRetriever` arguments, refused before the scope is asked anything."""
    from engramdb.storage.ports import MemoryScope

    if not isinstance(scope, MemoryScope):
        raise ValidationError(
            f"scope must be a MemoryScope (agent.shared or agent.private), got {type(scope).__name__}"
        )
    for name, value in (("table", table), ("content_column", content_column), ("recency_column", recency_column)):
        if not isinstance(value, str) and not (name == "recency_column" and value is None):
            raise ValidationError(f"{name} must be a column or table name (a str), got {value!r}")
    for name, value in (("token_budget", token_budget), ("candidate_limit", candidate_limit)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValidationError(f"{name} must be a whole number >= 1, got {value!r}")
    if not callable(token_counter):
        raise ValidationError(f"token_counter must be a callable text -> tokens, got {type(token_counter).__name__}")
    if semantic is not None and not isinstance(semantic, bool):
        raise ValidationError(f"semantic must be True, False or None, got {semantic!r}")
    if not isinstance(include_unmatched, bool):
        raise ValidationError(f"include_unmatched must be True or False, got {include_unmatched!r}")


class MemoryRetriever:
    """Rank the rows of `table` for a query and render them as untrusted evidence.

    Ranking, strictly in this order: whole-word keyword hits (distinct query keywords found in
    the row), then cosine similarity when semantic ranking is on, then recency (`recency_column`,
    else the rowid). So a keyword match always outranks recency, however far apart the rows are.
    Every row of the table is a candidate, not only the newest ones. Rows with equal normalised
    content are shown once. The result never exceeds `token_budget` as counted by `token_counter`.

    Example::

        retriever = MemoryRetriever(scope=shared, token_budget=512, table="shared_notes", content_column="content")
        evidence = retriever.retrieve("what implies Y")

    Args:
        scope: the scope whose table is read; the retriever can read nothing else.
        token_budget: the most tokens the returned text may count.
        table, content_column: where the text lives.
        recency_column: tie-breaker column; default: the first of ``created_ts``, ``created_at``,
            ``ts``, ``timestamp`` the table has, else the rowid.
        token_counter: ``str -> int``; default about four characters a token.
        semantic: rank by embedding similarity after keyword hits (default: on when the engine was
            opened with ``enable_embeddings=True``).
        include_unmatched: after the keyword matches, fill the budget with the remaining rows
            (most similar, else most recent), as spec 000's single score does. Set False to return
            keyword matches only.
    """

    def __init__(
        self,
        *,
        scope: MemoryScope,
        token_budget: int = 512,
        table: str,
        content_column: str = "content",
        recency_column: str | None = None,
        token_counter: TokenCounter = approx_tokens,
        semantic: bool | None = None,
        include_unmatched: bool = True,
        candidate_limit: int = 5000,
    ) -> None:
        _check_arguments(scope, table, token_budget, content_column, recency_column, token_counter, semantic,
                         include_unmatched, candidate_limit)  # fmt: skip
        if not scope.namespace.owns(table):
            raise ScopeViolation(scope.namespace.rule())
        for what, name in (("content_column", content_column), ("recency_column", recency_column)):
            if name is not None and not _IDENT.match(name):
                raise SqlError(f"{what} {name!r} is not a plain column name")
        if token_budget < 1:
            raise SqlError("token_budget must be a positive number of tokens")
        self.scope = scope
        self.table = table
        self.content_column = content_column
        self.token_budget = token_budget
        self.token_counter = token_counter
        self.include_unmatched = include_unmatched
        self.candidate_limit = candidate_limit
        columns = self._columns()
        if content_column.lower() not in columns:
            raise SqlError(f"table {table} has no column {content_column}")
        if recency_column is None:
            recency_column = next((c for c in _RECENCY_COLUMNS if c in columns), None)
        elif recency_column.lower() not in columns:
            raise SqlError(f"table {table} has no column {recency_column}")
        self.recency_column = recency_column
        #: the SQL name of the table's integer row key (SQLite's rowid, a PostgreSQL primary key)
        self.key = scope.row_key(table)
        self._folds_case: bool | None = None
        embedder = scope.embedder
        self.semantic = (embedder is not None) if semantic is None else semantic
        self._vectors: RowVectors | None = None
        if self.semantic:
            self._vectors = self._make_vectors(embedder)

    def _make_vectors(self, embedder: Embedder | None) -> RowVectors:
        from engramdb.retrieval.row_vectors import RowVectors

        if embedder is None:
            from engramdb.memories.runtime import default_embedder

            embedder = default_embedder()
        return RowVectors(self.scope, self.table, self.content_column, embedder)

    def _columns(self) -> set[str]:
        return {c.lower() for c in self.scope.columns(self.table)}

    # -- ranking ------------------------------------------------------------------------------

    def rank(self, query: str, limit: int | None = None) -> list[RetrievedRow]:
        """The best `limit` rows for `query`, best first, deduplicated (no budget applied).

        `limit` defaults to enough rows to fill the token budget. Every row of the table is
        considered: SQLite orders rows by an upper bound of their keyword hits (substring
        matches, computed in C), and rows are read in that order only until no unread row can
        reach the top `limit` — each row's whole-word hits never exceed its bound.
        """
        _check_query(query)
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ValidationError(f"limit must be a whole number >= 1 or None, got {limit!r}")
        need = limit if limit is not None else max(32, self.token_budget // 8)
        # Retrieval never fails on the query's shape: a word longer than any real one (SQLite
        # refuses LIKE patterns past 50,000 bytes) or a flood of words is cut to what can rank.
        kws = [k for k in keywords(query) if len(k) <= MAX_KEYWORD_CHARS][:MAX_KEYWORDS]
        content = _quote(self.content_column)
        recency = _quote(self.recency_column) if self.recency_column else self.key
        table = _quote(self.table)
        sims = self._vectors.similarities(query) if self._vectors is not None else {}
        matched: list[RetrievedRow] = []
        if kws:
            matched = self._keyword_rows(kws, need, sims, content, recency, table)
        matched.sort(key=_order)
        rows = _dedupe(matched)[:need]
        if self.include_unmatched and len(rows) < need:
            rows = _dedupe(rows + self._unmatched({r.rowid for r in matched}, sims, content, recency, table))[:need]
        return rows

    def _keyword_rows(
        self, kws: list[str], need: int, sims: dict[int, float], content: str, recency: str, table: str
    ) -> list[RetrievedRow]:
        # One bound term per keyword. SQLite's LIKE folds ASCII case without copying the text (faster
        # than instr(lower(…)), measured at 10k rows); non-ASCII keywords also try upper and
        # title case, since SQLite folds ASCII letters only. Where LIKE keeps case (PostgreSQL),
        # the lowered text is matched against lowered patterns instead.
        folds = self._like_folds_case()
        subject = content if folds else f"lower({content})"
        terms: list[str] = []
        params: list[str] = []
        for k in kws:
            variants = [k] if k.isascii() else sorted({k, k.upper(), k.title()})
            if not folds:
                variants = sorted({f(v) for v in variants for f in (str.lower, _ascii_lower)})
            like = " OR ".join([f"{subject} LIKE ? ESCAPE '\\'"] * len(variants))
            terms.append(f"CASE WHEN {like} THEN 1 ELSE 0 END")
            params.extend("%" + v.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%" for v in variants)
        bound = " + ".join(terms)
        # The bound is named in a subquery so that the outer WHERE may use it (PostgreSQL does not
        # let WHERE name a SELECT alias; SQLite flattens the subquery to the same plan).
        sql = (
            f"SELECT k, c, r, ub FROM (SELECT {self.key} AS k, {content} AS c, {recency} AS r, {bound} AS ub "  # noqa: S608 - identifiers validated and quoted
            f"FROM {table} WHERE {content} IS NOT NULL) AS ranked WHERE ub > 0 ORDER BY ub DESC"
        )
        found: list[RetrievedRow] = []
        best: list[int] = []  # a min-heap of the `need` largest whole-word hit counts so far
        stream = self.scope.stream(sql, params)
        try:
            for batch in stream:
                for rid, text, rec, ub in batch:
                    # Rows arrive by falling bound; once the bound is below the need-th best
                    # count, no unread row can enter the top `need`.
                    if len(best) >= need and int(ub) < best[0]:
                        return found
                    h = hits(str(text), kws)
                    if h:
                        found.append(RetrievedRow(int(rid), str(text), h, rec, sims.get(int(rid))))
                        if len(best) < need:
                            heapq.heappush(best, h)
                        elif h > best[0]:
                            heapq.heapreplace(best, h)
        finally:
            stream.close()
        return found

    def _unmatched(
        self, taken: set[int], sims: dict[int, float], content: str, recency: str, table: str
    ) -> list[RetrievedRow]:
        limit = self.candidate_limit
        if sims:
            best = sorted((rid for rid in sims if rid not in taken), key=lambda r: -sims[r])[:limit]
            if not best:
                return []
            marks = ",".join("?" * len(best))
            sql = f"SELECT {self.key}, {content}, {recency} FROM {table} WHERE {self.key} IN ({marks})"  # noqa: S608
            found = {int(r[0]): r for r in self.scope.query(sql, best)}
            return [RetrievedRow(rid, str(found[rid][1]), 0, found[rid][2], sims[rid]) for rid in best if rid in found]
        sql = (
            # NULL recency last on every backend (PostgreSQL sorts NULLs first when descending)
            f"SELECT {self.key}, {content}, {recency} FROM {table} WHERE {content} IS NOT NULL "  # noqa: S608
            f"ORDER BY ({recency} IS NULL), {recency} DESC, {self.key} DESC LIMIT ?"
        )
        out = [RetrievedRow(int(r[0]), str(r[1]), 0, r[2]) for r in self.scope.query(sql, (limit + len(taken),))]
        return [r for r in out if r.rowid not in taken][:limit]

    def _like_folds_case(self) -> bool:
        """Whether the database's LIKE ignores ASCII case (SQLite) or not (PostgreSQL); asked once."""
        if self._folds_case is None:
            rows = self.scope.query("SELECT CASE WHEN 'A' LIKE 'a' THEN 1 ELSE 0 END")
            self._folds_case = bool(rows and rows[0][0])
        return self._folds_case

    def retrieve(self, query: str) -> str:
        """The ranked rows for `query`, wrapped as untrusted evidence within the token budget."""
        _check_query(query)
        items = [EvidenceItem(f"{self.table} row {r.rowid}", r.content) for r in self.rank(query)]
        return render_evidence(items, self.token_budget, self.token_counter)


def _check_query(query: object) -> None:
    if not isinstance(query, str):
        raise ValidationError(f"query must be a str, got {type(query).__name__}")


def _ascii_lower(text: str) -> str:
    return text.encode("utf-8", "surrogatepass").lower().decode("utf-8", "surrogatepass")


#: keywords longer than this are not searched for (no real word is; a LIKE pattern has a size limit)
MAX_KEYWORD_CHARS = 256
#: at most this many distinct keywords of one query rank the rows (in the query's order)
MAX_KEYWORDS = 64


def _order(r: RetrievedRow) -> tuple[int, float, tuple[int, float, _Desc], int]:
    return (-r.hits, -(r.similarity or 0.0), _neg(r.recency), -r.rowid)


def _neg(value: Any) -> tuple[int, float, _Desc]:
    """Sort key for "newest first": numbers, then ISO-8601-like text, then NULLs last."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (0, -float(value), _Desc(""))
    if value is None:
        return (2, 0.0, _Desc(""))
    return (1, 0.0, _Desc(str(value)))


@dataclass(frozen=True, slots=True)
class _Desc:
    """A string that sorts in reverse order."""

    value: str

    def __lt__(self, other: _Desc) -> bool:
        return self.value > other.value


def _dedupe(rows: list[RetrievedRow]) -> list[RetrievedRow]:
    seen: set[str] = set()
    out = []
    for r in rows:
        key = _norm(r.content)
        if key in seen:
            continue
        seen.add(key)
        out.append(r)
    return out

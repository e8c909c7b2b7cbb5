"""Metadata and session filters: what a caller may ask for, checked once, as one value every
backend compiles into its own query.

A filter is written the way Chroma, mem0 and MongoDB users already write one::

    {"project": "apollo", "priority": {"$gte": 2}, "$or": [{"lang": "en"}, {"lang": {"$in": ["de", "fr"]}}]}

Top-level keys are metadata keys (all must hold: AND); an operator object holds one or more of
``$eq $ne $in $nin $gt $gte $lt $lte $exists``; ``$and`` / ``$or`` take lists of filters. A bare
value means ``$eq``. Values are JSON scalars: str, int, float, bool, None. The rules, the same on
every backend (a property test holds SQLite, PostgreSQL and `Where.matches` equal):

- equality is typed: ``1`` equals ``1.0`` but never ``"1"`` or ``True``; ``None`` matches a key
  whose value is JSON null (not a missing key — that is ``{"$exists": False}``);
- ``$ne`` and ``$nin`` match a memory without the key too (MongoDB's rule: "not done" includes
  "no status");
- ranges compare numbers with numbers and strings with strings (code-point order, so ISO dates
  compare as dates); a value of the other type, an array, an object or a missing key never
  satisfies a range;
- only top-level keys are addressed; nested objects and arrays are stored and returned, and equal
  nothing a filter can name.

`Where` is frozen and hashable, so it is part of a `Visibility` and of every cache key that holds
one. The SQL forms (`sql`) take every value and every key as a bound parameter.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engramdb.errors import ValidationError

Scalar = str | int | float | bool | None
Dialect = Literal["sqlite", "postgres"]

_COMPARE = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")
_LISTS = ("$in", "$nin")
_OPERATORS = (*_COMPARE, *_LISTS, "$exists")
#: the most leaves one filter may hold (a filter is a query, not a data set)
MAX_LEAVES = 256
#: the most characters a metadata key may have
KEY_CHARS = 128
#: the most characters a string value in a filter may have
VALUE_CHARS = 4_000


def check_key(key: object, what: str = "metadata key") -> str:
    """`key` if it is a usable metadata key: a non-empty str of at most `KEY_CHARS` characters,
    without a double quote, a backslash or a control character, not starting with ``$``."""
    if not isinstance(key, str) or not key:
        raise ValidationError(f"a {what} must be a non-empty str, got {key!r}")
    if len(key) > KEY_CHARS:
        raise ValidationError(f"the {what} {key[:40]!r}… is {len(key)} characters, more than {KEY_CHARS}")
    if key.startswith("$"):
        raise ValidationError(
            f"the {what} {key!r} starts with '$', which filters keep for operators ($eq, $in, $and, …)"
        )
    bad = next((c for c in key if c in '"\\' or ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise ValidationError(
            f"the {what} {key!r} holds {bad!r}; keys may not hold quotes, backslashes or control characters"
        )
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"the {what} {key!r} is not valid Unicode text") from None
    return key


def _scalar(value: object, where: str) -> Scalar:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -(2**63) <= value < 2**63:
            raise ValidationError(f"{where}: the integer {value} does not fit in 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{where}: {value!r} is not a JSON number (NaN and infinities have no JSON form)")
        return value
    if isinstance(value, str):
        if len(value) > VALUE_CHARS:
            raise ValidationError(f"{where}: a string of {len(value):,} characters, more than {VALUE_CHARS:,}")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(f"{where}: {value[:40]!r} is not valid Unicode text") from None
        return value
    raise ValidationError(
        f"{where}: {type(value).__name__} is not a value a filter compares; use str, int, float, bool or None"
    )


def _kind(value: Scalar) -> str:
    """The JSON kind of a scalar: null, bool, number or string."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    return "string"


@dataclass(frozen=True, slots=True)
class Leaf:
    """One test on one field: ``field`` is ``("meta", key)`` or ``("session",)``."""

    field: tuple[str, ...]
    op: str
    value: Scalar | tuple[Scalar, ...]


@dataclass(frozen=True, slots=True)
class Where:
    """A checked filter: ``op`` is ``"and"`` or ``"or"`` over `parts` (leaves or filters)."""

    op: str
    parts: tuple[Leaf | Where, ...]

    # -- building -----------------------------------------------------------------------------

    @staticmethod
    def of(metadata: object = None, *, session: object = None) -> Where | None:
        """The filter of a caller's `metadata` filter and `session` (a session id, or a list of
        them), AND'ed; None when neither is given. Anything malformed is a `ValidationError`
        saying what and where, before any work is done."""
        parts: list[Leaf | Where] = []
        if session is not None:
            parts.append(_session(session))
        if metadata is not None:
            counter = [0]
            parts.append(_parse(metadata, "where", counter))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 and isinstance(parts[0], Where) else Where("and", tuple(parts))

    # -- the reference semantics ----------------------------------------------------------------

    def matches(self, session: str | None, metadata: Mapping[str, Any]) -> bool:
        """Whether a memory of `session` and `metadata` passes (the rule the SQL forms compile)."""
        tests = (
            p.matches(session, metadata) if isinstance(p, Where) else _leaf_matches(p, session, metadata)
            for p in self.parts
        )
        return all(tests) if self.op == "and" else any(tests)

    # -- SQL -----------------------------------------------------------------------------------

    def sql(self, alias: str, placeholder: str, dialect: Dialect) -> tuple[str, dict[str, Any]]:
        """This filter as a SQL condition over the memory table `alias` (columns ``session`` and
        ``metadata``) with its parameters, named ``w_0``, ``w_1``, …; never NULL (a missing key
        reads as the rule says, not as unknown)."""
        params: dict[str, Any] = {}
        return self._sql(alias, placeholder.format, dialect, params), params

    def _sql(self, a: str, p: Any, dialect: Dialect, params: dict[str, Any]) -> str:
        joined = f" {self.op.upper()} ".join(
            part._sql(a, p, dialect, params) if isinstance(part, Where) else _leaf_sql(part, a, p, dialect, params)
            for part in self.parts
        )
        return f"({joined})" if joined else ("1 = 1" if self.op == "and" else "1 = 0")

    def to_json(self) -> Any:
        """A JSON form of the checked filter (for the recall log and `explain`)."""
        return {f"${self.op}": [p.to_json() if isinstance(p, Where) else _leaf_json(p) for p in self.parts]}


def _leaf_json(leaf: Leaf) -> Any:
    name = "$session" if leaf.field == ("session",) else leaf.field[1]
    value = list(leaf.value) if isinstance(leaf.value, tuple) else leaf.value
    return {name: {leaf.op: value}}


def _session(session: object) -> Leaf:
    if isinstance(session, str):
        return Leaf(("session",), "$eq", check_session(session))
    if isinstance(session, (list, tuple)) and session:
        return Leaf(("session",), "$in", tuple(check_session(s) for s in session))
    raise ValidationError(f"session must be a session id (a str) or a non-empty list of them, got {session!r}")


#: the most characters a session id may have
SESSION_CHARS = 200


def check_session(value: object) -> str:
    """`value` as a session id: a non-empty str of at most `SESSION_CHARS` characters."""
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"a session id must be a non-empty str, got {value!r}")
    if len(value) > SESSION_CHARS:
        raise ValidationError(f"a session id is at most {SESSION_CHARS} characters, got {len(value):,}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValidationError(f"the session id {value[:40]!r} is not valid Unicode text") from None
    return value


def _count(counter: list[int]) -> None:
    counter[0] += 1
    if counter[0] > MAX_LEAVES:
        raise ValidationError(f"a filter may hold at most {MAX_LEAVES} tests")


def _parse(spec: object, where: str, counter: list[int]) -> Where:
    if not isinstance(spec, Mapping):
        raise ValidationError(
            f"{where} must be a mapping of metadata keys to values or operators, got {type(spec).__name__}"
        )
    parts: list[Leaf | Where] = []
    for key, value in spec.items():
        if key in ("$and", "$or"):
            if not isinstance(value, (list, tuple)) or not value:
                raise ValidationError(f"{where}.{key} must be a non-empty list of filters, got {value!r}")
            parts.append(Where(key[1:], tuple(_parse(v, f"{where}.{key}[{i}]", counter) for i, v in enumerate(value))))
            continue
        if isinstance(key, str) and key.startswith("$"):
            raise ValidationError(f"{where}: unknown logical operator {key!r}; use $and or $or (or a metadata key)")
        name = check_key(key)
        at = f"{where}[{name!r}]"
        if isinstance(value, Mapping):
            if not value:
                raise ValidationError(f"{at} is an empty operator object; give one of {', '.join(_OPERATORS)}")
            for op, operand in value.items():
                parts.append(_leaf(("meta", name), op, operand, at))
                _count(counter)
        else:
            parts.append(_leaf(("meta", name), "$eq", value, at))
            _count(counter)
    if not parts:
        raise ValidationError(f"{where} is empty: give at least one metadata key (or leave the filter out)")
    return Where("and", tuple(parts))


def _leaf(field: tuple[str, ...], op: object, operand: object, at: str) -> Leaf:
    if op not in _OPERATORS:
        raise ValidationError(f"{at}: unknown operator {op!r}; use one of {', '.join(_OPERATORS)}")
    assert isinstance(op, str)
    if op == "$exists":
        if not isinstance(operand, bool):
            raise ValidationError(f"{at}.$exists takes True or False, got {operand!r}")
        return Leaf(field, op, operand)
    if op in _LISTS:
        if not isinstance(operand, (list, tuple)) or not operand:
            raise ValidationError(f"{at}.{op} takes a non-empty list of values, got {operand!r}")
        if len(operand) > MAX_LEAVES:
            raise ValidationError(f"{at}.{op} takes at most {MAX_LEAVES} values")
        return Leaf(field, op, tuple(_scalar(v, f"{at}.{op}") for v in operand))
    value = _scalar(operand, f"{at}.{op}")
    if op in ("$gt", "$gte", "$lt", "$lte") and _kind(value) not in ("number", "string"):
        raise ValidationError(f"{at}.{op} compares numbers or strings, got {value!r}")
    return Leaf(field, op, value)


# -- the reference rule --------------------------------------------------------------------------


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "other"  # an array or an object


def _equal(stored: Any, value: Scalar) -> bool:
    kind = _json_kind(stored)
    if kind != _kind(value):
        return False
    if kind == "null":
        return True
    return bool(stored == value)


def _leaf_matches(leaf: Leaf, session: str | None, metadata: Mapping[str, Any]) -> bool:
    if leaf.field == ("session",):
        if leaf.op == "$eq":
            return session == leaf.value
        assert isinstance(leaf.value, tuple)
        return session in leaf.value
    key = leaf.field[1]
    present = key in metadata
    stored = metadata.get(key)
    op, value = leaf.op, leaf.value
    if op == "$exists":
        return present is value
    if op == "$eq":
        return present and _equal(stored, value)  # type: ignore[arg-type]
    if op == "$ne":
        return not (present and _equal(stored, value))  # type: ignore[arg-type]
    if op == "$in":
        return present and any(_equal(stored, v) for v in value)  # type: ignore[union-attr]
    if op == "$nin":
        return not (present and any(_equal(stored, v) for v in value))  # type: ignore[union-attr]
    if not present or _json_kind(stored) != _kind(value) or _kind(value) not in ("number", "string"):  # type: ignore[arg-type]
        return False
    a: Any = stored  # (of one kind, number or string: checked above)
    b: Any = value
    if op == "$gt":
        return bool(a > b)
    if op == "$gte":
        return bool(a >= b)
    if op == "$lt":
        return bool(a < b)
    return bool(a <= b)


# -- the SQL forms ---------------------------------------------------------------------------------

_SQL_OP = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}


def _bind(params: dict[str, Any], value: Any) -> str:
    name = f"w_{len(params)}"
    params[name] = value
    return name


def _leaf_sql(leaf: Leaf, a: str, p: Any, dialect: Dialect, params: dict[str, Any]) -> str:
    if leaf.field == ("session",):
        values = leaf.value if isinstance(leaf.value, tuple) else (leaf.value,)
        marks = ", ".join(p(_bind(params, v)) for v in values)
        return f"coalesce({a}.session IN ({marks}), {_false(dialect)})"
    key = leaf.field[1]
    if dialect == "sqlite":
        return _sqlite_leaf(leaf, a, p(_bind(params, '$."' + key + '"')), p, params)
    return _pg_leaf(leaf, a, p(_bind(params, key)), p, params)


def _false(dialect: Dialect) -> str:
    return "0" if dialect == "sqlite" else "false"


def _sqlite_eq(a: str, path: str, value: Scalar, p: Any, params: dict[str, Any]) -> str:
    """True or false, never NULL: `IS` compares NULL as a value."""
    kind = f"json_type({a}.metadata, {path})"
    if value is None:
        return f"({kind} IS 'null')"
    if isinstance(value, bool):
        return f"({kind} IS '{'true' if value else 'false'}')"
    v = p(_bind(params, value))
    if isinstance(value, str):
        return f"({kind} IS 'text' AND json_extract({a}.metadata, {path}) IS {v})"
    return f"coalesce({kind} IN ('integer', 'real') AND json_extract({a}.metadata, {path}) = {v}, 0)"


def _sqlite_leaf(leaf: Leaf, a: str, path: str, p: Any, params: dict[str, Any]) -> str:
    op, value = leaf.op, leaf.value
    kind = f"json_type({a}.metadata, {path})"
    if op == "$exists":
        return f"({kind} IS {'NOT ' if value else ''}NULL)"
    if op in ("$eq", "$ne"):
        test = _sqlite_eq(a, path, value, p, params)  # type: ignore[arg-type]
        return test if op == "$eq" else f"(NOT {test})"
    if op in ("$in", "$nin"):
        assert isinstance(value, tuple)
        test = "(" + " OR ".join(_sqlite_eq(a, path, v, p, params) for v in value) + ")"
        return test if op == "$in" else f"(NOT {test})"
    v = p(_bind(params, value))
    kinds = "'text'" if isinstance(value, str) else "'integer', 'real'"
    return f"coalesce({kind} IN ({kinds}) AND json_extract({a}.metadata, {path}) {_SQL_OP[op]} {v}, 0)"


def _pg_eq(a: str, key: str, value: Scalar, p: Any, params: dict[str, Any]) -> str:
    # jsonb equality is typed (1 = 1.0, never "1" or true), and `IS NOT DISTINCT FROM` reads a
    # missing key (SQL NULL) as a value that equals nothing.
    v = p(_bind(params, json.dumps(value)))
    return f"(({a}.metadata -> {key}) IS NOT DISTINCT FROM {v}::jsonb)"


def _pg_leaf(leaf: Leaf, a: str, key: str, p: Any, params: dict[str, Any]) -> str:
    op, value = leaf.op, leaf.value
    if op == "$exists":
        return f"(({a}.metadata -> {key}) IS {'NOT ' if value else ''}NULL)"
    if op in ("$eq", "$ne"):
        test = _pg_eq(a, key, value, p, params)  # type: ignore[arg-type]
        return test if op == "$eq" else f"(NOT {test})"
    if op in ("$in", "$nin"):
        assert isinstance(value, tuple)
        test = "(" + " OR ".join(_pg_eq(a, key, v, p, params) for v in value) + ")"
        return test if op == "$in" else f"(NOT {test})"
    v = p(_bind(params, value))
    # CASE evaluates the cast only for a value of the right kind (an AND may evaluate either side
    # first, and a text that is not a number would raise). Strings compare by code point (C).
    if isinstance(value, str):
        got = f"CASE WHEN jsonb_typeof({a}.metadata -> {key}) = 'string' THEN ({a}.metadata ->> {key}) END"
        return f'coalesce({got} COLLATE "C" {_SQL_OP[op]} {v}::text COLLATE "C", false)'
    got = f"CASE WHEN jsonb_typeof({a}.metadata -> {key}) = 'number' THEN ({a}.metadata ->> {key})::float8 END"
    return f"coalesce({got} {_SQL_OP[op]} {v}::float8, false)"


# -- metadata values ---------------------------------------------------------------------------------

#: the most characters one memory's metadata may take as JSON
METADATA_CHARS = 16_000
#: the deepest a metadata value may nest
METADATA_DEPTH = 8


def check_metadata(value: object, limit: int = METADATA_CHARS) -> dict[str, Any]:
    """`value` as a memory's metadata: a mapping of checked keys (`check_key`) to JSON values
    (nested lists and objects allowed, at most `METADATA_DEPTH` deep), at most `limit` characters
    as JSON; a copy, so a caller's later change does not reach it. None is ``{}``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError(f"metadata must be a mapping (a JSON object), got {type(value).__name__}")
    out = {check_key(k): _json_value(v, f"metadata[{k!r}]", 1) for k, v in value.items()}
    size = len(json.dumps(out, ensure_ascii=False, separators=(",", ":")))
    if size > limit:
        raise ValidationError(
            f"metadata is {size:,} characters as JSON, more than the limit of {limit:,} "
            "(keep large data in the content or a ref, or raise the engine's Limits)"
        )
    return out


def _json_value(value: object, where: str, depth: int) -> Any:
    if depth > METADATA_DEPTH:
        raise ValidationError(f"{where} nests deeper than {METADATA_DEPTH} levels")
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ValidationError(f"{where}: object keys must be str, got {k!r}")
            out[k] = _json_value(v, f"{where}[{k!r}]", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_json_value(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, str):  # any length: the size limit holds the whole
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise ValidationError(f"{where}: {value[:40]!r} is not valid Unicode text") from None
        return value
    return _scalar(value, where)


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """The stored form: compact JSON (``{}`` for none)."""
    return json.dumps(metadata, ensure_ascii=False, separators=(",", ":")) if metadata else "{}"


def read_metadata(stored: object) -> dict[str, Any]:
    """A stored metadata value (JSON text on SQLite, a decoded jsonb on PostgreSQL) as a dict."""
    if stored is None or stored == "{}" or stored == "":
        return {}
    if isinstance(stored, str):
        return dict(json.loads(stored))
    out: dict[str, Any] = dict(stored)  # type: ignore[call-overload]
    return out


def context_of(session: str | None, metadata: Mapping[str, Any]) -> str:
    """A memory's session and metadata as one canonical text (keys sorted): dedup reinforces only
    a memory of the same context (a restatement in another conversation is its own memory)."""
    return json.dumps([session, metadata], sort_keys=True, ensure_ascii=False, separators=(",", ":"))


__all__ = [
    "METADATA_CHARS",
    "Leaf",
    "Where",
    "check_key",
    "check_metadata",
    "check_session",
    "context_of",
    "metadata_json",
    "read_metadata",
]

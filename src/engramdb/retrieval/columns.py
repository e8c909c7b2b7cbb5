"""Visibility attributes of cached memories as arrays, so a reader's visible set is one vector mask.

Both in-memory candidate channels (lexical and vector) keep these columns beside their index and
mask with the `Visibility` rule *before* anything is ranked; `mask` is the array form of that rule,
as `engramdb.storage.sqlite.visibility.predicate` is its SQL form (a property test holds them equal).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from engramdb.memories.model import Visibility
from engramdb.vectors.npz import with_room


class KeySet:
    """The keys a `Visibility.where` admits, resolved by one query of the store
    (`MemoryRows.visible_keys`), for the array masks that hold no metadata. Compared and hashed by
    identity: each recall resolves its own, so no cache keeps a mask of another recall's set."""

    __slots__ = ("_rows", "keys")

    def __init__(self, keys: Iterable[int]) -> None:
        self.keys = np.unique(np.fromiter(keys, dtype=np.int64))
        self._rows: dict[int, tuple[int, npt.NDArray[np.bool_]]] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def __repr__(self) -> str:
        return f"KeySet({len(self.keys)} keys)"

    def mask(
        self, locate: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]], n: int, owner: object
    ) -> npt.NDArray[np.bool_]:
        """The rows [0, n) of a cache that hold one of these keys; `locate` gives a cache's rows of
        keys (−1 for a key it does not hold). Kept per cache (`owner`) for the recall's later masks."""
        memo = self._rows.get(id(owner))
        if memo is not None and memo[0] == n:
            return memo[1]
        rows = locate(self.keys)
        rows = rows[(rows >= 0) & (rows < n)]
        out = np.zeros(n, dtype=np.bool_)
        out[rows] = True
        self._rows[id(owner)] = (n, out)
        return out


def restrict(
    mask: npt.NDArray[np.bool_],
    vis: Visibility,
    locate: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]],
    owner: object,
) -> npt.NDArray[np.bool_]:
    """`mask` (a fresh array over a cache's rows) narrowed to the keys `vis.only` holds, if any;
    `locate` maps keys to the cache's rows (−1 for none), `owner` is the cache."""
    if vis.only is not None:
        mask &= vis.only.mask(locate, len(mask), owner)
    elif vis.where is not None:
        raise AssertionError("a Visibility with a filter reached an array mask unresolved (Recaller resolves it)")
    return mask


class Codes:
    """Small integer codes for strings (tenants, owners, types), so masks are integer comparisons."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {"": 0}

    def get(self, value: str) -> int:
        code = self._codes.get(value)
        if code is None:
            code = self._codes[value] = len(self._codes)
        return code

    def find(self, value: str) -> int:
        return self._codes.get(value, -1)

    def names(self) -> list[str]:
        """The strings by code (``names()[code]``)."""
        return list(self._codes)

    @classmethod
    def of(cls, names: list[str]) -> Codes:
        """Codes from `names` (as `names` returned them): ValueError unless "" is code 0 and names are distinct."""
        if not names or names[0] != "" or len(set(names)) != len(names) or not all(isinstance(x, str) for x in names):
            raise ValueError("not a list of codes")
        out = cls()
        out._codes = {name: i for i, name in enumerate(names)}
        return out


class VisibilityColumns:
    """tenant, owner, confidentiality, archived, validity and type of each cached row."""

    def __init__(self, capacity: int = 1024) -> None:
        #: bumped by every `set`; the cached masks are only valid for the version they were made at
        self.version = 0
        self._masks: dict[tuple[object, ...], npt.NDArray[np.bool_]] = {}
        self._bounded: npt.NDArray[np.intp] | None = None
        self.codes = Codes()  # tenants and owners
        self.types = Codes()
        self.tenant = np.zeros(capacity, dtype=np.int32)
        self.owner = np.zeros(capacity, dtype=np.int32)
        self.level = np.zeros(capacity, dtype=np.int8)
        # A row never set (a gap in the keys) is archived, so it is never visible.
        self.archived = np.ones(capacity, dtype=np.bool_)
        self.vfrom = np.full(capacity, np.nan)
        self.vto = np.full(capacity, np.nan)
        self.type = np.zeros(capacity, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.tenant)

    def grow(self, need: int) -> None:
        cap = len(self.tenant)
        if need <= cap:
            return
        new = max(need, cap * 2)

        def grown(a: npt.NDArray[np.generic], fill: float) -> npt.NDArray[np.generic]:
            out = np.full(new, fill, dtype=a.dtype)
            out[:cap] = a
            return out

        self.tenant, self.owner = grown(self.tenant, 0), grown(self.owner, 0)  # type: ignore[assignment]
        self.level, self.archived = grown(self.level, 0), grown(self.archived, 1)  # type: ignore[assignment]
        self.vfrom, self.vto = grown(self.vfrom, np.nan), grown(self.vto, np.nan)
        self.type = grown(self.type, 0)  # type: ignore[assignment]

    def set(
        self,
        row: int,
        tenant: str,
        owner: str,
        level: int,
        archived: bool,
        valid_from: float | None,
        valid_to: float | None,
        mtype: str,
    ) -> None:
        self.tenant[row] = self.codes.get(tenant)
        self.owner[row] = self.codes.get(owner)
        self.level[row] = level
        self.archived[row] = archived
        self.vfrom[row] = math.nan if valid_from is None else valid_from
        self.vto[row] = math.nan if valid_to is None else valid_to
        self.type[row] = self.types.get(mtype)
        self.version += 1

    _ARRAYS = ("tenant", "owner", "level", "archived", "vfrom", "vto", "type")
    #: what a row never set holds (archived: never visible)
    _FILL: ClassVar[dict[str, Any]] = {
        "tenant": 0, "owner": 0, "level": 0, "archived": True, "vfrom": np.nan, "vto": np.nan, "type": 0,
    }  # fmt: skip

    def to_arrays(self, n: int) -> dict[str, npt.NDArray[Any]]:
        """Rows [0, n) of every column as ``col_<name>`` arrays (views), for a side file; the
        string codes go with them as `codes_state`."""
        return {f"col_{name}": getattr(self, name)[:n] for name in self._ARRAYS}

    def codes_state(self) -> dict[str, list[str]]:
        """The string codes (tenants and owners, types), JSON-ready."""
        return {"codes": self.codes.names(), "types": self.types.names()}

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.NDArray[Any]], state: Mapping[str, Any], n: int) -> VisibilityColumns:
        """Columns from `to_arrays` and `codes_state`, with room for `n` rows (rows past the
        arrays stay archived). ValueError when they do not fit together."""
        out = cls(1024 if n < 1024 else 1)
        for name in cls._ARRAYS:
            a = np.asarray(arrays[f"col_{name}"])
            mine = getattr(out, name)
            if a.dtype != mine.dtype or a.ndim != 1 or len(a) > max(n, 1024):
                raise ValueError(f"column {name} is {a.dtype} x {a.shape}")
            if n < 1024:
                mine[: len(a)] = a
            elif len(a) == n and a.flags.writeable and a.flags.c_contiguous:
                # A fresh array just read from the file: adopted, not copied, with any room behind it.
                setattr(out, name, with_room(a, cls._FILL[name]))
            else:
                raise ValueError(f"column {name} has {len(a)} rows, not {n}")
        out.codes, out.types = Codes.of(list(state["codes"])), Codes.of(list(state["types"]))
        top = max(len(out.codes.names()), len(out.types.names()))
        if len(out.tenant) and (
            int(out.tenant.max()) >= top or int(out.owner.max()) >= top or int(out.type.max()) >= top
        ):
            raise ValueError("a column holds a code the side file does not name")
        return out

    def hide(self, row: int) -> None:
        """Make `row` invisible to every reader (its memory lost its text or vector)."""
        self.archived[row] = True
        self.version += 1

    def visible(self, vis: Visibility, n: int, types: Iterable[str] | None = None) -> npt.NDArray[np.bool_]:
        """`mask`, cached: the mask without `as_of` is kept per reader until a row changes, and the
        validity test is then applied only to the rows that have validity bounds (few, usually).
        Returns a fresh array the caller may change."""
        tkey = tuple(sorted(types)) if types is not None else None
        key = (
            self.version, n, vis.tenant, vis.reader, int(vis.cap), vis.cross_agent, vis.include_archived, vis.own_only,
            tkey,
        )  # fmt: skip
        base = self._masks.get(key)
        if base is None:
            if len(self._masks) >= 16 or any(k[0] != self.version or k[1] != n for k in self._masks):
                self._masks.clear()
                self._bounded = None
            base = self._masks[key] = self.mask(dataclasses.replace(vis, as_of=None), n, types)
        m = base.copy()
        if vis.as_of is not None:
            if self._bounded is None:
                self._bounded = np.flatnonzero(~np.isnan(self.vfrom[:n]) | ~np.isnan(self.vto[:n]))
            rows = self._bounded
            if len(rows):
                vf, vt = self.vfrom[rows], self.vto[rows]
                with np.errstate(invalid="ignore"):
                    valid = (np.isnan(vf) | (vf <= vis.as_of)) & (np.isnan(vt) | (vt > vis.as_of))
                m[rows[~valid]] = False
        return m

    def set_many(self, rows: npt.NDArray[np.int64], values: Sequence[Sequence[Any]]) -> None:
        """`set` for many rows at once: `values` are (tenant, owner, level, archived, valid_from,
        valid_to, type) tuples in the order of `rows`."""
        if not len(rows):
            return
        tenant, owner, level, archived, vfrom, vto, mtype = zip(*values, strict=True)
        # Few distinct strings in many rows: code each once (in first-seen order), then look up.
        codes = {v: self.codes.get(v) for v in dict.fromkeys(tenant + owner)}
        tcodes = {t: self.types.get(t) for t in dict.fromkeys(mtype)}
        self.tenant[rows] = [codes[t] for t in tenant]
        self.owner[rows] = [codes[o] for o in owner]
        self.level[rows] = level
        self.archived[rows] = [bool(a) for a in archived]
        self.vfrom[rows] = [math.nan if v is None else v for v in vfrom]
        self.vto[rows] = [math.nan if v is None else v for v in vto]
        self.type[rows] = [tcodes[t] for t in mtype]
        self.version += 1

    def mask(self, vis: Visibility, n: int, types: Iterable[str] | None = None) -> npt.NDArray[np.bool_]:
        """Rows [0, n) that `vis` may see (and of `types`, when given): the `Visibility` rule as arrays."""
        return self._rule(vis, slice(0, n), types)

    def mask_at(
        self, vis: Visibility, rows: npt.NDArray[np.int64], types: Iterable[str] | None = None
    ) -> npt.NDArray[np.bool_]:
        """`mask` at `rows` only (same rule, same code): for a caller that has a few candidate rows
        and must not pay for a mask over every row."""
        return self._rule(vis, rows, types)

    def _rule(
        self, vis: Visibility, at: slice | npt.NDArray[np.int64], types: Iterable[str] | None
    ) -> npt.NDArray[np.bool_]:
        owner = self.owner[at]
        m = (self.tenant[at] == self.codes.find(vis.tenant)) & (self.level[at] <= int(vis.cap))
        if vis.own_only:
            m &= owner == self.codes.find(vis.reader)
        elif not vis.cross_agent:
            m &= (owner == 0) | (owner == self.codes.find(vis.reader))
        if not vis.include_archived:
            m &= ~self.archived[at]
        if vis.as_of is not None:
            vf, vt = self.vfrom[at], self.vto[at]
            with np.errstate(invalid="ignore"):
                m &= (np.isnan(vf) | (vf <= vis.as_of)) & (np.isnan(vt) | (vt > vis.as_of))
        if types is not None:
            codes = [self.types.find(t) for t in types]
            kinds = self.type[at]
            m &= (kinds == codes[0]) if len(codes) == 1 else np.isin(kinds, codes)
        return np.asarray(m, dtype=np.bool_)

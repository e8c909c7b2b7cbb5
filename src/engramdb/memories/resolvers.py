"""Resolvers of memory references: a registry by kind, the file resolver, and resolving one hit's
refs (no storage; `engramdb.memories.references.resolve_refs` logs what it resolved).

See `engramdb.memories.references` for what references are and how recall uses them.
"""

from __future__ import annotations

import codecs
import datetime as dt
import os
import re
import stat
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Protocol, TypeAlias

from engramdb.errors import ValidationError
from engramdb.memories.model import MemoryRef, check_path
from engramdb.retrieval.results import Hit

#: ref kinds that are engine state, not pointers; never resolved
RESERVED_KINDS = frozenset({"trigger"})

_KIND = re.compile(r"[a-z][a-z0-9_.-]{0,31}")
_MAX_REASON = 200


class Resolver(Protocol):
    """Turns a reference key into the live text it points at.

    `resolve` returns text (str) or raises; any exception means "not available now" and the
    caller falls back to the stored preview. It should be quick and side-effect free: it runs
    during recall, outside any transaction.
    """

    def resolve(self, key: str) -> str: ...


ResolverLike: TypeAlias = Resolver | Callable[[str], str]


@dataclass(frozen=True, slots=True)
class ResolvedRef:
    """One reference read at recall time: the live text, or the preview marked stale with the reason."""

    ref: MemoryRef
    text: str
    live: bool
    reason: str | None = None  # why the live read failed (None when live)
    truncated: bool = False

    @property
    def stale(self) -> bool:
        return not self.live

    def note(self) -> str:
        """The note added to a hit: ``"ref <kind>:<key> (live): <text>"`` or ``"… (stale …): <preview>"``."""
        head = f"ref {self.ref.kind}:{self.ref.key}"
        if self.live:
            state = "live, truncated" if self.truncated else "live"
        else:
            when = self.ref.captured_at
            captured = (
                "captured "
                + dt.datetime.fromtimestamp(when, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
                if isinstance(when, (int, float)) and not isinstance(when, bool) and 0 <= when <= 253_402_300_799
                else "capture time unknown"
            )
            state = f"stale preview, {captured}; {self.reason}"
        body = self.text if self.text else "(no preview)"
        return f"{head} ({state}): {body}"


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit].rstrip() + "…", True)


class ReferenceResolvers:
    """A registry of resolvers by reference kind; thread-safe.

    Each resolver call gets `timeout` seconds (default 5): a slower one is given up — its
    preview is used, marked stale, "timed out" — so that a hung ticket tracker cannot hang a
    recall. The call itself cannot be killed: it goes on in one of at most `MAX_STUCK` background
    threads; while they are all busy, further calls time out at once.

    Example::

        resolvers = ReferenceResolvers()
        resolvers.register("file", FileResolver(workspace))
        resolvers.register("ticket", lambda key: tickets[key].title)
        resolvers.resolve(MemoryRef("ticket", "T-7", "login broken")).text
    """

    def __init__(self, resolvers: Mapping[str, ResolverLike] | None = None, *, timeout: float | None = 5.0) -> None:
        if timeout is not None and (
            isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600
        ):
            raise ValidationError(f"timeout must be seconds in (0, 3600] or None, got {timeout!r}")
        #: seconds one resolver call may take before its preview is used (None: wait as long as it takes)
        self.timeout = timeout
        self._lock = threading.Lock()
        self._by_kind: dict[str, Callable[[str], str]] = {}
        self._pool: ThreadPoolExecutor | None = None
        if resolvers is not None and not isinstance(resolvers, Mapping):
            raise ValidationError(
                f"resolvers must be a mapping of reference kind to resolver, or None, got {type(resolvers).__name__}"
            )
        for kind, resolver in (resolvers or {}).items():
            self.register(kind, resolver)

    def register(self, kind: str, resolver: ResolverLike, *, replace: bool = False) -> None:
        """Use `resolver` (an object with ``resolve(key)``, or a callable ``key -> str``) for refs of `kind`.

        `kind` is lower case ``[a-z][a-z0-9_.-]*`` (at most 32 characters) and not a reserved kind
        (``trigger``). Registering a kind twice is a `ValidationError` unless `replace`.
        """
        if not isinstance(kind, str) or not _KIND.fullmatch(kind):
            raise ValidationError(
                f"a reference kind is lower case [a-z][a-z0-9_.-]*, at most 32 characters; got {kind!r}"
            )
        if kind in RESERVED_KINDS:
            raise ValidationError(f"{kind!r} refs are engine state and are never resolved")
        method = getattr(resolver, "resolve", None)
        fn: Callable[[str], str]
        if callable(method):
            fn = method
        elif callable(resolver):
            fn = resolver
        else:
            raise ValidationError(
                f"a resolver has a resolve(key) method or is a callable, got {type(resolver).__name__}"
            )
        with self._lock:
            if kind in self._by_kind and not replace:
                raise ValidationError(f"a resolver for {kind!r} is already registered; pass replace=True")
            self._by_kind[kind] = fn

    def unregister(self, kind: str) -> None:
        """Forget the resolver of `kind` (a no-op when there is none)."""
        with self._lock:
            self._by_kind.pop(kind, None)

    def get(self, kind: str) -> Callable[[str], str] | None:
        """The resolver function of `kind`, or None."""
        return self._by_kind.get(kind)

    def kinds(self) -> tuple[str, ...]:
        """The registered kinds, sorted."""
        return tuple(sorted(self._by_kind))

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_kind

    def resolve(self, ref: MemoryRef, *, max_chars: int = 2000) -> ResolvedRef:
        """Read `ref` now: the resolver's text (clipped to `max_chars`), or its preview marked stale.

        Never raises for a resolver's failure: that is what the stale fallback is for. Logs nothing.
        """
        fn = None if ref.kind in RESERVED_KINDS else self.get(ref.kind)
        preview, cut = _clip(ref.preview, max_chars)
        if fn is None:
            return ResolvedRef(ref, preview, False, f"no resolver for kind {ref.kind!r}", cut)
        try:
            text = self._call(fn, ref.key)
        except TimeoutError:
            return ResolvedRef(ref, preview, False, f"resolver timed out after {self.timeout:g} s", cut)
        except Exception as exc:  # any failure of foreign code means "not available now"
            reason = f"resolver failed: {type(exc).__name__}: {exc}"[:_MAX_REASON]
            return ResolvedRef(ref, preview, False, reason, cut)
        if not isinstance(text, str):
            return ResolvedRef(ref, preview, False, f"resolver returned {type(text).__name__}, not text", cut)
        live, cut = _clip(text, max_chars)
        return ResolvedRef(ref, live, True, None, cut)

    def _call(self, fn: Callable[[str], str], key: str) -> object:
        if self.timeout is None:
            return fn(key)
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(MAX_STUCK, thread_name_prefix="engramdb-resolver")
            pool = self._pool
        future = pool.submit(fn, key)
        try:
            return future.result(timeout=self.timeout)
        except FutureTimeout:
            future.cancel()  # still queued behind stuck calls: never runs
            raise TimeoutError from None


#: background threads a `ReferenceResolvers` may have in resolver calls at once (stuck ones included)
MAX_STUCK = 4


def _check_max(max_chars: object) -> int:
    if isinstance(max_chars, bool) or not isinstance(max_chars, int) or not 1 <= max_chars <= 1_000_000:
        raise ValidationError(f"max_chars must be an integer from 1 to 1000000, got {max_chars!r}")
    return max_chars


def resolve_hit(hit: Hit, resolvers: ReferenceResolvers, *, max_chars: int = 2000) -> tuple[Hit, list[ResolvedRef]]:
    """`hit` with one note per non-trigger ref (live or stale), and what was resolved; logs nothing."""
    limit = _check_max(max_chars)
    resolved = [resolvers.resolve(r, max_chars=limit) for r in hit.memory.refs if r.kind not in RESERVED_KINDS]
    if not resolved:
        return hit, []
    return replace(hit, notes=(*hit.notes, *(r.note() for r in resolved))), resolved


class FileResolver:
    """Resolves ``file`` refs: the key is a path relative to `root`, read as text up to `max_bytes`.

    Refuses (`ValidationError`) keys that are empty, absolute (POSIX or Windows, drive letters
    included), contain a ``..`` component or a NUL, or that resolve — through symlinks anywhere on
    the path — to somewhere outside `root`. Reads only regular files (no FIFOs, devices or
    directories), opening the checked path one directory at a time without following any symlink,
    so a directory swapped for a symlink after the check fails the read (where the OS offers
    ``dir_fd``; elsewhere only the final component is protected). A file larger
    than `max_bytes` is cut at a character boundary and marked; text that does not decode is a
    `ValidationError`. OS errors keep their type (`FileNotFoundError`, …) with a message that
    names the key but not the host path.

    Example::

        resolvers.register("file", FileResolver("/srv/workspace", max_bytes=32_768))
    """

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = 64 * 1024, encoding: str = "utf-8") -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or not 1 <= max_bytes <= 16 * 1024 * 1024:
            raise ValidationError(f"max_bytes must be an integer from 1 to 16 MiB, got {max_bytes!r}")
        try:
            codecs.lookup(encoding)
        except (LookupError, TypeError, ValueError):
            raise ValidationError(f"unknown text encoding {encoding!r}") from None
        try:
            resolved = Path(check_path("root", root)).resolve(strict=True)
        except (OSError, RuntimeError):
            raise ValidationError(f"the file resolver root {os.fspath(root)!r} does not exist") from None
        if not resolved.is_dir():
            raise ValidationError(f"the file resolver root {os.fspath(root)!r} is not a directory")
        self.root = resolved
        self.max_bytes = max_bytes
        self.encoding = encoding

    def __repr__(self) -> str:
        return f"FileResolver({str(self.root)!r}, max_bytes={self.max_bytes})"

    def path_for(self, key: str) -> Path:
        """The real path `key` names under the root, or `ValidationError` if it is refused."""
        if not isinstance(key, str) or not key.strip():
            raise ValidationError("a file reference key is a non-empty relative path")
        if "\x00" in key:
            raise ValidationError("a file reference key cannot contain NUL")
        win = PureWindowsPath(key)
        if PurePosixPath(key).is_absolute() or win.is_absolute() or win.drive or key.startswith(("/", "\\")):
            raise ValidationError(f"file reference {key!r} is absolute; keys are relative to the resolver root")
        if ".." in re.split(r"[\\/]", key):
            raise ValidationError(f"file reference {key!r} contains '..'; keys may not climb out of the root")
        try:
            real = (self.root / key).resolve()
        except (OSError, RuntimeError):  # a symlink loop
            raise ValidationError(f"file reference {key!r} does not resolve (symlink loop?)") from None
        if not real.is_relative_to(self.root):
            raise ValidationError(f"file reference {key!r} resolves outside the resolver root (through a symlink)")
        return real

    def _open(self, path: Path) -> int:
        """Open the checked `path` for reading: from the root, one component at a time, none followed
        if it is a symlink (with ``dir_fd``), so the path read is the path checked."""
        nofollow = getattr(os, "O_NOFOLLOW", 0)
        flags = os.O_RDONLY | nofollow | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
        parts = path.relative_to(self.root).parts
        if os.open not in os.supports_dir_fd or not nofollow or not parts:
            return os.open(path, flags)  # (no parts: the root itself, refused as not a regular file)
        directory = os.open(self.root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            for part in parts[:-1]:
                inner = os.open(part, os.O_RDONLY | nofollow | getattr(os, "O_DIRECTORY", 0), dir_fd=directory)
                os.close(directory)
                directory = inner
            return os.open(parts[-1], flags, dir_fd=directory)
        finally:
            os.close(directory)

    def resolve(self, key: str) -> str:
        """The text of the file `key` names (see the class docstring for what is refused)."""
        path = self.path_for(key)
        try:
            fd = self._open(path)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot open file reference {key!r}: {exc.strerror}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise ValidationError(f"file reference {key!r} is not a regular file")
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read(self.max_bytes + 1)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot read file reference {key!r}: {exc.strerror}") from None
        finally:
            os.close(fd)
        cut = len(data) > self.max_bytes
        decoder = codecs.getincrementaldecoder(self.encoding)(errors="strict")
        try:
            text = decoder.decode(data[: self.max_bytes], final=not cut)
        except UnicodeDecodeError:
            raise ValidationError(f"file reference {key!r} is not {self.encoding} text") from None
        return text + f"\n[… cut at {self.max_bytes} bytes]" if cut else text

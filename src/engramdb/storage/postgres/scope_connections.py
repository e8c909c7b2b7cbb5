"""The connections of every raw-SQL scope of one backend: as many as the load needs, not one per scope.

Each scope logs in as a role of its own (`engramdb.storage.postgres.roles`), so its connections
cannot be shared with another scope. A pool per scope with a connection kept open in each (and
a worker thread each) made 2,000 agents' private scopes 2,000 server connections and 4,000
threads, past PostgreSQL's default of 100 connections near the 95th scope. Here one
`ScopeConnections` per backend holds them all:

- at most `cap` connections open at once over all scopes (`PostgresSettings.scope_connections`);
- a statement borrows an idle connection of its scope's role, else opens one while fewer than
  `cap` are open, else closes the least recently used idle connection of another scope and opens
  one in its place, else waits for one to be given back (`timeout`, then `BackendError`);
- an idle connection is closed after `idle_timeout` seconds (checked whenever one is borrowed or
  given back: no thread of its own);
- a connection given back broken, or not idle after its rollback, is closed, never reused;
- a connection closed is counted open until its server session has ended (`_close` waits for the
  server to close its end, up to `CLOSE_WAIT` seconds): the server's backend outlives the
  client's socket by the time it takes to exit, and a replacement opened in that window made
  2 processes of cap 20 show 41 sessions of scope roles at once (`benchmarks/bench_scopes.py`).

A scope's connection is still its role's alone, so the server's isolation (grants, the role's
own schema) is exactly what it was; the scope escape suites run over this.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import pq

from engramdb.errors import BackendError

Conn = psycopg.Connection[Any]

#: the longest `_close` waits for the server to end a closed connection's session
CLOSE_WAIT = 2.0


@dataclass(frozen=True, slots=True)
class ScopeConnectionStats:
    """What `ScopeConnections.stats` reports."""

    open: int
    idle: int
    cap: int
    opened: int
    closed_idle: int
    taken_over: int


class ScopeConnections:
    """Every scope connection of one backend (see the module docstring)."""

    def __init__(self, cap: int = 20, idle_timeout: float = 60.0, timeout: float = 30.0) -> None:
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"the scope connection cap must be a whole number of 1 or more, got {cap!r}")
        self.cap = cap
        self.idle_timeout = float(idle_timeout)
        self.timeout = float(timeout)
        self._cond = threading.Condition()
        #: idle connections, least recently given back first: token -> (scope key, connection, since)
        self._idle: OrderedDict[int, tuple[object, Conn, float]] = OrderedDict()
        self._open = 0  # open connections, idle or borrowed, and those being opened
        self._opened = self._closed_idle = self._taken_over = 0

    def borrow(self, key: object, connect: Callable[[], Conn], *, label: str) -> Conn:
        """A connection of scope `key` (`connect` opens a new one), for the caller alone until
        `give_back`."""
        deadline = time.monotonic() + self.timeout
        while True:
            doomed: list[Conn] = []
            with self._cond:
                expired = self._expired()
                conn = self._take_idle(key)
                if conn is None:
                    if self._open < self.cap:
                        self._open += 1
                    elif self._idle:
                        _, (_, other, _) = self._idle.popitem(last=False)  # another scope's, least recent
                        doomed.append(other)
                        self._taken_over += 1
                    else:
                        left = deadline - time.monotonic()
                        if left <= 0:
                            raise BackendError(
                                f"no connection for scope '{label}' came free in {self.timeout:g} s: all "
                                f"{self.cap} scope connections of this engine are in use (raise "
                                "PostgresSettings.scope_connections, or end long transactions sooner)"
                            )
                        self._cond.wait(left)
                        continue
            self._retire(expired)
            _close(doomed)  # (the connection taken over: its slot goes to the one opened below)
            if conn is not None:
                if conn.closed or conn.broken:
                    self._forget(conn)
                    continue
                return conn
            try:
                fresh = connect()
            except BaseException:
                with self._cond:
                    self._open -= 1
                    self._cond.notify()
                raise
            with self._cond:
                self._opened += 1
            return fresh

    def give_back(self, key: object, conn: Conn) -> None:
        """Return `conn`, borrowed for scope `key` (rolled back first when a transaction is open)."""
        if not conn.closed and conn.info.transaction_status != pq.TransactionStatus.IDLE:
            with contextlib.suppress(psycopg.Error):
                conn.execute("ROLLBACK")
        if conn.closed or conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            self._forget(conn)
            return
        with self._cond:
            self._idle[id(conn)] = (key, conn, time.monotonic())
            doomed = self._expired()
            self._cond.notify()
        self._retire(doomed)

    def drop(self, key: object) -> None:
        """Close every idle connection of scope `key` (the scope was closed)."""
        with self._cond:
            tokens = [t for t, (k, _, _) in self._idle.items() if k == key]
            doomed = [self._idle.pop(t)[1] for t in tokens]
        self._retire(doomed)

    def close(self) -> None:
        """Close every idle connection (borrowed ones close when given back)."""
        with self._cond:
            doomed = [c for _, c, _ in self._idle.values()]
            self._idle.clear()
        self._retire(doomed)

    def stats(self) -> ScopeConnectionStats:
        with self._cond:
            return ScopeConnectionStats(
                self._open, len(self._idle), self.cap, self._opened, self._closed_idle, self._taken_over
            )

    # -- under the lock ------------------------------------------------------------------------

    def _take_idle(self, key: object) -> Conn | None:
        for token in reversed(self._idle):  # the most recently given back of this scope
            k, conn, _ = self._idle[token]
            if k == key:
                del self._idle[token]
                return conn
        return None

    def _expired(self) -> list[Conn]:
        """Take out the connections idle past `idle_timeout` (the caller `_retire`s them)."""
        now = time.monotonic()
        doomed = []
        while self._idle:
            token, (_, conn, since) = next(iter(self._idle.items()))
            if now - since < self.idle_timeout:
                break
            del self._idle[token]
            doomed.append(conn)
        self._closed_idle += len(doomed)
        return doomed

    # -- not under the lock --------------------------------------------------------------------

    def _retire(self, conns: list[Conn]) -> None:
        """Close `conns` (taken out of `_idle`), then stop counting them: their slots free only once
        their server sessions are gone."""
        if not conns:
            return
        _close(conns)
        with self._cond:
            self._open -= len(conns)
            self._cond.notify_all()

    def _forget(self, conn: Conn) -> None:
        """`conn` is broken (or closed): it no longer counts."""
        self._retire([conn])


def _close(conns: list[Conn]) -> None:
    """Close each of `conns` and wait, up to `CLOSE_WAIT` seconds, for the server to end its
    session: a duplicate of the socket stays open past libpq's close until the server closes its
    end, which a backend does after it has left ``pg_stat_activity`` and the connection count."""
    for conn in conns:
        peer = None
        with contextlib.suppress(psycopg.Error, OSError, ValueError):
            if not conn.closed and not conn.broken:
                peer = socket.socket(fileno=os.dup(conn.fileno()))
        with contextlib.suppress(psycopg.Error, OSError):
            conn.close()
        if peer is None:
            continue
        try:
            peer.settimeout(CLOSE_WAIT)
            while peer.recv(4096):
                pass
        except OSError:
            pass
        finally:
            peer.close()


__all__ = ["ScopeConnectionStats", "ScopeConnections"]

"""A network that goes silent never hangs a PostgreSQL call.

Between the engine and the test server sits a TCP proxy this test runs on loopback. Freezing it
stops every byte in both directions without closing a socket — the partition that sends no reset
— so the engine's sockets stay open and its kernel keeps them looking healthy. Every call must come
back (an answer or a `BackendError`) within a bound set by the engine's settings, and the store
must work again once the network is back.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest

from engramdb import BackendError, DynamicMemoryEngine
from engramdb.errors import EngramError
from engramdb.testing import FixedClock

pytestmark = pytest.mark.postgres_only

#: settings small enough for a test: a call waiting 0.5 s has the engine check the server answers
PROBE_AFTER = 0.5
CONNECT_TIMEOUT = 2.0  # libpq's floor
STATEMENT_BUDGET = 1.0
#: the longest any call may take while the network is frozen (the bound below, with room for a slow machine)
BOUND = 12.0


class FreezableProxy:
    """Forwards each TCP connection on a loopback port to the server's socket; `freeze` stops
    forwarding (nothing read, nothing closed), `thaw` resumes."""

    def __init__(self, target: tuple[int, str | tuple[str, int]]) -> None:
        self._family, self._address = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._running = threading.Event()
        self._running.set()
        self._closing = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def freeze(self) -> None:
        self._running.clear()

    def thaw(self) -> None:
        self._running.set()

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._running.wait()  # a frozen network does not answer a new connection either
            server = socket.socket(self._family, socket.SOCK_STREAM)
            try:
                server.connect(self._address)
            except OSError:
                client.close()
                continue
            self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        pair = {a: b, b: a}
        try:
            while not self._closing:
                self._running.wait()
                ready, _, _ = select.select([a, b], [], [], 0.05)
                if not self._running.is_set():
                    continue  # frozen between the wait and the select: leave the bytes unread
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    pair[s].sendall(data)
        except OSError:
            return
        finally:
            for s in (a, b):
                with contextlib.suppress(OSError):
                    s.close()

    def close(self) -> None:
        self._closing = True
        self._running.set()
        self._listener.close()
        for s in self._sockets:
            with contextlib.suppress(OSError):
                s.close()


def _target(url: str) -> tuple[int, str | tuple[str, int]]:
    """Where the test server listens: its unix socket (pgserver), or host and port."""
    parts = urlsplit(url)
    host = parse_qs(parts.query).get("host", [parts.hostname or ""])[0]
    port = parts.port or 5432
    if host.startswith("/"):
        return socket.AF_UNIX, f"{host}/.s.PGSQL.{port}"
    return socket.AF_INET, (host or "127.0.0.1", port)


def _through(url: str, port: int) -> str:
    """`url` (its user, password and database) reaching the server through 127.0.0.1:`port`."""
    parts = urlsplit(url)
    user = parts.username or "postgres"
    password = f":{parts.password}" if parts.password else ""
    return f"postgresql://{user}{password}@127.0.0.1:{port}{parts.path}"


@pytest.fixture
def proxied() -> Iterator[tuple[FreezableProxy, str]]:
    from tests.pg_server import fresh_database

    with fresh_database() as url:
        proxy = FreezableProxy(_target(url))
        try:
            yield proxy, _through(url, proxy.port)
        finally:
            proxy.close()


def _timed(call: object) -> tuple[float, object]:
    start = time.monotonic()
    try:
        out: object = call()  # type: ignore[operator]
    except EngramError as exc:
        out = exc
    return time.monotonic() - start, out


def test_a_frozen_network_fails_every_call_in_bounded_time_and_the_store_recovers(
    proxied: tuple[FreezableProxy, str],
) -> None:
    from engramdb.storage.postgres import PostgresBackend
    from engramdb.storage.postgres.connection import PostgresSettings

    proxy, url = proxied
    settings = PostgresSettings(
        probe_after=PROBE_AFTER, connect_timeout=CONNECT_TIMEOUT, statement_timeout=STATEMENT_BUDGET,
        pool_timeout=5.0, keepalives_idle=1, keepalives_interval=1, keepalives_count=2, tcp_user_timeout=3.0,
    )  # fmt: skip
    eng = DynamicMemoryEngine(PostgresBackend(url, settings), clock=FixedClock(1_800_000_000.0), memory_embedder=None)
    try:
        me = eng.agent("alice")
        me.remember("The release train leaves on Thursdays")
        shared = me.shared
        shared.execute("CREATE TABLE shared_notes (id integer PRIMARY KEY, body text)")
        shared.execute("INSERT INTO shared_notes VALUES (1, 'before the partition')")
        assert [h.memory.content for h in me.recall("release train").hits][:1] == [
            "The release train leaves on Thursdays"
        ]

        proxy.freeze()
        calls = {
            "remember": lambda: me.remember("Written while the network is down"),
            "recall": lambda: me.recall("release train"),
            "scope read": lambda: shared.query("SELECT body FROM shared_notes"),
            "scope write": lambda: shared.execute("INSERT INTO shared_notes VALUES (2, 'during')"),
            "get": lambda: me.memories(),
        }
        for name, call in calls.items():
            took, out = _timed(call)
            print(f"frozen network: {name} came back in {took:.2f} s with {type(out).__name__}")
            assert took < BOUND, (name, took)
            assert isinstance(out, BackendError), (name, out)
            assert "did not answer" in str(out) or "connection" in str(out), (name, out)

        proxy.thaw()
        deadline = time.monotonic() + 30
        while True:  # the pool replaces the connections the partition broke
            try:
                me.remember("Written after the network came back")
                break
            except BackendError:
                assert time.monotonic() < deadline, "the store did not recover"
                time.sleep(0.2)
        assert "Written after the network came back" in [m.content for m in me.memories()]
        assert shared.query("SELECT body FROM shared_notes ORDER BY id")[0] == ("before the partition",)
        shared.execute("INSERT INTO shared_notes VALUES (3, 'after')")
    finally:
        proxy.thaw()
        eng.close()


def test_a_slow_statement_on_a_server_that_answers_is_not_cut(proxied: tuple[FreezableProxy, str]) -> None:
    from engramdb.storage.postgres import PostgresBackend
    from engramdb.storage.postgres.connection import PostgresSettings

    _, url = proxied
    settings = PostgresSettings(probe_after=PROBE_AFTER, connect_timeout=CONNECT_TIMEOUT)
    backend = PostgresBackend(url, settings)
    eng = DynamicMemoryEngine(backend, clock=FixedClock(1_800_000_000.0), memory_embedder=None)
    try:
        store = backend.store
        # An engine call that takes 3 s on a live server: probed, found answering, left to finish.
        took, out = _timed(lambda: store.run("<store>", lambda c: c.execute("SELECT pg_sleep(3)").fetchone()))
        assert not isinstance(out, EngramError), out
        assert 2.9 < took < BOUND
        assert store.liveness.probes >= 1 and store.liveness.cut == 0
    finally:
        eng.close()


def test_the_url_wins_over_the_engines_network_defaults() -> None:
    from engramdb.storage.postgres.connection import PostgresSettings

    given = PostgresSettings().network_options("postgresql://u@db/x?keepalives_idle=60&tcp_user_timeout=5000")
    assert "keepalives_idle" not in given and "tcp_user_timeout" not in given
    assert given["keepalives"] == 1 and given["keepalives_interval"] == 5 and given["connect_timeout"] == 10
    assert PostgresSettings(connect_timeout=0.5).network_options("postgresql://u@db/x")["connect_timeout"] == 2
    with pytest.raises(ValueError):
        PostgresSettings(probe_after=0)
    with pytest.raises(ValueError):
        PostgresSettings(keepalives_count=0)

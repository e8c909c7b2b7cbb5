"""Serving the inspector with uvicorn on 127.0.0.1: in the foreground (the CLI) or in a thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import TYPE_CHECKING

import uvicorn

from engramdb.errors import BackendError, ValidationError
from engramdb.inspector.app import Inspector

if TYPE_CHECKING:
    from engramdb.agent import Agent

HOST = "127.0.0.1"  # never another address: the inspector is for the person at this machine


class InspectorServer:
    """The inspector of `agent` served on 127.0.0.1:`port` (0: a free port the system picks).

    The socket is bound when the server is made, so `url` (with the token) is known at once.
    """

    def __init__(self, agent: Agent, *, port: int = 0, token: str | None = None) -> None:
        if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValidationError(f"port must be 0 (any free port) to 65535, got {port!r}")
        self.inspector = Inspector(agent, token=token)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((HOST, port))
        except OSError as exc:
            self._sock.close()
            raise BackendError(
                f"cannot listen on {HOST}:{port} ({exc.strerror}); pick another --port, or 0 for any free one"
            ) from None
        # Listening now, not when the server starts: the address is printed before `run`, and a
        # browser (or script) quick to open it would be refused; connections wait in the backlog.
        self._sock.listen(128)
        self.port: int = self._sock.getsockname()[1]
        config = uvicorn.Config(self.inspector.app, log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The address to open, with the access token."""
        return f"http://{HOST}:{self.port}/?token={self.inspector.token}"

    @property
    def base(self) -> str:
        """The address without the token (what a request without it is refused at)."""
        return f"http://{HOST}:{self.port}"

    def run(self) -> None:
        """Serve until the process is stopped (Ctrl-C)."""
        self._server.run(sockets=[self._sock])

    def start(self, timeout: float = 10.0) -> str:
        """Serve in a background thread; returns `url` once the server answers."""
        self._thread = threading.Thread(target=self.run, name="engramdb-inspector", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise BackendError("the inspector's server did not start")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        """Stop a server started with `start` and wait for it."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._sock.close()

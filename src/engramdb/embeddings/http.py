"""JSON over HTTP for the model servers (embeddings, rerankers), with the standard library alone.

`JsonEndpoint` POSTs a JSON body to one URL and returns the response body, retrying what may pass
(connection errors, timeouts, HTTP 408/429/5xx, honouring ``Retry-After`` up to a minute) and
turning everything else into the caller's typed error with a message that says what to do. The
URL shown in messages never carries the query string (which may hold a key) or credentials.
"""

from __future__ import annotations

import json
import math
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from engramdb.errors import ConfigError

__all__ = ["JsonEndpoint", "endpoint", "is_int", "is_real", "quote"]

#: HTTP statuses worth another try: rate limited, or the server failed or is starting up.
RETRIED = frozenset({408, 429, 500, 502, 503, 504})
#: the longest wait one retry honours from a ``Retry-After`` header, in seconds
MAX_RETRY_AFTER = 60.0
#: the most characters of a server's error body quoted in a message
QUOTE = 300


class JsonEndpoint:
    """One endpoint: `post(body)` returns the raw response body or raises `error(message, status)`.

    Args:
        url: where requests go (with its query string, if any).
        shown: the same without the query string, for messages.
        key: sent as ``Authorization: Bearer <key>`` when not None.
        timeout: seconds to wait for one response.
        retries: further tries after a connection error, a timeout, 408, 429 or a 5xx.
        backoff: seconds before the first retry, doubled after each.
        sleep: how to wait between retries.
        error: makes the caller's exception from a message and the HTTP status (None when the
            server was not reached).
        not_found: what an HTTP 404 most likely means for this kind of server.
    """

    def __init__(
        self,
        url: str,
        shown: str,
        *,
        key: str | None,
        timeout: float,
        retries: int,
        backoff: float,
        sleep: Callable[[float], None],
        error: Callable[[str, int | None], Exception],
        not_found: str,
    ) -> None:
        self.url, self.shown, self.key = url, shown, key
        self.timeout, self.retries, self.backoff, self.sleep = timeout, retries, backoff, sleep
        self.error, self.not_found = error, not_found

    def post(self, body: dict[str, Any]) -> bytes:
        """POST `body`, retrying what may pass; the response body."""
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.key is not None:
            headers["Authorization"] = f"Bearer {self.key}"
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            wait = self.backoff * 2**attempt
            request = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw: bytes = response.read()
                    return raw
            except urllib.error.HTTPError as exc:
                status, said, retry_after = exc.code, _server_said(exc), exc.headers.get("Retry-After")
                exc.close()
                if status in RETRIED and not last:
                    self.sleep(_retry_after(retry_after, wait))
                    continue
                raise self._http_error(status, said, attempts=attempt + 1) from None
            except OSError as exc:  # URLError, refused or reset connections, timeouts
                if not last:
                    self.sleep(wait)
                    continue
                tries = f" ({attempt + 1} tries)" if attempt else ""
                raise self.error(_unreachable(exc, self.timeout) + tries, None) from None
        raise AssertionError("unreachable: the last try returns or raises")

    def _http_error(self, status: int, said: str, *, attempts: int) -> Exception:
        quoted = f"; the server said: {said}" if said else ""
        if status in (401, 403):
            key = "the API key was refused" if self.key is not None else "it wants an API key and none was given"
            return self.error(f"answered HTTP {status}: {key} (pass api_key= or api_key_env=){quoted}", status)
        if status == 404:
            return self.error(f"answered HTTP 404: {self.not_found}{quoted}", status)
        tries = f" after {attempts} tries" if attempts > 1 else ""
        return self.error(f"answered HTTP {status}{tries}{quoted}", status)


def endpoint(base_url: object, path: str, example: str) -> tuple[str, str]:
    """The URL ``base_url + path``, and the same without its query (which may hold a key) for
    messages; `ConfigError` for anything but an http(s) URL without credentials."""
    if not isinstance(base_url, str):
        raise ConfigError(f"base_url must be a URL string, got {type(base_url).__name__}")
    parts = urllib.parse.urlsplit(base_url.strip())
    if "@" in parts.netloc:  # never echoed: it holds a password
        raise ConfigError("base_url must not carry credentials (user:password@host); pass api_key= or api_key_env=")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        shown = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))
        raise ConfigError(f"base_url must be an http(s) URL ending at /v1, e.g. {example}; got {shown!r}")
    full = parts.path.rstrip("/") + path
    url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, full, parts.query, ""))
    return url, urllib.parse.urlunsplit((parts.scheme, parts.netloc, full, "", ""))


def quote(text: object) -> str:
    """`text` on one line, at most `QUOTE` characters, as a repr."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    s = " ".join(str(text).split())
    return repr(s if len(s) <= QUOTE else s[:QUOTE] + "…")


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _unreachable(exc: BaseException, timeout: float) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"did not answer within {timeout:g} s (a slow model? raise timeout=)"
    if isinstance(reason, ConnectionRefusedError):
        return "is not reachable: the connection was refused (is the server running, at that host and port?)"
    if isinstance(reason, socket.gaierror):
        return f"is not reachable: its host name does not resolve ({reason})"
    return f"is not reachable: {reason}"


def _server_said(exc: urllib.error.HTTPError) -> str:
    """The error message of an HTTP error's body (OpenAI's ``{"error": {"message": ...}}``)."""
    try:
        raw = exc.read()
    except OSError:
        return ""
    try:
        payload = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return quote(raw) if raw.strip() else ""
    error = payload.get("error", payload) if isinstance(payload, dict) else payload
    message = error.get("message", error) if isinstance(error, dict) else error
    return quote(message if isinstance(message, str) else json.dumps(message))


def _retry_after(header: str | None, default: float) -> float:
    try:
        seconds = float(header) if header is not None else default
    except ValueError:  # an HTTP date: rare for these servers; keep the backoff
        return default
    return min(max(seconds, 0.0), MAX_RETRY_AFTER) if math.isfinite(seconds) else default

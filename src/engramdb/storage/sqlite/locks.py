"""Cross-process advisory locks on small files beside the SQLite file (one reflection run per tenant).

The OS releases a lock when its process dies, so a crash never leaves a stale lock.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from engramdb.errors import BackendError, TransactionError

if sys.platform == "win32":  # pragma: no cover - exercised on Windows only
    import msvcrt

    def _try_lock(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(fd: int) -> bool:
        # flock locks belong to the open file description: a second open() of the file conflicts
        # even within one process (so threads are covered), and the OS drops it when the process dies.
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def _unlock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_UN)


def lock_path(db_path: Path, tenant: str) -> Path:
    """The lock file of reflection runs on `tenant` in the database at `db_path`."""
    digest = hashlib.blake2b(tenant.encode(), digest_size=8).hexdigest()
    return db_path.with_name(f"{db_path.name}.reflect-{digest}.lock")


@contextlib.contextmanager
def tenant_lock(db_path: Path, tenant: str, holder: str) -> Iterator[None]:
    path = lock_path(db_path, tenant)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise BackendError(
            f"cannot open the reflection lock file {path} ({exc.strerror}); nothing was changed: "
            + ("the disk is full, free some space and retry" if exc.errno == errno.ENOSPC else "check the folder")
        ) from None
    try:
        if not _try_lock(fd):
            try:
                who = path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
            except OSError:
                who = "unknown"
            raise TransactionError(
                f"a reflection is already running on tenant {tenant!r} (held by {who}); "
                "nothing was changed: run it again when that one has finished"
            )
        try:
            if sys.platform != "win32":
                # Who holds the lock only explains a refusal to others; a full disk must not stop
                # the run here (its writes then fail with the database's own error).
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
                    os.write(fd, f"{holder} pid {os.getpid()}".encode())
            yield
        finally:
            _unlock(fd)
    finally:
        os.close(fd)

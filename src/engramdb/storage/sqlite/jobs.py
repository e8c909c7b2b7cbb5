"""The extraction queue on SQLite (``engram_jobs``): claims serialise on the file's write lock."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from engramdb.storage.memory_rows import JOB_COLUMNS, job_of
from engramdb.storage.ports import Job
from engramdb.storage.sqlite.connection import SqliteStore, translated


class SqliteJobs:
    """`engramdb.storage.ports.ExtractionJobs` over ``engram_jobs``."""

    def __init__(self, store: SqliteStore) -> None:
        self._store = store

    def _db(self) -> sqlite3.Connection:
        return self._store.connection("engine").raw

    @translated
    def add(self, job: Job) -> None:
        self._db().execute(
            "INSERT INTO engram_jobs (tenant, job_id, agent, memory_ids, created_at, status, attempts, not_before) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (job.tenant, job.job_id, job.agent, json.dumps(list(job.memory_ids)), job.created_at, job.status,
             job.attempts, job.not_before),
        )  # fmt: skip

    @translated
    def claim(self, *, worker: str, now: float, lease: float, limit: int, tenant: str | None = None) -> list[Job]:
        db = self._db()
        where = "status = 'pending' AND not_before <= ? AND (lease_until IS NULL OR lease_until <= ?)"
        params: list[Any] = [now, now]
        if tenant is not None:
            where += " AND tenant = ?"
            params.append(tenant)
        due = db.execute(
            f"SELECT tenant, job_id FROM engram_jobs WHERE {where} ORDER BY not_before, created_at, job_id LIMIT ?",  # noqa: S608 - constant column lists and conditions, values bound
            (*params, limit),
        ).fetchall()
        got: list[Job] = []
        for t, jid in due:
            db.execute(
                "UPDATE engram_jobs SET worker = ?, lease_until = ?, attempts = attempts + 1 "
                "WHERE tenant = ? AND job_id = ?",
                (worker, now + lease, t, jid),
            )
            got.append(self._one(db, t, jid))
        return got

    @staticmethod
    def _one(db: sqlite3.Connection, tenant: str, job_id: str) -> Job:
        row = db.execute(f"SELECT {JOB_COLUMNS} FROM engram_jobs WHERE tenant = ? AND job_id = ?", (tenant, job_id))  # noqa: S608 - constant column lists and conditions, values bound
        return job_of(row.fetchone())

    @translated
    def finish(self, tenant: str, job_id: str, worker: str, now: float, decisions: Sequence[Mapping[str, Any]]) -> bool:
        cur = self._db().execute(
            "UPDATE engram_jobs SET status = 'done', done_at = ?, decisions = ?, lease_until = NULL, last_error = NULL "
            "WHERE tenant = ? AND job_id = ? AND worker = ? AND status = 'pending'",
            (now, json.dumps(list(decisions)), tenant, job_id, worker),
        )
        return cur.rowcount == 1

    @translated
    def release(
        self, tenant: str, job_id: str, worker: str, *, error: str, retry_at: float, failed: bool, now: float
    ) -> bool:
        cur = self._db().execute(
            "UPDATE engram_jobs SET status = ?, not_before = ?, lease_until = NULL, worker = NULL, last_error = ?, "
            "done_at = ? WHERE tenant = ? AND job_id = ? AND worker = ? AND status = 'pending'",
            ("failed" if failed else "pending", retry_at, error, now if failed else None, tenant, job_id, worker),
        )
        return cur.rowcount == 1

    @translated
    def get(self, tenant: str, job_id: str) -> Job | None:
        row = (
            self._db()
            .execute(f"SELECT {JOB_COLUMNS} FROM engram_jobs WHERE tenant = ? AND job_id = ?", (tenant, job_id))  # noqa: S608 - constant column lists and conditions, values bound
            .fetchone()
        )
        return None if row is None else job_of(row)

    @translated
    def listing(
        self, tenant: str | None = None, *, agent: str | None = None, statuses: Sequence[str] = ("pending", "failed")
    ) -> list[Job]:
        if not statuses:
            return []
        where = f"status IN ({', '.join('?' * len(statuses))})"
        params: list[Any] = list(statuses)
        if tenant is not None:
            where += " AND tenant = ?"
            params.append(tenant)
        if agent is not None:
            where += " AND agent = ?"
            params.append(agent)
        rows = self._db().execute(
            f"SELECT {JOB_COLUMNS} FROM engram_jobs WHERE {where} ORDER BY created_at, job_id",  # noqa: S608 - constant column list and conditions, values bound
            params,
        )
        return [job_of(r) for r in rows]

    @translated
    def requeue(self, tenant: str, now: float, job_ids: Sequence[str] | None = None) -> int:
        sql = (
            "UPDATE engram_jobs SET status = 'pending', attempts = 0, not_before = ?, done_at = NULL, "
            "worker = NULL, lease_until = NULL WHERE tenant = ? AND status = 'failed'"
        )
        params: list[Any] = [now, tenant]
        if job_ids is not None:
            if not job_ids:
                return 0
            sql += f" AND job_id IN ({', '.join('?' * len(job_ids))})"
            params.extend(job_ids)
        return int(self._db().execute(sql, params).rowcount)

    @translated
    def set_decisions(self, tenant: str, job_id: str, decisions: Sequence[Mapping[str, Any]]) -> None:
        self._db().execute(
            "UPDATE engram_jobs SET decisions = ? WHERE tenant = ? AND job_id = ?",
            (json.dumps(list(decisions)), tenant, job_id),
        )

    @translated
    def delete(self, tenant: str, agent: str | None = None) -> int:
        if agent is None:
            return int(self._db().execute("DELETE FROM engram_jobs WHERE tenant = ?", (tenant,)).rowcount)
        cur = self._db().execute("DELETE FROM engram_jobs WHERE tenant = ? AND agent = ?", (tenant, agent))
        return int(cur.rowcount)

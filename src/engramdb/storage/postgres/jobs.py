"""The extraction queue on PostgreSQL (``engram.engram_jobs``): a claim is one UPDATE over the due
rows taken ``FOR UPDATE SKIP LOCKED``, so concurrent workers never get the same job and never wait
on each other's claims."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from engramdb.storage.memory_rows import JOB_COLUMNS, job_of
from engramdb.storage.ports import Job
from engramdb.storage.postgres.connection import ALL_TENANTS, PgStore

_J = ", ".join(f"j.{c.strip()}" for c in JOB_COLUMNS.split(","))


class PgJobs:
    """`engramdb.storage.ports.ExtractionJobs` over ``engram.engram_jobs`` (row-level security by tenant)."""

    def __init__(self, store: PgStore) -> None:
        self._store = store

    def _rows(self, tenant: str, query: str, params: Any) -> list[tuple[Any, ...]]:
        def go(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            cur = db.execute(query, params)
            return list(cur.fetchall()) if cur.description else []

        return self._store.run(tenant, go)

    def _count(self, tenant: str, query: str, params: Any) -> int:
        def go(db: psycopg.Connection[Any]) -> int:
            return int(db.execute(query, params).rowcount)

        return self._store.run(tenant, go)

    def add(self, job: Job) -> None:
        self._count(
            job.tenant,
            "INSERT INTO engram.engram_jobs (tenant, job_id, agent, memory_ids, created_at, status, attempts, "
            "not_before) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (job.tenant, job.job_id, job.agent, json.dumps(list(job.memory_ids)), job.created_at, job.status,
             job.attempts, job.not_before),
        )  # fmt: skip

    def claim(self, *, worker: str, now: float, lease: float, limit: int, tenant: str | None = None) -> list[Job]:
        only = "" if tenant is None else " AND tenant = %s"
        params: list[Any] = [worker, now + lease, now, now]
        if tenant is not None:
            params.append(tenant)
        params.append(limit)
        rows = self._rows(
            ALL_TENANTS if tenant is None else tenant,
            "UPDATE engram.engram_jobs j SET worker = %s, lease_until = %s, attempts = j.attempts + 1 "  # noqa: S608 - constant column lists and conditions, values bound
            "FROM (SELECT tenant, job_id FROM engram.engram_jobs WHERE status = 'pending' AND not_before <= %s "
            f"AND (lease_until IS NULL OR lease_until <= %s){only} ORDER BY not_before, created_at, job_id LIMIT %s "
            f"FOR UPDATE SKIP LOCKED) d WHERE j.tenant = d.tenant AND j.job_id = d.job_id RETURNING {_J}",
            params,
        )
        return sorted((job_of(r) for r in rows), key=lambda j: (j.not_before, j.created_at, j.job_id))

    def finish(self, tenant: str, job_id: str, worker: str, now: float, decisions: Sequence[Mapping[str, Any]]) -> bool:
        return (
            self._count(
                tenant,
                "UPDATE engram.engram_jobs SET status = 'done', done_at = %s, decisions = %s, lease_until = NULL, "
                "last_error = NULL WHERE tenant = %s AND job_id = %s AND worker = %s AND status = 'pending'",
                (now, json.dumps(list(decisions)), tenant, job_id, worker),
            )
            == 1
        )

    def release(
        self, tenant: str, job_id: str, worker: str, *, error: str, retry_at: float, failed: bool, now: float
    ) -> bool:
        return (
            self._count(
                tenant,
                "UPDATE engram.engram_jobs SET status = %s, not_before = %s, lease_until = NULL, worker = NULL, "
                "last_error = %s, done_at = %s WHERE tenant = %s AND job_id = %s AND worker = %s AND status = 'pending'",
                ("failed" if failed else "pending", retry_at, error, now if failed else None, tenant, job_id, worker),
            )
            == 1
        )

    def get(self, tenant: str, job_id: str) -> Job | None:
        rows = self._rows(
            tenant,
            f"SELECT {JOB_COLUMNS} FROM engram.engram_jobs WHERE tenant = %s AND job_id = %s",  # noqa: S608 - constant column list, values bound
            (tenant, job_id),
        )
        return job_of(rows[0]) if rows else None

    def listing(
        self, tenant: str | None = None, *, agent: str | None = None, statuses: Sequence[str] = ("pending", "failed")
    ) -> list[Job]:
        if not statuses:
            return []
        where = "status = ANY(%s)"
        params: list[Any] = [list(statuses)]
        if tenant is not None:
            where += " AND tenant = %s"
            params.append(tenant)
        if agent is not None:
            where += " AND agent = %s"
            params.append(agent)
        rows = self._rows(
            ALL_TENANTS if tenant is None else tenant,
            f"SELECT {JOB_COLUMNS} FROM engram.engram_jobs WHERE {where} ORDER BY created_at, job_id",  # noqa: S608 - constant column lists and conditions, values bound
            params,
        )
        return [job_of(r) for r in rows]

    def requeue(self, tenant: str, now: float, job_ids: Sequence[str] | None = None) -> int:
        query = (
            "UPDATE engram.engram_jobs SET status = 'pending', attempts = 0, not_before = %s, done_at = NULL, "
            "worker = NULL, lease_until = NULL WHERE tenant = %s AND status = 'failed'"
        )
        params: list[Any] = [now, tenant]
        if job_ids is not None:
            query += " AND job_id = ANY(%s)"
            params.append(list(job_ids))
        return self._count(tenant, query, params)

    def set_decisions(self, tenant: str, job_id: str, decisions: Sequence[Mapping[str, Any]]) -> None:
        self._count(
            tenant,
            "UPDATE engram.engram_jobs SET decisions = %s WHERE tenant = %s AND job_id = %s",
            (json.dumps(list(decisions)), tenant, job_id),
        )

    def delete(self, tenant: str, agent: str | None = None) -> int:
        if agent is None:
            return self._count(tenant, "DELETE FROM engram.engram_jobs WHERE tenant = %s", (tenant,))
        return self._count(tenant, "DELETE FROM engram.engram_jobs WHERE tenant = %s AND agent = %s", (tenant, agent))

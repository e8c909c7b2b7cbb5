"""Agent ids and the table namespaces they own."""

from __future__ import annotations

import hashlib
import re

from engramdb.errors import InvalidAgentId, ValidationError
from engramdb.scopes.namespace import Namespace

#: Lower case, digits and hyphens; no ``_``, so ``private_<id>_`` is never a prefix of another
#: agent's namespace (``a`` vs ``a_b``), and case folding can never merge two agents.
AGENT_ID_RULE = "[a-z0-9][a-z0-9-]{0,62}"
_AGENT_ID = re.compile(AGENT_ID_RULE + r"\Z")

SHARED = Namespace("shared", "shared_")


def check_agent_id(agent_id: object) -> str:
    """Return `agent_id` if it follows the rule, else raise `InvalidAgentId` saying the rule."""
    if not isinstance(agent_id, str) or not _AGENT_ID.match(agent_id):
        shown = repr(agent_id)[:80]
        raise InvalidAgentId(
            f"invalid agent id {shown}: an agent id is 1–63 characters of lower-case a–z, digits "
            "and '-', starting with a letter or digit (no '_', no upper case)"
        )
    return agent_id


def private_namespace(agent_id: str) -> Namespace:
    """The namespace of `agent_id`'s private tables: ``private_<agent_id>_*``."""
    check_agent_id(agent_id)
    return Namespace(f"private:{agent_id}", f"private_{agent_id}_")


def check_tenant(tenant: object) -> str:
    """Return `tenant` if it is a non-empty printable string of at most 128 characters, else `ValidationError`."""
    if not isinstance(tenant, str) or not tenant or len(tenant) > 128 or not tenant.isprintable():
        raise ValidationError(f"tenant must be a non-empty printable string of at most 128 characters, got {tenant!r}")
    if tenant != tenant.strip():
        # " acme" and "acme" would be two tenants that look alike in every listing
        raise ValidationError(f"tenant must not start or end with spaces, got {tenant!r}")
    return tenant


_SLUG = re.compile(r"[^a-z0-9]+")


def tenant_file_name(tenant: str) -> str:
    """The file name of `tenant`'s database: a readable slug and a hash of the exact name.

    Distinct tenant strings get distinct files (the hash is of the exact string, 160 bits), and
    no tenant string can name a path outside the directory.
    """
    slug = _SLUG.sub("-", tenant.casefold()).strip("-")[:40] or "tenant"
    digest = hashlib.blake2b(tenant.encode("utf-8"), digest_size=20).hexdigest()
    return f"{slug}-{digest}.db"

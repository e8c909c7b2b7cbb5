"""The shipped extractor, reconciler and reasoner: one `ChatClient`, one prompt each, versioned.

Each shows the model short aliases (``t1``, ``f1``, ``m1``) instead of memory ids — small models
copy a two-letter name far more reliably than a 24-character id — and maps its answer back; an
alias that was not in the prompt rejects the whole answer (`LLMError`), so nothing of it is
applied. Each `name` is ``"<kind>:<model>@<prompt version>"``, which the access stream records
with every decision. Change a prompt, bump its version.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any

from engramdb.errors import LLMError
from engramdb.llm.client import ChatClient
from engramdb.llm.protocol import Decision
from engramdb.memories.model import Memory

__all__ = ["LLMExtractor", "LLMReasoner", "LLMReconciler"]

EXTRACT_VERSION = "extract-v1"
RECONCILE_VERSION = "reconcile-v1"
ABSTRACT_VERSION = "abstract-v1"

_EXTRACT_SYSTEM = """You keep the long-term memory of an assistant. You are given the turns of a conversation \
(ids t1, t2, ...) and the facts already known that may be related (ids f1, f2, ...).
Decide what the memory should keep, as a list of decisions:
- ADD: a new, lasting fact the turns state about a speaker or the world (preferences, plans, \
relations, events, attributes). One self-contained sentence naming who it is about. "sources": the turn ids stating it.
- UPDATE: a known fact that the turns change or correct ("I moved to Berlin" changes "lives in Paris"). \
"id": the known fact, "fact": the new statement, "sources": the turn ids.
- DELETE: a known fact the turns say is no longer true, with nothing replacing it. "id", "sources".
- NOOP: a known fact the turns only repeat. "id".
Never invent facts the turns do not state; skip greetings and small talk; never use an id you were not given. \
Use "" for an unused fact and null for an unused id."""

_DECISIONS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decisions": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "op": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NOOP"]},
                    "fact": {"type": "string"},
                    "id": {"type": ["string", "null"]},
                    "sources": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["op", "fact", "id", "sources"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["decisions"],
    "additionalProperties": False,
}

_RECONCILE_SYSTEM = """You keep the long-term memory of an assistant. You are given memories of one person \
(ids m1, m2, ...), oldest first. Say which memories state something a later one has replaced \
(a changed address, a new job, a corrected value). Only replacements, not mere differences; never use an id \
you were not given."""

_RECONCILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "superseded": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["old", "new"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["superseded"],
    "additionalProperties": False,
}

_ABSTRACT_SYSTEM = """You keep the long-term memory of an assistant. Summarise the episodes you are given into \
one short paragraph of what they show (who, what, decisions, lasting facts), using only what they say. \
Answer null as the gist when they hold nothing worth keeping."""

_ABSTRACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"gist": {"type": ["string", "null"]}},
    "required": ["gist"],
    "additionalProperties": False,
}


def _when(m: Memory) -> str:
    return dt.datetime.fromtimestamp(m.created_at, dt.UTC).strftime("%Y-%m-%d %H:%M")


class LLMExtractor:
    """`engramdb.llm.protocol.Extractor` over a chat model (prompt ``extract-v1``)."""

    def __init__(self, client: ChatClient) -> None:
        self.client = client

    @property
    def name(self) -> str:
        return f"extractor:{self.client.model}@{EXTRACT_VERSION}"

    def extract(self, turns: Sequence[Memory], known: Sequence[Memory]) -> list[Decision]:
        t_alias = {f"t{i + 1}": m.id for i, m in enumerate(turns)}
        f_alias = {f"f{i + 1}": m.id for i, m in enumerate(known)}
        user = json.dumps(
            {
                "turns": [{"id": a, "at": _when(m), "text": m.content} for a, m in zip(t_alias, turns, strict=True)],
                "known_facts": [{"id": a, "text": m.content} for a, m in zip(f_alias, known, strict=True)],
            },
            ensure_ascii=False,
        )
        answer = self.client.json(_EXTRACT_SYSTEM, user, name="memory_decisions", schema=_DECISIONS_SCHEMA)
        items = answer.get("decisions")
        if not isinstance(items, list):
            raise LLMError(f"the model's answer has no list of decisions: {str(answer)[:200]!r}", self.client.url)
        out: list[Decision] = []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise LLMError(f"decision {i} of the model's answer is not an object", self.client.url)
            op = str(item.get("op", "")).lower()
            fact = item.get("fact")
            target = item.get("id")
            sources = item.get("sources") or []
            if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
                raise LLMError(f"decision {i}: sources must be a list of turn ids", self.client.url)
            unknown = [s for s in sources if s not in t_alias]
            if unknown or (target not in (None, "") and target not in f_alias):
                named = unknown or [target]
                raise LLMError(
                    f"decision {i} names ids it was not given ({', '.join(map(str, named))})", self.client.url
                )
            out.append(
                Decision(
                    op,
                    fact if isinstance(fact, str) and fact.strip() else None,
                    tuple(dict.fromkeys(t_alias[s] for s in sources)),
                    f_alias[target] if target not in (None, "") else None,
                )
            )
        return out


class LLMReconciler:
    """`engramdb.memories.reflection.Reconciler` over a chat model (prompt ``reconcile-v1``)."""

    def __init__(self, client: ChatClient) -> None:
        self.client = client

    @property
    def name(self) -> str:
        return f"reconciler:{self.client.model}@{RECONCILE_VERSION}"

    def reconcile(self, cluster: Sequence[Memory]) -> dict[str, str]:
        alias = {f"m{i + 1}": m.id for i, m in enumerate(cluster)}
        user = json.dumps(
            {"memories": [{"id": a, "at": _when(m), "text": m.content} for a, m in zip(alias, cluster, strict=True)]},
            ensure_ascii=False,
        )
        answer = self.client.json(_RECONCILE_SYSTEM, user, name="superseded", schema=_RECONCILE_SCHEMA)
        pairs = answer.get("superseded")
        if not isinstance(pairs, list):
            raise LLMError("the model's answer has no list 'superseded'", self.client.url)
        out: dict[str, str] = {}
        for pair in pairs:
            old = pair.get("old") if isinstance(pair, Mapping) else None
            new = pair.get("new") if isinstance(pair, Mapping) else None
            if old not in alias or new not in alias:
                raise LLMError(f"the answer names ids it was not given: {pair!r}", self.client.url)
            out[alias[str(old)]] = alias[str(new)]
        return out


class LLMReasoner:
    """`engramdb.memories.reflection.Reasoner` over a chat model (prompt ``abstract-v1``)."""

    def __init__(self, client: ChatClient) -> None:
        self.client = client

    @property
    def name(self) -> str:
        return f"reasoner:{self.client.model}@{ABSTRACT_VERSION}"

    def abstract(self, episodes: Sequence[str]) -> str | None:
        user = json.dumps({"episodes": list(episodes)}, ensure_ascii=False)
        answer = self.client.json(_ABSTRACT_SYSTEM, user, name="gist", schema=_ABSTRACT_SCHEMA)
        gist = answer.get("gist")
        if gist is not None and not isinstance(gist, str):
            raise LLMError("the model's gist is neither text nor null", self.client.url)
        return gist.strip() or None if isinstance(gist, str) else None

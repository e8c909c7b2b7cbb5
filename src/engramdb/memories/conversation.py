"""A conversation in: chat messages (the OpenAI / LangChain shape) stored as one episode per turn.

``agent.remember(messages=[{"role": "user", "content": "I moved to Berlin"}, …], session="chat-42")``
stores each turn as an ``episode`` memory, in one transaction (all or nothing):

- the content is ``"<speaker>: <text>"``, the speaker being the message's ``name`` when given,
  else its role, so a model reading the evidence knows who said what; the speaker is the
  memory's entity (recall's entity lift finds what that speaker said);
- ``metadata`` is the caller's, with ``"role"`` added (unless the caller's metadata names one),
  so ``recall(…, where={"role": "user"})`` reads the user's turns alone;
- ``created_at`` is the message's own time when it carries one (epoch seconds, an aware
  `datetime` or an ISO 8601 text with an offset), else the time of the call;
- consecutive turns are linked ``precedes`` (earlier → later), so recall's spreading reaches the
  turn before and after a hit;
- every turn carries the `session` (a conversation or run id), filterable everywhere.

Turns are never deduplicated: "yes" said twice is two turns. Nothing here calls a model.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from engramdb.errors import ValidationError
from engramdb.memories import model as mm
from engramdb.memories import writing
from engramdb.memories.filters import check_metadata, check_session
from engramdb.memories.model import EdgeType, Memory, MemoryType, Principal
from engramdb.memories.runtime import Runtime
from engramdb.memories.text import id_tokens
from engramdb.storage.ports import Job

#: LangChain message types by the role the OpenAI shape gives them
_LANGCHAIN_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "tool"}
#: the most turns one call stores (a longer transcript goes in several calls)
MAX_TURNS = 10_000
#: the most characters of a role or a speaker name
NAME_CHARS = 100


def _text(content: object, at: str) -> str:
    """A message's text: a str, or the text parts of a list of content parts (OpenAI's
    ``[{"type": "text", "text": …}, …]``; other parts such as images carry no text to keep)."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, (list, tuple)):
        parts = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif not isinstance(part, Mapping):
                raise ValidationError(f"{at}: content part {i} is a {type(part).__name__}, not a str or a part object")
        text = "\n".join(parts)
    else:
        raise ValidationError(f"{at}: content must be a str or a list of content parts, got {type(content).__name__}")
    if not text.strip():
        raise ValidationError(f"{at} has no text to remember; drop it from the list or give it content")
    return text


def _when(value: object, at: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(f"{at}: created_at {value!r} is not an ISO 8601 date and time") from None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(
                f"{at}: created_at {value.isoformat()} has no time zone; give one (e.g. +00:00) so the turn's time is unambiguous"
            )
        return value.timestamp()
    return mm.check_time(f"{at}: created_at", value)


def _name(value: object, what: str, at: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValidationError(f"{at}: {what} must be a non-empty str, got {value!r}")
    value = value.strip()
    if len(value) > NAME_CHARS or "\n" in value:
        raise ValidationError(f"{at}: {what} is at most {NAME_CHARS} characters on one line")
    return value


def _message(message: object, at: str) -> tuple[str, str | None, str, float | None]:
    """(role, name, text, created_at) of one message: a mapping, or an object with LangChain's
    ``type`` / ``content`` / ``name`` attributes."""
    if isinstance(message, Mapping):
        unknown = set(message) - {"role", "content", "name", "created_at", "tool_call_id", "id"}
        if unknown:
            raise ValidationError(
                f"{at} has unknown field(s) {', '.join(sorted(map(str, unknown)))}; a message takes role, content, "
                "name and created_at"
            )
        if "role" not in message or "content" not in message:
            raise ValidationError(f"{at} needs a role and a content (the OpenAI message shape)")
        role, content, name, when = message["role"], message["content"], message.get("name"), message.get("created_at")
    elif hasattr(message, "content") and isinstance(getattr(message, "type", None), str):
        kind = str(getattr(message, "type", ""))
        role = _LANGCHAIN_ROLES.get(kind, kind)
        content, name = getattr(message, "content", None), getattr(message, "name", None)
        when = None
    else:
        raise ValidationError(f"{at} must be a mapping with role and content, got {type(message).__name__}")
    return (
        _name(role, "role", at),
        None if name is None else _name(name, "name", at),
        _text(content, at),
        _when(when, at),
    )


def remember_messages(
    rt: Runtime,
    who: Principal,
    messages: Iterable[object],
    *,
    session: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    shared: bool = False,
    confidentiality: mm.Confidentiality | int | None = None,
    importance: float | None = None,
    tags: Iterable[str] | None = None,
    force: bool = False,
    extract: bool | None = None,
) -> list[Memory]:
    """Store a conversation, one episode per turn, linked in order, in one transaction; see the
    module docstring. Everything is checked before anything is written. With `extract` (None:
    as the engine is set, `Runtime.extraction`), the same transaction queues the turns for the
    extraction worker (`engramdb.llm.worker`)."""
    if extract is not None and not isinstance(extract, bool):
        raise ValidationError(f"extract must be True, False or None, got {extract!r}")
    queue = rt.extraction if extract is None else extract
    listed: Sequence[object] = list(mm.check_many("messages", messages, "a list of messages"))
    if not listed:
        raise ValidationError("messages is empty: give at least one message")
    if len(listed) > MAX_TURNS:
        raise ValidationError(
            f"at most {MAX_TURNS:,} messages per call, got {len(listed):,}; store the rest in another call"
        )
    sid = None if session is None else check_session(session)
    base = check_metadata(metadata, rt.limits.metadata_chars)
    items: list[dict[str, Any]] = []
    for i, message in enumerate(listed):
        role, name, text, when = _message(message, f"message {i}")
        speaker = name or role
        items.append(
            {
                "content": f"{speaker}: {text}",
                "type": MemoryType.EPISODE,
                "entities": [speaker],
                "session": sid,
                "metadata": base if "role" in base else {**base, "role": role},
                "created_at": when,
                "shared": shared,
                "confidentiality": confidentiality,
                "importance": importance,
                "tags": tags,
            }
        )
    store = rt.store
    with store.atomic():
        keys: list[int] = []
        stored = writing.remember_many(rt, who, items, dedup=False, force=force, keys=keys)
        now = rt.clock()
        edges = [(a, b, EdgeType.PRECEDES.value, 1.0) for a, b in itertools.pairwise(keys)]
        if edges:
            store.edges.put(who.tenant, edges, now=now, by=who.agent_id, replace=False)
        if queue:
            ids = tuple(dict.fromkeys(m.id for m in stored))
            store.jobs.add(Job("j_" + id_tokens(now, 1)[0], who.tenant, who.agent_id, ids, now, not_before=now))
    if queue and rt.on_queued is not None:
        rt.on_queued()
    return stored


__all__ = ["MAX_TURNS", "remember_messages"]

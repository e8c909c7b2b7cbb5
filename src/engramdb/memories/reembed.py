"""Re-embedding: give every memory an agent can see a vector of the engine's current embedder.

A store written with another embedder (or none: ``--embedder none``) has memories the vector
channel cannot rank by meaning; `reembed` embeds them (all of them with ``missing_only=False``),
in chunks, reporting stage ``"embed"`` to `progress`, and stamps them changed so every process's
caches load the new vectors.
"""

from __future__ import annotations

from engramdb.errors import ValidationError
from engramdb.memories.runtime import Acting
from engramdb.memories.writing import embed_texts
from engramdb.progress import Progress, report

#: memories embedded and written per transaction
CHUNK = 512


def reembed(agent: Acting, *, missing_only: bool = True, progress: Progress | None = None) -> int:
    """Embed the memories `agent` can see (archived included) that lack a vector of the current
    embedder (all of them, without `missing_only`); how many were embedded."""
    rt, who = agent._runtime, agent._principal
    embedder = rt.embedder
    if embedder is None:
        raise ValidationError("this engine has no memory embedder (memory_embedder=None); nothing to embed with")
    store = rt.store
    vis = who.visibility(include_archived=True)
    keys = store.memories.visible_keys(vis)
    if missing_only:
        have = {row[0] for row in store.vectors.cache_rows_for(embedder.name, keys) if row[9] is not None}
        keys = [n for n in keys if n not in have]
    total = len(keys)
    report(progress, "embed", 0, total)
    done = 0
    for start in range(0, total, CHUNK):
        chunk = keys[start : start + CHUNK]
        found = store.memories.many(vis, chunk)
        chunk = [n for n in chunk if n in found]
        texts = [f"{found[n].title}. {found[n].content}" if found[n].title else found[n].content for n in chunk]
        vectors = embed_texts(rt, texts)
        with store.atomic():
            store.vectors.put([(n, embedder.name, vectors[i].tobytes()) for i, n in enumerate(chunk)], replace=True)
            # A new change stamp (importance unchanged) makes every cache reload these rows.
            store.memories.set_importance([(found[n].importance, n) for n in chunk], store.changes.next(who.tenant))
        done += len(chunk)
        report(progress, "embed", min(start + CHUNK, total), total)
    rt.drop_vector_file()
    return done


__all__ = ["CHUNK", "reembed"]

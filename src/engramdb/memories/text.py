"""Text and access-time helpers shared by writes and reflection: value fingerprints, "adds nothing
new", the packed access ring, and the tokens new ids are made of. Pure functions, no I/O."""

from __future__ import annotations

import array
import hashlib
import math
import re
import secrets
import unicodedata
from collections.abc import Sequence

from engramdb.retrieval.keywords import STOPWORDS, words

_NON_WORD = re.compile(r"[\W_]+")
_NAME = re.compile(r"\b[A-Z][\w-]*")


def content_hash(text: str) -> str:
    """A value-level fingerprint: NFKC, case-folded, white space and punctuation collapsed."""
    norm = _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return hashlib.blake2b(norm.encode(), digest_size=16).hexdigest()


#: The last second an id's 8-digit stamp can name (2106-02-07); a later clock stamps this one.
_LAST_STAMP = 0xFFFFFFFF


def id_tokens(now: float, count: int) -> list[str]:
    """`count` new id tokens: the second of `now` in 8 hex digits (clamped to 1970-2106; NaN reads
    as 1970), then 16 random hex digits (64 bits from `secrets`, so two tokens of one second
    collide as rarely as the random-only tokens before them did).

    Tokens of one second sort after every earlier second's, so the unique indexes on memory and
    recall ids grow at their end. Random-only ids put each new id on a random page of those
    indexes: at 1M memories that was ~630 of the ~2,200 pages a batch of 1,000 writes to the
    WAL, and ~35 ms of the batch. An id therefore tells when it was minted, to the second; the
    memory's `recorded_at` says as much to anyone who can see it."""
    second = 0 if math.isnan(now) else int(min(max(now, 0.0), float(_LAST_STAMP)))
    randomness = secrets.token_hex(8 * count)
    return [f"{second:08x}{randomness[16 * i : 16 * i + 16]}" for i in range(count)]


def says_nothing_new(new: str, old: str, *, containment: float = 0.9) -> bool:
    """True when `new` adds nothing `old` does not already say: at least `containment` of its
    content words appear in `old`, and every number or identifier and every capitalised name in
    it does too.

    Dedup on write uses this after the cosine test, because a static embedding puts distinct
    facts from one sentence pattern above cosine 0.92 (measured: 75% of same-pattern pairs in the
    benchmark corpus), and a merge would drop the new fact.
    """
    nw = {w for w in words(new) if w not in STOPWORDS}
    ow = set(words(old))
    if not nw:
        return False
    if len(nw & ow) / len(nw) < containment:
        return False
    if any(any(c.isdigit() for c in w) and w not in ow for w in nw):
        return False
    old_names = {m.group(0).lower() for m in _NAME.finditer(old)}
    return all(
        m.group(0).lower() in old_names or m.group(0).lower() in STOPWORDS for m in _NAME.finditer(new) if m.start() > 0
    )


def pack_times(times: Sequence[float]) -> bytes:
    """Access times as float64 (native order) bytes: the access ring as stored."""
    return array.array("d", times).tobytes()


def unpack_times(blob: bytes | None) -> tuple[float, ...]:
    if not blob:
        return ()
    arr = array.array("d")
    arr.frombytes(bytes(blob))
    return tuple(arr)


# "Name: text", the speaker prefix of chat transcripts, meeting notes and agent logs: one to three
# capitalised words (not all capitals: "TODO:", "NB:"), a colon, a space, then the text.
_SPEAKER = re.compile(r"^\s*([A-Z][a-z][\w'’.-]*(?: [A-Z][\w'’.-]*){0,2}): +\S")
#: labels written like a speaker that name no one
_NOT_SPEAKERS = frozenset(
    "answer decision edit error example fix fwd goal idea important issue note note-to-self output "
    "plan problem question quote re reminder result solution source step subject summary task tip "
    "title todo update warning".split()
)


def speaker_of(content: str) -> str | None:
    """The speaker of a ``"Name: text"`` line ("Caroline: I went…" → "Caroline"), else None.

    The rule is generic, not a name list: one to three capitalised words before ``": "`` at the very
    start, not all capitals, not a label such as "Note:" or "Summary:". `remember` makes it the
    memory's entity when the caller gives no `entities` (None; an explicit ``[]`` means none), so
    recall's entity lift (`ScoringConfig.w_entity`) works for transcripts written through the plain
    API: a question naming the speaker lifts what that speaker said, not every turn that says the
    name ("Thanks, Caroline!")."""
    match = _SPEAKER.match(content)
    if match is None:
        return None
    name = match.group(1)
    return None if name.casefold() in _NOT_SPEAKERS else name

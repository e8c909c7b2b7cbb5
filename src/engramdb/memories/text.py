"""Text and access-time helpers shared by writes and reflection: value fingerprints, "the same
statement", the packed access ring, and the tokens new ids are made of. Pure functions, no I/O."""

from __future__ import annotations

import array
import hashlib
import math
import re
import secrets
import unicodedata
from collections.abc import Sequence

_NON_WORD = re.compile(r"[\W_]+")


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
    WAL. An id therefore tells when it was minted, to the second; the
    memory's `recorded_at` says as much to anyone who can see it."""
    second = 0 if math.isnan(now) else int(min(max(now, 0.0), float(_LAST_STAMP)))
    randomness = secrets.token_hex(8 * count)
    return [f"{second:08x}{randomness[16 * i : 16 * i + 16]}" for i in range(count)]


# A token of a statement: a run of letters, digits and the signs that belong to a value ($, %, #,
# @, °, currency), joined by the separators that live inside one ("1,000", "2024-03-05", "v1.2.3",
# "eu-west-1", "3:30", "alice's", "a/b"), so every number, date and version is compared whole, as
# written. "?" is a token too: a question is not the statement it asks about.
# A sign before a digit belongs to its number ("-5" is not "5") unless it joins two tokens.
_TOKEN = re.compile(r"(?:(?<![\w.])[-+−±](?=\d))?[\w$%#@°€£¥₹]+(?:[.,:/'\-][\w$%#@°€£¥₹]+)*|\?")
#: words a restatement may add or drop without saying something else (a capital "A" inside a
#: sentence is a label, "plan A", "grade A", and counts)
_IGNORABLE = frozenset({"a", "an", "the"})
#: unambiguous English contractions, so "isn't" and "is not" are one statement ("'s" and "'d" are
#: not: is/has/possessive, would/had)
_CONTRACTIONS = {
    "won't": ("will", "not"),
    "can't": ("can", "not"),
    "shan't": ("shall", "not"),
    "cannot": ("can", "not"),
}
_SUFFIXES = (("n't", "not"), ("'re", "are"), ("'m", "am"), ("'ve", "have"), ("'ll", "will"))


def statement_tokens(text: str) -> tuple[str, ...]:
    """The tokens two texts must share, in order, to make the same statement (`same_statement`):
    NFKC, case-folded, curly apostrophes straightened, punctuation other than "?" dropped, the
    articles dropped, unambiguous contractions written out. Everything else counts, in its order:
    negations, polarity and direction words, prepositions, every number as written (with its
    separators), dates and versions as whole tokens, who comes before whom."""
    norm = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    shouting = not any(c.islower() for c in norm)
    out: list[str] = []
    for match in _TOKEN.finditer(norm):
        written = match.group(0).strip("'")
        tok = written.casefold()
        if not tok:
            continue
        if tok in _IGNORABLE and (written != "A" or shouting or _starts_sentence(norm, match.start())):
            continue
        whole = _CONTRACTIONS.get(tok)
        if whole is not None:
            out.extend(whole)
            continue
        for suffix, word in _SUFFIXES:
            if tok.endswith(suffix) and len(tok) > len(suffix):
                out.extend((tok[: -len(suffix)], word))
                break
        else:
            out.append(tok)
    return tuple(out)


def _starts_sentence(text: str, at: int) -> bool:
    before = text[:at].rstrip()
    return not before or before[-1] in '.!?:;\n"“(-'


def same_statement(a: str, b: str) -> bool:
    """True when `a` and `b` make the same statement written differently: the same
    `statement_tokens` in the same order (case, white space, punctuation, articles and
    contractions aside).

    Dedup on write folds a new memory into an old one only when this holds (after the cosine
    test, which finds the candidates), and reflection merges only such pairs: anything else, a
    correction ("not allergic"), a change of direction ("up"/"down", "before"/"after"), another
    number, date or version, the same words in another order ("Alice owes Bob" / "Bob owes
    Alice"), or a restatement in other words, is stored beside it; reflection links the two.
    """
    ta = statement_tokens(a)
    return bool(ta) and ta == statement_tokens(b)


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

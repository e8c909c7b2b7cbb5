"""Query keywords and whole-word hit counting (pure)."""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterable

_WORD = re.compile(r"\w+", re.UNICODE)

#: Short English function words; they match almost every row and carry no topic.
STOPWORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
)


def words(text: str) -> list[str]:
    """Lower-cased word tokens of `text` (Unicode letters and digits), after NFKC."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
    return _WORD.findall(text.lower())


def keywords(query: str, *, limit: int = 16) -> list[str]:
    """Distinct content words of `query`, in order, without stopwords (``"Y"`` is kept: names like X and Y matter)."""
    seen: dict[str, None] = {}
    for w in words(query):
        if w in STOPWORDS:
            continue
        seen.setdefault(w, None)
        if len(seen) >= limit:
            break
    return list(seen)


def hits(text: str, kws: Iterable[str]) -> int:
    """How many of the keywords `kws` occur in `text` as whole words."""
    present = set(words(text))
    return sum(1 for k in kws if k in present)


@functools.lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """A light suffix-stripper so that cue overlap matches "rotates" with "rotate" and "keys" with "key".

    Deliberately conservative (plural and -ing/-ed endings only); FTS5's Porter stemmer does the
    heavy lifting for lexical candidates.
    """
    w = word
    if len(w) > 4 and w.endswith("ies"):
        w = w[:-3] + "y"
    elif len(w) > 5 and w.endswith("ing"):
        w = w[:-3]
    elif (len(w) > 4 and w.endswith("ed")) or (len(w) > 3 and w.endswith("es") and w[-3] in "sxz"):
        w = w[:-2]
    elif len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
        w = w[:-1]
    if len(w) > 4 and w.endswith("e"):
        w = w[:-1]
    return w


def cue_terms(*texts: str) -> str:
    """The distinct stems of `texts`, space-separated and sorted: stored with each memory."""
    return " ".join(sorted({stem(w) for t in texts for w in words(t)}))

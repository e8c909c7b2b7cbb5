"""Query keywords and whole-word hit counting (pure)."""

from __future__ import annotations

import functools
import itertools
import re
import unicodedata
from collections.abc import Iterable

import snowballstemmer

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


#: The Snowball English (Porter2) stemmer. Measured on LoCoMo categories 1-4, BM25 recall@10 with
#: it 0.604 against 0.586 with the light suffix-stripper it replaced. snowballstemmer hands out
#: PyStemmer's C build of it (a dependency) when that imports, else its own pure-Python one: the
#: same stems, the C build far faster (new words are stemmed on every write that holds them).
_STEMMER = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=262_144)
def stem(word: str) -> str:
    """The stem of a lower-cased word, so "rotates" matches "rotate" and "keys" matches "key"."""
    return str(_STEMMER.stemWord(word))


def cue_terms(*texts: str) -> str:
    """The distinct stems of `texts` but stopwords', space-separated and sorted: stored with each
    memory for cue overlap and BM25 (queries never ask for a stopword, see `keywords`)."""
    return " ".join(sorted({s for t in texts for w in words(t) if w not in STOPWORDS and (s := stem(w))}))


#: Entity tokens live in the lexical index beside the stems; no stem starts with this character.
ENTITY_MARK = "="
#: the longest entity name, in words, that a query can name (longer labels are stored, never matched)
MAX_ENTITY_WORDS = 6


def entity_token(label: str) -> str | None:
    """The index token of an entity label: its lower-cased words joined ("New York" → "=new+york"),
    so case, punctuation and spacing do not matter; None for a label without a word."""
    ws = words(label)
    return ENTITY_MARK + "+".join(ws) if ws else None


def entity_terms(labels: Iterable[str]) -> str:
    """The entity tokens of `labels`, space-separated, for the lexical index."""
    return " ".join(sorted({t for label in labels if (t := entity_token(label))}))


def query_entity_tokens(query: str) -> list[str]:
    """Every run of 1 to `MAX_ENTITY_WORDS` consecutive words of `query` as an entity token: the
    query names an entity when one of these is the entity's token (a whole-word, case-blind match;
    "Caroline's" names "Caroline")."""
    ws = words(query)
    out: dict[str, None] = {}
    for i in range(len(ws)):
        for j in range(i + 1, min(i + MAX_ENTITY_WORDS, len(ws)) + 1):
            out.setdefault(ENTITY_MARK + "+".join(ws[i:j]), None)
    return list(out)


_CAPITALISED = re.compile(r"(?<![\w'’])([A-Z][\w'’-]*)")
#: Capitalised words that are rarely names: months and weekdays (the date lift reads those) and
#: the pronoun "I".
_NOT_NAMES = frozenset(
    "i january february march april may june july august september october november december "
    "monday tuesday wednesday thursday friday saturday sunday".split()
)


def query_names(query: str) -> list[str]:
    """The stems of the words `query` writes capitalised — names, as English writes them — except
    each sentence's first word (capitalised anyway), stopwords, months, weekdays and "I".
    "What did Caroline's sister say in Paris?" → ["carolin", "pari"]. A generic rule, no name
    list: recall lifts memories holding one (``ScoringConfig.name_focus``), since a name a
    question asks about marks the memories that are about it — including the ``"Name: text"``
    prefix of chat transcripts — more sharply than its IDF in BM25 says."""
    out: dict[str, None] = {}
    for sentence in re.split(r"(?<=[.!?])\s+", query.strip()):
        first = True
        for match in _CAPITALISED.finditer(sentence):
            if first and match.start() == len(sentence) - len(sentence.lstrip(" \"'“‘(")):
                first = False
                continue
            first = False
            for w in words(match.group(1)):
                if w in STOPWORDS or w in _NOT_NAMES or w.isdigit() or len(w) < 2:
                    continue
                out.setdefault(stem(w), None)
    return list(out)


#: Words that date what a memory says relative to when it was said ("last Friday", "two weeks
#: ago", "next month"), as stems: a prior, English's common time expressions (not a fit). "may" is
#: left out: mostly the modal verb.
TIME_WORDS = tuple(
    dict.fromkeys(
        stem(w)
        for w in (
            "yesterday today tonight tomorrow ago last next recently week weekend month year monday tuesday "
            "wednesday thursday friday saturday sunday january february march april june july august "
            "september october november december"
        ).split()
    )
)
_WHEN_PAIRS = frozenset(
    [("how", "long"), *((a, b) for a in ("what", "which") for b in ("year", "month", "day", "date", "week"))]
)


def asks_when(query: str) -> bool:
    """Whether `query` asks for a time: it has the word "when", or "how long", or "what / which"
    followed by year, month, day, date or week ("When did Calvin…", "In what year…")."""
    ws = words(query)
    return "when" in ws or any(pair in _WHEN_PAIRS for pair in itertools.pairwise(ws))

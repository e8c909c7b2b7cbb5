"""Pure-Python BERT WordPiece tokenizer (uncased), matching Hugging Face ``tokenizers``.

It reproduces the pipeline in the teacher's ``tokenizer.json`` (``BertNormalizer`` with
``clean_text``, ``handle_chinese_chars``, ``lowercase`` and accents stripped, then
``BertPreTokenizer``, then greedy longest-match-first ``WordPiece`` with ``##`` continuations
and ``max_input_chars_per_word = 100``), without special tokens ([CLS]/[SEP] are never added,
and text such as ``"[SEP]"`` is split like any other text instead of becoming a control token).

On every LoCoMo text (17,147 distinct strings, 369,826 tokens) the ids equal those of
``tokenizers`` 0.22.2; on random mixed-script strings a few differ where Python's Unicode tables
are newer than the Rust crate's (84 of 20,000 fuzz strings; e.g. U+061D, punctuation only since
Unicode 14).

Speed comes from two things: an ASCII fast path (one ``str.translate`` plus one regex, since
accent stripping and CJK handling are no-ops on ASCII) and a per-word cache of WordPiece ids,
because natural text repeats a few thousand words over and over.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

__all__ = ["WordPieceTokenizer"]

# ASCII punctuation as BERT defines it: every non-alphanumeric printable character.
_ASCII_PUNCT = "".join(chr(c) for c in range(33, 127) if not chr(c).isalnum())
# A word is a run of non-space, non-punctuation characters; each punctuation mark is a word.
_ASCII_WORDS = re.compile(r"[^\s" + re.escape(_ASCII_PUNCT) + r"]+|[" + re.escape(_ASCII_PUNCT) + r"]")
# ASCII clean-up table: control characters are dropped, \t \n \r become spaces. (Rust's
# normaliser drops every "Other" character except \t \n \r before mapping whitespace.)
_ASCII_CLEAN: dict[int, int | None] = {c: None for c in (*range(0, 9), 11, 12, *range(14, 32), 127)}
_ASCII_CLEAN.update({9: 32, 10: 32, 13: 32})

# Code-point ranges of the CJK Unified Ideographs blocks that BERT isolates as single words.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)

# General categories the normaliser deletes (Rust's `is_other()` minus unassigned code points).
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co"})

# Upper bound on cached words; past it the cache is cleared (cheap, and keeps memory bounded
# for adversarial input full of unique tokens).
_CACHE_LIMIT = 200_000


def _is_cjk(cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in _CJK_RANGES)


def _is_whitespace(ch: str) -> bool:
    # Rust's char::is_whitespace (the Unicode White_Space property), which str.isspace()
    # approximates except for the separators \x1c-\x1f that Rust does not count as spaces.
    return ch.isspace() and ch not in "\x1c\x1d\x1e\x1f"


def _is_punctuation(ch: str) -> bool:
    return ch in _ASCII_PUNCT or unicodedata.category(ch).startswith("P")


class WordPieceTokenizer:
    """Uncased BERT WordPiece tokenizer over a fixed vocabulary.

    Args:
        vocab: the tokens in id order (line ``i`` of ``vocab.txt`` is id ``i``).
        unk_token: the token emitted for a word that cannot be split into vocabulary pieces.
        max_input_chars_per_word: words longer than this (in code points) become ``unk_token``.

    `encode` returns ids in ``range(len(vocab))``; it never adds [CLS]/[SEP], is deterministic,
    and may be shared by threads (the word cache changes only by single dict operations, and a
    cached entry is always complete).
    """

    def __init__(self, vocab: Iterable[str], unk_token: str = "[UNK]", max_input_chars_per_word: int = 100) -> None:
        self._tokens: list[str] = list(vocab)
        self._vocab: dict[str, int] = {}
        for i, tok in enumerate(self._tokens):
            self._vocab.setdefault(tok, i)
        if unk_token not in self._vocab:
            raise ValueError(f"unknown token {unk_token!r} is not in the vocabulary")
        self.unk_id: int = self._vocab[unk_token]
        #: the token a word that cannot be split becomes
        self.unk_token = unk_token
        self._max_chars = max_input_chars_per_word
        self._cache: dict[str, tuple[int, ...]] = {}

    @property
    def vocab_size(self) -> int:
        """Number of ids in the vocabulary (one more than the largest id)."""
        return len(self._tokens)

    @property
    def max_input_chars_per_word(self) -> int:
        """Words longer than this (in code points) become `unk_token`."""
        return self._max_chars

    def vocabulary(self) -> list[str]:
        """The tokens in id order (a copy)."""
        return list(self._tokens)

    def token_id(self, token: str) -> int | None:
        """The id of a vocabulary token (``"##ing"`` for a continuation piece), or None."""
        return self._vocab.get(token)

    # -- normalisation and pre-tokenisation ---------------------------------------------------

    @staticmethod
    def _normalise(text: str) -> str:
        """Clean, isolate CJK, strip accents, lowercase: the slow path for non-ASCII text."""
        out: list[str] = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            if ch in "\t\n\r":
                out.append(" ")
                continue
            # Control, format, surrogate and private-use characters are dropped; unassigned
            # code points (Cn) are kept, as the Rust implementation's category tables do.
            if unicodedata.category(ch) in _DROPPED_CATEGORIES:
                continue
            if _is_whitespace(ch):
                out.append(" ")
            elif _is_cjk(cp):
                out.append(f" {ch} ")
            else:
                out.append(ch)
        # Accents are stripped (NFD, drop non-spacing marks) before lowercasing, as in Rust.
        nfd = unicodedata.normalize("NFD", "".join(out))
        # Lowercase code point by code point like Rust's char::to_lowercase: str.lower() on the
        # whole string would apply the context-dependent final-sigma rule, which Rust does not.
        return "".join(c.lower() for c in nfd if unicodedata.category(c) != "Mn")

    @staticmethod
    def _split_words(text: str) -> list[str]:
        """Split normalised text on whitespace and isolate every punctuation character."""
        words: list[str] = []
        current: list[str] = []
        for ch in text:
            if _is_whitespace(ch):
                if current:
                    words.append("".join(current))
                    current = []
            elif _is_punctuation(ch):
                if current:
                    words.append("".join(current))
                    current = []
                words.append(ch)
            else:
                current.append(ch)
        if current:
            words.append("".join(current))
        return words

    def words(self, text: str) -> list[str]:
        """The normalised words (pre-tokens) of ``text``, before WordPiece splitting."""
        if text.isascii():
            return _ASCII_WORDS.findall(text.translate(_ASCII_CLEAN).lower())
        return self._split_words(self._normalise(text))

    # -- WordPiece ----------------------------------------------------------------------------

    def _wordpiece(self, word: str) -> tuple[int, ...]:
        """Greedy longest-match-first split of one word; the whole word is [UNK] if any part fails."""
        if len(word) > self._max_chars:
            return (self.unk_id,)
        vocab = self._vocab
        ids: list[int] = []
        start, n = 0, len(word)
        while start < n:
            end = n
            found: int | None = None
            while start < end:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                found = vocab.get(piece)
                if found is not None:
                    break
                end -= 1
            if found is None:
                return (self.unk_id,)
            ids.append(found)
            start = end
        return tuple(ids)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens); an empty list for blank text."""
        cache = self._cache
        ids: list[int] = []
        for word in self.words(text):
            pieces = cache.get(word)
            if pieces is None:
                pieces = self._wordpiece(word)
                if len(cache) >= _CACHE_LIMIT:
                    cache.clear()
                cache[word] = pieces
            ids.extend(pieces)
        return ids

    def tokenize(self, text: str) -> list[str]:
        """Token strings of ``text`` (for tests and debugging; `encode` is the fast path)."""
        return [self._tokens[i] for i in self.encode(text)]

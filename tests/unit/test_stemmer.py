"""The stems every term is stored and queried by: PyStemmer's C build of Snowball English, which
must give what the pure-Python build gives (stored terms of a file written with either are read by
the other)."""

from __future__ import annotations

import re
from pathlib import Path

from snowballstemmer.english_stemmer import EnglishStemmer

from engramdb.retrieval import keywords

#: words of this repository's own prose (README, docs): thousands of everyday and technical words
_WORDS = re.compile(r"[a-z][a-z']+")


def test_the_c_stemmer_is_used_and_agrees_with_the_pure_python_one() -> None:
    import Stemmer  # PyStemmer, a dependency

    assert isinstance(keywords._STEMMER, Stemmer.Stemmer)
    root = Path(__file__).resolve().parents[2]
    text = " ".join(p.read_text(encoding="utf-8") for p in [root / "README.md", *sorted((root / "docs").glob("*.md"))])
    words = sorted(set(_WORDS.findall(text.lower())))
    # suffixes the English algorithm treats specially (step 1a-5, exceptions, y and apostrophes)
    words += ["generously", "skies", "dying", "news", "sky", "innings", "cannings", "proceed", "succeeding",
              "arsenal", "communism", "gently", "ugly", "early", "only", "singly", "andes", "howe", "atlas",
              "cosmos", "bias", "consign", "consigned", "knightly", "yield", "happy", "crying", "jon's", "caroline's"]  # fmt: skip
    assert len(words) > 2000
    pure = EnglishStemmer()
    differ = [(w, keywords._STEMMER.stemWord(w), pure.stemWord(w)) for w in words]
    assert [d for d in differ if d[1] != d[2]] == []
    assert keywords.stem("rotates") == keywords.stem("rotate") == "rotat"

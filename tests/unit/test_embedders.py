"""The shipped embedders: HashingEmbedder, StaticEmbedder and its WordPiece tokenizer.

Offline and fast: the static model is loaded once per module from package data; no torch.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
from importlib import resources

import pytest

np = pytest.importorskip("numpy")

from engramdb.embeddings.base import Embedder  # noqa: E402
from engramdb.embeddings.hashing import HashingEmbedder  # noqa: E402
from engramdb.embeddings.static import MODEL_BASENAME, StaticEmbedder, default_embedder  # noqa: E402
from engramdb.embeddings.wordpiece import WordPieceTokenizer  # noqa: E402
from engramdb.errors import MissingExtra  # noqa: E402

TEXTS = [
    "Caroline went to the LGBTQ support group yesterday!",
    "Melanie: I painted a sunrise over the lake last week.",
    "Héllo, naïve café-goers 日本語",
]
BLANK = ["", "   ", "\t\n", "\x00\x01"]


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    return default_embedder()


@pytest.fixture(params=["hashing", "static"])
def embedder(request: pytest.FixtureRequest, static: StaticEmbedder) -> Embedder:
    return HashingEmbedder() if request.param == "hashing" else static


# -- the Embedder contract, for both ---------------------------------------------------------


def test_implements_protocol(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.name.endswith("@1") and embedder.dim > 0


def test_shape_dtype_and_unit_norm(embedder: Embedder) -> None:
    out = embedder.embed(TEXTS)
    assert out.shape == (len(TEXTS), embedder.dim)
    assert out.dtype == np.float32 and out.flags.c_contiguous
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)


def test_deterministic_and_batch_independent(embedder: Embedder) -> None:
    batch = embedder.embed(TEXTS)
    again = embedder.embed(TEXTS)
    one_by_one = np.vstack([embedder.embed([t]) for t in TEXTS])
    assert np.array_equal(batch, again)
    np.testing.assert_allclose(batch, one_by_one, atol=1e-6)


def test_blank_texts_give_zero_rows(embedder: Embedder) -> None:
    out = embedder.embed([*BLANK, "hello"])
    assert not out[: len(BLANK)].any()
    assert np.linalg.norm(out[-1]) == pytest.approx(1.0, abs=1e-5)


def test_empty_batch_and_str_rejected(embedder: Embedder) -> None:
    assert embedder.embed([]).shape == (0, embedder.dim)
    with pytest.raises(TypeError):
        embedder.embed("not a list")


def test_large_batch_matches_small_batches(embedder: Embedder) -> None:
    texts = [f"note {i}: the meeting moved to room {i % 7}" for i in range(1200)]
    whole = embedder.embed(texts)
    parts = np.vstack([embedder.embed(texts[i : i + 100]) for i in range(0, len(texts), 100)])
    np.testing.assert_allclose(whole, parts, atol=1e-6)


# -- HashingEmbedder -------------------------------------------------------------------------


def test_hashing_hard_coded_values() -> None:
    # Computed once; must never change, in any process, on any platform (BLAKE2b, not hash()).
    out = HashingEmbedder().embed(["Caroline went to the LGBTQ support group.", "who are you?"])
    first = np.flatnonzero(out[0])
    assert first[:4].tolist() == [0, 16, 39, 48] and len(first) == 76
    np.testing.assert_allclose(out[0, first[:4]], [0.1066, -0.1066, 0.1066, -0.1066], atol=1e-6)
    # Only stopwords: they are used rather than returning a zero row.
    second = np.flatnonzero(out[1])
    assert second[:4].tolist() == [3, 61, 78, 104] and len(second) == 21
    np.testing.assert_allclose(out[1, second[:4]], [-0.182574, -0.182574, 0.182574, -0.365148], atol=1e-6)
    small = HashingEmbedder(dim=16, seed=7).embed(["hello world"])[0]
    np.testing.assert_allclose(small[:3], [0.282843, 0.424264, 0.424264], atol=1e-6)


def test_hashing_stable_across_processes() -> None:
    code = (
        "from engramdb.embeddings.hashing import HashingEmbedder;"
        "print(HashingEmbedder().embed(['Caroline went to the LGBTQ support group.']).tobytes().hex())"
    )
    mine = HashingEmbedder().embed(["Caroline went to the LGBTQ support group."]).tobytes().hex()
    # A fixed PYTHONHASHSEED unlike this process's random one: hash() would give other buckets.
    env = dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == mine


def test_hashing_parameters() -> None:
    text = ["the painting of a sunrise"]
    assert not np.array_equal(HashingEmbedder(seed=0).embed(text), HashingEmbedder(seed=1).embed(text))
    assert HashingEmbedder(dim=64).embed(text).shape == (1, 64)
    assert HashingEmbedder(seed=0).name != HashingEmbedder(seed=1).name
    assert "-sw" not in HashingEmbedder(stopwords=False).name
    only_words = HashingEmbedder(ngram_range=(0, 0)).embed(["cats", "cat"])
    assert float(only_words[0] @ only_words[1]) == pytest.approx(0.0, abs=1e-6)
    with_grams = HashingEmbedder().embed(["cats", "cat"])
    assert float(with_grams[0] @ with_grams[1]) > 0.2  # "<ca", "cat", "<cat" are shared
    for bad in ({"dim": 1}, {"seed": -1}, {"ngram_range": (4, 3)}, {"ngram_weight": -1.0}):
        with pytest.raises(ValueError):
            HashingEmbedder(**bad)


# -- StaticEmbedder --------------------------------------------------------------------------


def test_static_model_identity(static: StaticEmbedder) -> None:
    assert static.name == "static-minilm-l6-v2-384-int8@1"
    assert static.dim == 384
    assert default_embedder() is static  # one shared instance per process


def test_shipped_files_match_metadata() -> None:
    data = resources.files("engramdb.embeddings").joinpath("data")
    meta = json.loads(data.joinpath(f"{MODEL_BASENAME}.json").read_text(encoding="utf-8"))
    for filename, digest in meta["files_sha256"].items():
        assert hashlib.sha256(data.joinpath(filename).read_bytes()).hexdigest() == digest, filename
    assert data.joinpath("LICENSE").is_file() and data.joinpath("NOTICE").is_file()
    assert meta["teacher_license"] == "Apache-2.0"


@pytest.mark.parametrize(
    ("anchor", "related", "unrelated"),
    [
        ("The cat is sleeping on the sofa.", "A kitten naps on the couch.", "The stock market fell sharply today."),
        ("I love hiking in the mountains.", "Walking mountain trails is my favourite hobby.", "My laptop died."),
        ("She adopted a puppy from the animal shelter.", "They brought home a new dog.", "Add two cups of flour."),
        ("How do I reset my password?", "I forgot my login credentials.", "The weather is sunny in Madrid."),
        (
            "Caroline went to an LGBTQ support group.",
            "Caroline met other transgender people.",
            "Melanie painted a lake.",
        ),
    ],
)
def test_static_related_beats_unrelated(static: StaticEmbedder, anchor: str, related: str, unrelated: str) -> None:
    a, r, u = static.embed([anchor, related, unrelated])
    assert float(a @ r) > float(a @ u) + 0.05


def test_static_unknown_only_text_is_zero(static: StaticEmbedder) -> None:
    # A word over 100 characters is one [UNK], whose row is zero.
    assert not static.embed(["x" * 101]).any()


def test_static_rejects_inconsistent_tables() -> None:
    tok = WordPieceTokenizer(["[PAD]", "[UNK]", "a"])
    with pytest.raises(ValueError):
        StaticEmbedder(np.zeros((3, 4), dtype=np.float32), np.ones(3, dtype=np.float32), tok, "x")
    with pytest.raises(ValueError):
        StaticEmbedder(np.zeros((2, 4), dtype=np.int8), np.ones(2, dtype=np.float32), tok, "x")


def test_missing_numpy_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "numpy", None)  # makes `import numpy` raise ImportError
    for module in ("engramdb.embeddings.static", "engramdb.embeddings.hashing"):
        monkeypatch.delitem(sys.modules, module)
        with pytest.raises(ImportError, match=r'pip install "engramdb\[memory\]"') as info:
            importlib.import_module(module)
        assert isinstance(info.value, MissingExtra)


# -- WordPiece tokenizer ---------------------------------------------------------------------

# Ids produced by Hugging Face `tokenizers` 0.22.2 with the teacher's tokenizer.json
# (add_special_tokens=False).
KNOWN_IDS = [
    (
        "Caroline went to the LGBTQ support group yesterday!",
        [7981, 2253, 2000, 1996, 12010, 4160, 2490, 2177, 7483, 999],
    ),
    ("Héllo, naïve café-goers", [7592, 1010, 15743, 7668, 1011, 2175, 2545]),
    ("unaffable embeddings", [14477, 20961, 3468, 7861, 8270, 4667, 2015]),
    ("日本語 text", [1864, 1876, 1950, 3793]),
    ("don't", [2123, 1005, 1056]),
    ("x" * 101, [100]),
    ("tab\there\u00a0nbsp", [21628, 2182, 1050, 5910, 2361]),
    ("ΣΊΣΥΦΟΣ", [1173, 18199, 29733, 29735, 29736, 29730, 29733]),
    ("", []),
]


@pytest.mark.parametrize(("text", "ids"), KNOWN_IDS)
def test_wordpiece_matches_reference(static: StaticEmbedder, text: str, ids: list[int]) -> None:
    assert static.tokenizer.encode(text) == ids
    assert static.tokenizer.encode(text) == ids  # second call hits the per-word cache


def test_wordpiece_tokens_and_special_text(static: StaticEmbedder) -> None:
    tok = static.tokenizer
    assert tok.tokenize("unaffable") == ["una", "##ffa", "##ble"]
    # Special-token text in user input is ordinary text, never a control token.
    assert tok.tokenize("[SEP]") == ["[", "sep", "]"]
    assert tok.vocab_size == 30522 and tok.token_id("[UNK]") == tok.unk_id == 100


def test_wordpiece_small_vocab() -> None:
    tok = WordPieceTokenizer(["[UNK]", "play", "##ing", "##s", "!"])
    assert tok.encode("Playing plays!") == [1, 2, 1, 3, 4]
    assert tok.encode("played") == [0]  # "##ed" missing: the whole word is unknown
    with pytest.raises(ValueError):
        WordPieceTokenizer(["a", "b"])


def test_static_batches_of_any_size_equal_one_by_one() -> None:
    np = pytest.importorskip("numpy")
    from engramdb.embeddings.static import default_embedder

    emb = default_embedder()
    texts = [f"note {i}: the deploy of service {i % 7} finished in {i} seconds" for i in range(150)] + ["", "   "]
    batch = emb.embed(texts)
    single = np.vstack([emb.embed([t]) for t in texts])
    assert batch.shape == (152, emb.dim)
    np.testing.assert_allclose(batch, single, rtol=1e-6, atol=1e-7)

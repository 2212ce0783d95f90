"""Pretraining samples pinned: the shards and loader samples made from the Debian licence texts with a
vocabulary derived from them are the ones this code has always made (sha256 of every shard array,
and a few values written out)."""

import collections
import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
from zoo.data.bert import PretrainingData, SampleSpec
from zoo.data.bert_prepare import prepare

VOCAB_SHA256 = "5dd6c0040c7615aa1908452af0bc98b15d95f8e0e53ad71e36efda7ff2c0548f"
PINNED = {
    "packed": {
        "spec": dict(max_seq=128, max_predictions=20),
        "dupe_factor": 1,
        "counts": (481, 885, 61154, 4),  # samples, sequences, real tokens, shards
        "sha256": "0a8528bf98b1a5c03f962ee4dd1e481caf412304581c196a4bc283cca17ba3e5",
        "input_ids": [2, 39, 18, 114, 132, 298, 48, 103, 89, 52, 91, 106, 87, 101, 16, 62],
        "mlm_positions": [5, 18, 28, 33, 46],
        "mlm_labels": [212, 102, 106, 188, 146],
    },
    "nsp": {
        "spec": dict(
            max_seq=64, max_predictions=10, packing=False, nsp=True, masking="static", short_seq_prob=0.1
        ),
        "dupe_factor": 2,
        "counts": (3104, 3104, 179069, 21),
        "sha256": "7dc6c56d210be7bbcf9251e7061f0900e8083f64e77d03e9e28e5defbb819953",
        "input_ids": [2, 6, 252, 323, 4, 150, 141, 117, 65, 103, 98, 98, 4, 4, 95, 87],
        "mlm_positions": [4, 12, 13, 18, 19],
        "mlm_labels": [6, 94, 87, 109, 141],
    },
}


def word_vocab(texts: Path, path: Path, words: int = 700) -> Path:
    """A deterministic WordPiece vocabulary: specials, punctuation, characters and the most frequent
    words of the texts (a trained one is not reproducible: the trainer breaks ties in any order)."""
    counts, chars = collections.Counter(), set()
    for file in sorted(f for f in texts.iterdir() if f.is_file()):
        text = file.read_text(errors="replace").lower()
        counts.update(re.findall(r"[a-z]+", text))
        chars.update(c for c in text if c.isalnum() and c.isascii())
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    top = [word for word, _ in ranked if len(word) > 1][:words]
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    punctuation = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
    tokens = specials + punctuation + sorted(chars) + ["##" + c for c in sorted(chars)] + top
    path.write_text("\n".join(tokens) + "\n")
    return path


def shard_digest(data_dir: Path) -> tuple[tuple, str]:
    meta = json.loads((data_dir / "metadata.json").read_text())
    digest = hashlib.sha256()
    for shard in meta["shards"]:
        with np.load(data_dir / shard["file"]) as arrays:
            for name in sorted(arrays.files):
                digest.update(name.encode())
                digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    counts = (meta["samples"], meta["sequences"], meta["tokens"], len(meta["shards"]))
    return counts, digest.hexdigest()


@pytest.fixture(scope="module")
def pinned_vocab(tmp_path_factory, english_text) -> Path:
    vocab = word_vocab(english_text, tmp_path_factory.mktemp("pinned") / "vocab.txt")
    if hashlib.sha256(vocab.read_bytes()).hexdigest() != VOCAB_SHA256:
        pytest.skip(
            "this machine's /usr/share/common-licenses differs from the texts the values were pinned on"
        )
    return vocab


@pytest.mark.parametrize("name", sorted(PINNED))
def test_samples_are_the_pinned_ones(name, pinned_vocab, english_text, tmp_path):
    pinned = PINNED[name]
    prepare(
        [english_text], pinned_vocab, tmp_path, SampleSpec(**pinned["spec"]), shard_size=150,
        dupe_factor=pinned["dupe_factor"],
    )  # fmt: skip
    counts, digest = shard_digest(tmp_path)
    assert counts == pinned["counts"]
    assert digest == pinned["sha256"]
    sample = PretrainingData(tmp_path, seed=3).sample(1, 5)
    assert sample["input_ids"][:16].tolist() == pinned["input_ids"]
    assert sample["mlm_positions"][:5].tolist() == pinned["mlm_positions"]
    assert sample["mlm_labels"][:5].tolist() == pinned["mlm_labels"]

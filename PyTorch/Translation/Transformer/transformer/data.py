"""Parallel text -> joint BPE vocabulary -> binarised shards -> token-count batches.

A prepared data folder (``python -m transformer.download`` or :func:`prepare`) holds::

    tokenizer.json                 the joint source/target BPE (Hugging Face ``tokenizers``)
    train.000.npz, train.001.npz   binarised shards: src/tgt token arrays and their offsets
    valid.000.npz, valid.en, valid.de, test.000.npz, test.en, test.de   (raw text for BLEU)
    meta.json                      languages, vocabulary size, sentence counts

Ids 0..3 are ``<pad> <s> </s> <unk>``. A source line is encoded as its tokens + eos; the decoder
reads bos + target and predicts target + eos.
"""

from __future__ import annotations

import json
import pathlib
import random
import unicodedata
from typing import TYPE_CHECKING

import numpy as np
from zoo.errors import UserError, one_line
from zoo.io import atomic_write

if TYPE_CHECKING:
    import torch

# torch is imported where a batch is made (pad_batch): reading and checking a data folder needs none.
SPECIALS = ["<pad>", "<s>", "</s>", "<unk>"]
PAD, BOS, EOS, UNK = 0, 1, 2, 3  # the ids of SPECIALS
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "meta.json"
# Training batches pad both lengths to a multiple of this: tensor-core friendly shapes, and a
# compiled step keeps one dynamic graph (inductor guards on the length's alignment).
LENGTH_MULTIPLE = 8


def read_lines(path) -> list[str]:
    """The lines of a UTF-8 text file; a missing file, or one that is not text (bytes that are not UTF-8,
    NUL bytes: a shard, a checkpoint, an archive), ends in one line naming it."""
    path = pathlib.Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{path} is not UTF-8 text (byte {e.start}): give a file of sentences, one a line"
        ) from None
    if "\0" in text:
        raise UserError(f"{path} holds NUL bytes, not text: give a file of sentences, one a line")
    return text.splitlines()


def read_parallel(src_path, tgt_path) -> tuple[list, list]:
    """Lines of a parallel pair; a missing or binary file or a line-count mismatch ends in one line."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    if len(src) != len(tgt):
        raise UserError(f"{src_path} has {len(src)} lines but {tgt_path} has {len(tgt)}: not a parallel pair")
    return src, tgt


def clean_pairs(src: list, tgt: list, max_words: int = 250, max_ratio: float = 1.5 * 2) -> tuple[list, list]:
    """NFKC, collapsed whitespace; drops empty pairs, pairs longer than ``max_words`` words and pairs
    whose word counts differ by more than ``max_ratio`` (Moses' clean-corpus-n rule)."""
    kept_src, kept_tgt = [], []
    for s, t in zip(src, tgt, strict=True):
        s = " ".join(unicodedata.normalize("NFKC", s).split())
        t = " ".join(unicodedata.normalize("NFKC", t).split())
        ns, nt = len(s.split()), len(t.split())
        if not ns or not nt or ns > max_words or nt > max_words:
            continue
        if max(ns, nt) > max_ratio * min(ns, nt):
            continue
        kept_src.append(s)
        kept_tgt.append(t)
    return kept_src, kept_tgt


def train_tokenizer(lines, vocab_size: int, path):
    """A joint BPE over ``lines`` (both languages), saved to ``path``; returns the tokenizer."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False)
    tokenizer.train_from_iterator(lines, trainer=trainer)
    with atomic_write(path) as tmp:
        tokenizer.save(str(tmp))
    return tokenizer


def write_lines(path, lines: list) -> None:
    """``lines`` as a UTF-8 text file, one per line, written whole or not at all."""
    with atomic_write(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_tokenizer(data_dir):
    """The data folder's tokenizer; a folder without one ends in one line."""
    from tokenizers import Tokenizer

    path = pathlib.Path(data_dir) / TOKENIZER_FILE
    if not path.is_file():
        raise UserError(f"{path}: no vocabulary; prepare the data with scripts/download_data.sh")
    try:
        return Tokenizer.from_file(str(path))
    except Exception as e:  # the tokenizers library raises a bare Exception for a file it cannot parse
        raise UserError(f"{path} is not a tokenizer file ({one_line(e)})") from None


def encode_line(tokenizer, line: str) -> list:
    return tokenizer.encode(line, add_special_tokens=False).ids + [EOS]


def write_shards(tokenizer, src: list, tgt: list, out_dir, split: str, shard_size: int) -> int:
    """Binarise the pairs into ``<split>.NNN.npz`` shards of at most ``shard_size`` pairs."""
    out_dir = pathlib.Path(out_dir)
    for old in out_dir.glob(f"{split}.*.npz"):
        old.unlink()
    for shard, start in enumerate(range(0, max(len(src), 1), shard_size)):
        pieces = {}
        for side, lines in (("src", src), ("tgt", tgt)):
            ids = [encode_line(tokenizer, line) for line in lines[start : start + shard_size]]
            pieces[side] = (
                np.concatenate([np.asarray(x, dtype=np.int32) for x in ids]) if ids else np.zeros(0, np.int32)
            )
            pieces[f"{side}_offsets"] = np.cumsum([0] + [len(x) for x in ids]).astype(np.int64)
        with atomic_write(out_dir / f"{split}.{shard:03d}.npz") as tmp, open(tmp, "wb") as f:
            np.savez(f, **pieces)
    return len(src)


def prepare(
    splits: dict, out_dir, *, vocab_size: int, shard_size: int = 1_000_000, langs=("en", "de"), clean=True
):
    """Write a data folder from ``{"train": (src_file, tgt_file), "valid": ..., "test": ...}``.

    Train pairs are cleaned (:func:`clean_pairs`); valid/test keep every line (their references are
    scored as given). The vocabulary is learnt on the cleaned training text of both sides.
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    texts = {split: read_parallel(*files) for split, files in splits.items()}
    if "train" not in texts:
        raise UserError("prepare needs a train split")
    if clean:
        texts["train"] = clean_pairs(*texts["train"])
    tokenizer = train_tokenizer(texts["train"][0] + texts["train"][1], vocab_size, out_dir / TOKENIZER_FILE)
    counts = {}
    for split, (src, tgt) in texts.items():
        counts[split] = write_shards(tokenizer, src, tgt, out_dir, split, shard_size)
        if split != "train":
            write_lines(out_dir / f"{split}.{langs[0]}", src)
            write_lines(out_dir / f"{split}.{langs[1]}", tgt)
    meta = {"langs": list(langs), "vocab_size": tokenizer.get_vocab_size(), "sentences": counts}
    with atomic_write(out_dir / META_FILE) as tmp:
        tmp.write_text(json.dumps(meta, indent=1) + "\n")
    return out_dir


def number_pairs(count: int, seed: int, high: int = 100, per_line=(3, 6)) -> tuple[list, list]:
    """``count`` lines of 3..6 numbers below ``high``, in English and in German words (num2words):
    a small real task whose German side has several words per line (BLEU counts word n-grams)."""
    from num2words import num2words

    rng = random.Random(seed)
    english, german = [], []
    for _ in range(count):
        numbers = [rng.randrange(high) for _ in range(rng.randint(*per_line))]
        english.append(" , ".join(num2words(n, lang="en") for n in numbers))
        german.append(" ".join(num2words(n, lang="de") for n in numbers))
    return english, german


def make_numbers(
    out_dir, *, train: int = 4000, valid: int = 200, test: int = 200, vocab_size: int = 400, seed: int = 0
):
    """A prepared data folder of the English -> German number-words task (no download)."""
    out_dir = pathlib.Path(out_dir)
    raw = out_dir / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    splits = {}
    for offset, (split, count) in enumerate((("train", train), ("valid", valid), ("test", test))):
        en, de = number_pairs(count, seed * 10 + offset)
        write_lines(raw / f"{split}.en", en)
        write_lines(raw / f"{split}.de", de)
        splits[split] = (raw / f"{split}.en", raw / f"{split}.de")
    # One German word per English phrase: the word-count ratio filter of clean_pairs does not apply.
    return prepare(splits, out_dir, vocab_size=vocab_size, shard_size=max(train // 2, 1), clean=False)


class Pairs:
    """Every binarised pair of one split: ``src[i]``, ``tgt[i]`` as int64 arrays, lengths.

    With ``vocab_size`` every token id must be below it. A shard that cannot be read, offsets that do not
    cut its tokens into sentences, or an id out of range end in one line naming the shard."""

    def __init__(self, data_dir, split: str, max_length: int | None = None, vocab_size: int | None = None):
        shards = sorted(pathlib.Path(data_dir).glob(f"{split}.*.npz"))
        if not shards:
            raise UserError(
                f"{data_dir}: no {split}.*.npz shards; prepare the data with scripts/download_data.sh"
            )
        self.src, self.tgt = [], []
        for shard in shards:
            sides = read_shard(shard, vocab_size)
            for (tokens, offsets), out in zip(sides, (self.src, self.tgt), strict=True):
                out.extend(
                    tokens[offsets[i] : offsets[i + 1]].astype(np.int64) for i in range(len(offsets) - 1)
                )
        if max_length:
            keep = [
                i
                for i in range(len(self.src))
                if len(self.src[i]) <= max_length and len(self.tgt[i]) < max_length
            ]
            self.src = [self.src[i] for i in keep]
            self.tgt = [self.tgt[i] for i in keep]
        self.src_lengths = np.array([len(x) for x in self.src])
        self.tgt_lengths = np.array([len(x) for x in self.tgt])

    def __len__(self) -> int:
        return len(self.src)


def read_shard(path, vocab_size: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """[(src tokens, src offsets), (tgt tokens, tgt offsets)] of one .npz shard, checked: offsets run from 0
    to the end of their tokens without going back, both sides hold the same number of sentences, and
    every id is below ``vocab_size`` (when given). A UserError naming the shard otherwise."""
    import zipfile

    names = ("src", "src_offsets", "tgt", "tgt_offsets")
    try:
        with np.load(path) as arrays:
            missing = [name for name in names if name not in arrays.files]
            if missing:
                raise UserError(f"shard {path} has no {missing[0]!r} array: not a prepared Transformer shard")
            sides = [(arrays[side], arrays[f"{side}_offsets"]) for side in ("src", "tgt")]
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise UserError(f"shard {path} cannot be read ({one_line(e)}): prepare the data again") from None
    for side, (tokens, offsets) in zip(("src", "tgt"), sides, strict=True):
        if tokens.ndim != 1 or offsets.ndim != 1 or not len(offsets):
            raise UserError(f"shard {path}: {side} and {side}_offsets must be flat arrays")
        if offsets[0] != 0 or offsets[-1] != len(tokens) or (np.diff(offsets) < 0).any():
            raise UserError(
                f"shard {path}: {side}_offsets do not cut its {len(tokens)} tokens into sentences"
            )
        if len(tokens) and tokens.min() < 0:
            raise UserError(f"shard {path}: {side} holds the negative token id {int(tokens.min())}")
        if len(tokens) and vocab_size is not None and tokens.max() >= vocab_size:
            raise UserError(
                f"shard {path}: {side} token id {int(tokens.max())} is outside the vocabulary of {vocab_size} "
                "(shards and tokenizer.json from different preparations?)"
            )
    if len(sides[0][1]) != len(sides[1][1]):
        raise UserError(
            f"shard {path}: {len(sides[0][1]) - 1} source but {len(sides[1][1]) - 1} target sentences"
        )
    return sides


def token_batches(pairs: Pairs, max_tokens: int, *, seed: int, epoch: int, shuffle: bool = True) -> list:
    """Index lists whose padded size (count x longest side) stays within ``max_tokens``.

    Pairs are sorted by length (bucketed: similar lengths share a batch, little padding); the batch
    order is shuffled with ``seed + epoch``, so every rank and every resumed run sees the same order.
    """
    rng = np.random.default_rng(seed + epoch)
    noise = rng.random(len(pairs)) if shuffle else np.zeros(len(pairs))
    order = np.lexsort((noise, pairs.src_lengths, pairs.tgt_lengths))
    batches, current, longest = [], [], 0
    for i in order:
        size = round_up(max(pairs.src_lengths[i], pairs.tgt_lengths[i]), LENGTH_MULTIPLE)
        if current and max(longest, size) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(int(i))
        longest = max(longest, size)
    if current:
        batches.append(current)
    if shuffle:
        rng.shuffle(batches)
    return batches


def round_up(length: int, multiple: int) -> int:
    return -(-int(length) // multiple) * multiple


def pad_batch(sequences: list, prefix: int | None = None, multiple: int = 1) -> torch.Tensor:
    """Right-padded (B, T) int64 tensor, each sequence optionally after a ``prefix`` token; T is
    rounded up to a ``multiple``."""
    import torch

    head = 0 if prefix is None else 1
    length = round_up(max(len(s) for s in sequences) + head, multiple)
    out = np.full((len(sequences), length), PAD, dtype=np.int64)
    if prefix is not None:
        out[:, 0] = prefix
    for row, seq in enumerate(sequences):
        out[row, head : head + len(seq)] = seq
    return torch.from_numpy(out)


def collate(pairs: Pairs, indices: list) -> dict:
    """``src`` (B, S), ``tgt_in`` = bos + target (B, T), ``tgt_out`` = target + eos (B, T); S and T
    are multiples of ``LENGTH_MULTIPLE`` (padding is masked in attention and left out of the loss)."""
    tgt = [pairs.tgt[i] for i in indices]
    return {
        "src": pad_batch([pairs.src[i] for i in indices], multiple=LENGTH_MULTIPLE),
        "tgt_in": pad_batch([t[:-1] for t in tgt], prefix=BOS, multiple=LENGTH_MULTIPLE),
        "tgt_out": pad_batch(tgt, multiple=LENGTH_MULTIPLE),
    }

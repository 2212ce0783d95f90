"""Token shards: a prepared data folder, its byte-level BPE tokenizer and the deterministic sampling of
training windows.

A prepared folder (gpt.download writes it):

    tokenizer.json              a ``tokenizers`` byte-level BPE (trained by gpt.download)
    meta.json                   vocab_size, eos_id, dtype, the tokenizer's sha256, and for each split the
                                shards: name, tokens, sha256
    train/shard_00000.bin ...   token ids (uint16 below 65536 ids, else uint32), documents joined by eos
    validation/shard_00000.bin

Training reads windows of ``seq_len + 1`` tokens (inputs and their next tokens) at a stride of
``seq_len`` inside each shard. The order of an epoch is a permutation seeded by (seed, epoch), and the
global sample index ``step x global_batch + i`` alone says which window a step reads: a resumed run, or a
run on another number of processes, reads the same windows in the same order.
"""

from __future__ import annotations

import hashlib
import json
import pathlib

import numpy as np
from zoo.errors import UserError

META = "meta.json"
TOKENIZER = "tokenizer.json"
EOS = "<|endoftext|>"
SPLITS = ("train", "validation")


def tokenizer_sha256(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def train_tokenizer(texts, vocab_size: int, path) -> None:
    """Train a byte-level BPE of ``vocab_size`` ids (eos is id 0) on ``texts`` and write it to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from zoo.io import atomic_write

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    with atomic_write(path) as tmp:
        tokenizer.save(str(tmp))


def load_tokenizer(path):
    """The ``tokenizers`` Tokenizer in ``path`` (a tokenizer.json, or a folder holding one)."""
    from tokenizers import Tokenizer

    path = pathlib.Path(path)
    if path.is_dir():
        path = path / TOKENIZER
    if not path.is_file():
        raise UserError(f"{path}: no such tokenizer (prepare the data with scripts/download_data.sh)")
    try:
        tokenizer = Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 - any parse failure means the same to a user
        raise UserError(
            f"{path} is not a tokenizers tokenizer.json ({str(e).splitlines()[0][:120]})"
        ) from None
    if tokenizer.token_to_id(EOS) is None:
        raise UserError(f"{path} has no {EOS} token: not a tokenizer of gpt.download")
    return tokenizer


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 65536 else np.uint32


def write_shards(documents, tokenizer, folder, *, shard_tokens: int, vocab_size: int) -> list[dict]:
    """Tokenise ``documents`` (an iterable of strings), each followed by eos, into shards of about
    ``shard_tokens`` tokens in ``folder``; returns the shards' entries for meta.json."""
    from zoo.io import atomic_write

    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dtype, eos = token_dtype(vocab_size), tokenizer.token_to_id(EOS)
    shards, pending, count = [], [], 0

    def flush():
        nonlocal pending, count
        tokens = np.concatenate(pending).astype(dtype)
        name = f"shard_{len(shards):05d}.bin"
        with atomic_write(folder / name) as tmp:
            tokens.tofile(tmp)
        shards.append(
            {"name": name, "tokens": int(tokens.size), "sha256": hashlib.sha256(tokens.tobytes()).hexdigest()}
        )
        pending, count = [], 0

    batch = []
    for text in documents:
        batch.append(text)
        if len(batch) == 256:
            for encoding in tokenizer.encode_batch(batch):
                pending.append(np.array([*encoding.ids, eos], dtype=np.int64))
                count += len(encoding.ids) + 1
            batch = []
            if count >= shard_tokens:
                flush()
    for encoding in tokenizer.encode_batch(batch) if batch else []:
        pending.append(np.array([*encoding.ids, eos], dtype=np.int64))
    if pending:
        flush()
    return shards


def write_meta(folder, tokenizer_path, splits: dict, source: str) -> None:
    """meta.json of a prepared folder: ``splits`` {split: shard entries}, written last (it marks the folder ready)."""
    from zoo.io import atomic_write

    tokenizer = load_tokenizer(tokenizer_path)
    vocab = tokenizer.get_vocab_size()
    meta = {
        "source": source,
        "vocab_size": vocab,
        "eos_id": tokenizer.token_to_id(EOS),
        "dtype": np.dtype(token_dtype(vocab)).name,
        "tokenizer_sha256": tokenizer_sha256(tokenizer_path),
        "splits": splits,
    }
    with atomic_write(pathlib.Path(folder) / META) as tmp:
        pathlib.Path(tmp).write_text(json.dumps(meta, indent=1))


def read_meta(data_dir) -> dict:
    data_dir = pathlib.Path(data_dir)
    path = data_dir / META
    if not data_dir.is_dir():
        raise UserError(f"data dir {data_dir} does not exist (prepare it with scripts/download_data.sh)")
    if not path.is_file():
        raise UserError(f"{data_dir} has no {META}: not a folder prepared by scripts/download_data.sh")
    try:
        meta = json.loads(path.read_text())
        meta["splits"], meta["vocab_size"], meta["tokenizer_sha256"]  # noqa: B018 - the keys must be there
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{path} is not a prepared folder's {META} ({type(e).__name__}: {e})") from None
    return meta


def check_tokenizer(data_dir, vocab_size: int) -> None:
    """The folder's tokenizer.json is the one its shards were written with, and fits ``vocab_size`` ids."""
    data_dir = pathlib.Path(data_dir)
    meta = read_meta(data_dir)
    tokenizer = data_dir / TOKENIZER
    load_tokenizer(tokenizer)
    if tokenizer_sha256(tokenizer) != meta["tokenizer_sha256"]:
        raise UserError(
            f"{tokenizer} is not the tokenizer the shards of {data_dir} were written with (sha256 differs "
            f"from {META}'s): prepare the folder again"
        )
    if meta["vocab_size"] > vocab_size:
        raise UserError(
            f"the tokenizer of {data_dir} has {meta['vocab_size']} ids, more than the model's "
            f"{vocab_size} (model.vocab_size)"
        )


class TokenShards:
    """The windows of one split: ``len()`` windows of ``seq_len + 1`` tokens, ``window(i)`` -> int64 array.

    Every shard is checked against meta.json when opened (size; its sha256 too with ``verify=True``):
    a truncated or altered shard is a UserError naming it.
    """

    def __init__(self, data_dir, split: str, seq_len: int, *, verify: bool = False):
        self.data_dir, self.split, self.seq_len = pathlib.Path(data_dir), split, seq_len
        meta = read_meta(data_dir)
        if split not in meta["splits"]:
            raise UserError(f"{data_dir} has no {split} split (it has {', '.join(meta['splits'])})")
        dtype = np.dtype(meta["dtype"])
        self.arrays, counts = [], []
        for entry in meta["splits"][split]:
            path = self.data_dir / split / entry["name"]
            if not path.is_file():
                raise UserError(f"{path}: shard missing (prepare the data again)")
            if path.stat().st_size != entry["tokens"] * dtype.itemsize:
                raise UserError(
                    f"{path} is {path.stat().st_size} bytes, {META} says {entry['tokens'] * dtype.itemsize}: "
                    "a corrupt or truncated shard (prepare the data again)"
                )
            array = np.memmap(path, dtype=dtype, mode="r")
            if verify and hashlib.sha256(array.tobytes()).hexdigest() != entry["sha256"]:
                raise UserError(
                    f"{path}: sha256 differs from {META}'s: a corrupt shard (prepare the data again)"
                )
            if array.size and int(array.max()) >= meta["vocab_size"]:
                raise UserError(
                    f"{path} holds token id {int(array.max())}, beyond the vocabulary of {meta['vocab_size']}"
                )
            self.arrays.append(array)
            counts.append(max(0, (array.size - 1) // seq_len))
        self.starts = np.cumsum([0, *counts])
        if self.starts[-1] == 0:
            raise UserError(
                f"{data_dir}/{split} holds no window of {seq_len + 1} tokens (data.seq_len is too long)"
            )

    def __len__(self) -> int:
        return int(self.starts[-1])

    def window(self, index: int) -> np.ndarray:
        shard = int(np.searchsorted(self.starts, index, side="right") - 1)
        offset = (index - int(self.starts[shard])) * self.seq_len
        return np.asarray(self.arrays[shard][offset : offset + self.seq_len + 1], dtype=np.int64)


class SyntheticTokens:
    """Random windows of ``seq_len + 1`` tokens below ``vocab_size`` (--synthetic: no data, for timing)."""

    def __init__(self, vocab_size: int, seq_len: int, windows: int = 4096, seed: int = 0):
        self.vocab_size, self.seq_len, self.windows, self.seed = vocab_size, seq_len, windows, seed

    def __len__(self) -> int:
        return self.windows

    def window(self, index: int) -> np.ndarray:
        rng = np.random.default_rng([self.seed, index])
        return rng.integers(0, self.vocab_size, self.seq_len + 1, dtype=np.int64)


def epoch_order(windows: int, seed: int, epoch: int) -> np.ndarray:
    """The windows of epoch ``epoch`` (0-based) in the order training reads them."""
    return np.random.default_rng([seed, epoch]).permutation(windows)


class Sampler:
    """Which windows a step reads: global sample ``step x global_batch + i`` is window
    ``epoch_order(epoch)[g % len]`` of epoch ``g // len``; the data-parallel rank ``r`` of ``ranks`` takes
    the ``r``-th contiguous share of each micro-batch."""

    def __init__(self, dataset, seed: int, batch_per_rank: int, accumulation: int, ranks: int):
        self.dataset, self.seed = dataset, seed
        self.batch_per_rank, self.accumulation, self.ranks = batch_per_rank, accumulation, ranks
        self.global_batch = batch_per_rank * accumulation * ranks
        self._orders = {}

    def epoch_of(self, step: int) -> int:
        return step * self.global_batch // len(self.dataset)

    def _window_index(self, sample: int) -> int:
        epoch, position = divmod(sample, len(self.dataset))
        if epoch not in self._orders:
            self._orders = {epoch: epoch_order(len(self.dataset), self.seed, epoch)}
        return int(self._orders[epoch][position])

    def micro_batches(self, step: int, rank: int) -> list:
        """The ``accumulation`` micro-batches (int64 arrays, (batch_per_rank, seq_len + 1)) of ``rank``
        at optimizer step ``step`` (0-based)."""
        out, first = [], step * self.global_batch
        for micro in range(self.accumulation):
            base = first + micro * self.batch_per_rank * self.ranks + rank * self.batch_per_rank
            rows = [self.dataset.window(self._window_index(base + i)) for i in range(self.batch_per_rank)]
            out.append(np.stack(rows))
        return out

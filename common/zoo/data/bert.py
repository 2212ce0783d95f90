"""BERT pretraining samples, shared by the PyTorch and TensorFlow BERTs (numpy only): sequences from
documents, packing, masking and the shard reader (``PretrainingData``); zoo.data.bert_prepare writes
the shards (``python -m zoo.data.bert_prepare {wikipedia,vocab,squad,prepare}``). Each framework turns
samples into batches. Google's BERT TensorFlow checkpoints (a zip) are unpacked here too.

A *sequence* is `[CLS] A [SEP]` (or `[CLS] A [SEP] B [SEP]` with next-sentence prediction); a
*sample* is one row of `max_seq` tokens. Without packing each sample holds one sequence and
padding; with packing (the default) sequences are put into samples by best-fit-decreasing bin
packing, each token carrying the id (1, 2, ...) of its sequence so that attention stays inside
it and position ids restart (both BERTs' models). Documents' tails and short documents fill the
space that padding would waste, so a packed sample of 128 tokens holds about 1.5-3 sequences of
Wikipedia text.

Shards are `.npz` files written with write-then-rename, described by `metadata.json`:
input_ids [N, T], token_type_ids [N, T], seq_ids [N, T], cls_positions [N, S] (-1 = none),
nsp_labels [N, S] (-1 = none; 0 = B follows A, 1 = B is random) and, with static masking,
mlm_positions [N, P] and mlm_labels [N, P] (-1 = none). Dynamic masking draws the masks in
`PretrainingData.sample` from (seed, epoch, sample), so every epoch sees new masks and a resumed run the same ones.
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from zoo.errors import UserError
from zoo.manifest import DataManifest

FORMAT = "zoo-bert-pretraining/v1"
# every shard holds these arrays; static masking adds mlm_positions and mlm_labels
SHARD_FIELDS = ("input_ids", "token_type_ids", "seq_ids", "cls_positions", "nsp_labels")
STATIC_MASK_FIELDS = ("mlm_positions", "mlm_labels")


class ShardError(UserError, ValueError):
    """A shard that cannot be read (cut short, damaged); the message names the file."""


@dataclasses.dataclass
class SampleSpec:
    max_seq: int = 128
    max_predictions: int = 20
    packing: bool = True
    nsp: bool = False
    masking: str = "dynamic"  # or "static"
    mask_prob: float = 0.15
    short_seq_prob: float = 0.0  # the unpacked NSP recipe uses 0.1
    max_sequences: int = 0  # per packed sample; 0 = max_seq // 16

    def __post_init__(self):
        if self.masking not in ("dynamic", "static"):
            raise UserError(f"masking must be dynamic or static, not {self.masking!r}")
        if self.max_seq < 8 or self.max_predictions < 1:
            raise UserError(f"max_seq {self.max_seq} / max_predictions {self.max_predictions} too small")
        if not self.max_sequences:
            self.max_sequences = max(1, self.max_seq // 16) if self.packing else 1


@dataclasses.dataclass
class Specials:
    pad: int
    cls: int
    sep: int
    mask: int
    vocab_size: int

    @classmethod
    def from_tokenizer(cls, tokenizer) -> Specials:
        ids = {t: tokenizer.token_to_id(t) for t in ("[PAD]", "[CLS]", "[SEP]", "[MASK]")}
        return cls(ids["[PAD]"], ids["[CLS]"], ids["[SEP]"], ids["[MASK]"], tokenizer.get_vocab_size())


# --- sequences -------------------------------------------------------------------------------


def tokenize_documents(documents: Iterable[list[str]], tokenizer) -> list[list[np.ndarray]]:
    """Documents of sentences -> documents of token-id arrays (empty sentences dropped)."""
    out = []
    for sentences in documents:
        encoded = tokenizer.encode_batch(sentences, add_special_tokens=False)
        doc = [np.asarray(e.ids, dtype=np.int32) for e in encoded if e.ids]
        if doc:
            out.append(doc)
    return out


def make_sequences(docs: list[list[np.ndarray]], spec: SampleSpec, specials: Specials, rng) -> list[tuple]:
    """(token ids with [CLS]/[SEP], token types, nsp label or -1) for every chunk of every document."""
    target_max = spec.max_seq - (3 if spec.nsp else 2)
    sequences = []
    for d, doc in enumerate(docs):
        pieces = [s[i : i + target_max] for s in doc for i in range(0, len(s), target_max)]
        target = _target_length(spec, target_max, rng)
        chunk, length, i = [], 0, 0
        while i < len(pieces):
            chunk.append(pieces[i])
            length += len(pieces[i])
            if i == len(pieces) - 1 or length >= target:
                if spec.nsp:
                    seq, unused = _nsp_pair(chunk, docs, d, target_max, specials, rng)
                    i -= unused
                else:
                    tokens = np.concatenate(chunk)[:target_max]
                    seq = (_wrap(specials, tokens), np.zeros(len(tokens) + 2, np.uint8), -1)
                sequences.append(seq)
                chunk, length = [], 0
                target = _target_length(spec, target_max, rng)
            i += 1
    return sequences


def _target_length(spec: SampleSpec, target_max: int, rng) -> int:
    if spec.short_seq_prob and rng.random() < spec.short_seq_prob:
        return int(rng.integers(2, target_max + 1))
    return target_max


def _wrap(specials: Specials, a: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    parts = [[specials.cls], a, [specials.sep]] + ([b, [specials.sep]] if b is not None else [])
    return np.concatenate([np.asarray(p, dtype=np.int32) for p in parts])


def _nsp_pair(chunk, docs, d, target_max, specials, rng):
    """A/B pair from a chunk: B is the true continuation (label 0) or, half of the time or when the
    chunk has one piece, sentences of another document (label 1; the chunk's unused rest is reused)."""
    a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
    a = np.concatenate(chunk[:a_end])
    unused = 0
    if len(chunk) == 1 or (len(docs) > 1 and rng.random() < 0.5):
        other = int(rng.integers(0, len(docs) - 1)) if len(docs) > 1 else d
        other += other >= d and len(docs) > 1
        start = int(rng.integers(0, len(docs[other])))
        b = np.concatenate(docs[other][start:])[: max(1, target_max - len(a))]
        label = 1 if other != d else 0
        unused = len(chunk) - a_end
    else:
        b = np.concatenate(chunk[a_end:])
        label = 0
    while len(a) + len(b) > target_max:  # trim the longer side, at a random end
        if len(a) >= len(b):
            a = a[1:] if rng.random() < 0.5 else a[:-1]
        else:
            b = b[1:] if rng.random() < 0.5 else b[:-1]
    types = np.concatenate([np.zeros(len(a) + 2, np.uint8), np.ones(len(b) + 1, np.uint8)])
    return (_wrap(specials, a, b), types, label), unused


# --- packing ---------------------------------------------------------------------------------


def pack_best_fit(lengths: np.ndarray, capacity: int, max_items: int) -> list[list[int]]:
    """Best-fit-decreasing bin packing: each item (longest first) goes to the open bin with the least
    room that still fits it; a bin closes when full or holding `max_items`."""
    by_room: list[list[int]] = [[] for _ in range(capacity + 1)]
    bins: list[list[int]] = []
    for item in np.argsort(-np.asarray(lengths), kind="stable"):
        length = int(lengths[item])
        if length > capacity:
            raise ValueError(f"sequence of {length} tokens does not fit {capacity}")
        room = next((r for r in range(length, capacity + 1) if by_room[r]), None)
        if room is None:
            b, room = len(bins), capacity
            bins.append([])
        else:
            b = by_room[room].pop()
        bins[b].append(int(item))
        left = room - length
        if left > 0 and len(bins[b]) < max_items:
            by_room[left].append(b)
    return bins


def build_samples(
    sequences: list[tuple], bins: list[list[int]], spec: SampleSpec, specials: Specials
) -> dict:
    """Lay the sequences of each bin side by side in one row of `max_seq` tokens."""
    n, t, s = len(bins), spec.max_seq, spec.max_sequences
    out = {
        "input_ids": np.full((n, t), specials.pad, dtype=_id_dtype(specials.vocab_size)),
        "token_type_ids": np.zeros((n, t), np.uint8),
        "seq_ids": np.zeros((n, t), np.uint8),
        "cls_positions": np.full((n, s), -1, np.int16),
        "nsp_labels": np.full((n, s), -1, np.int8),
    }
    for row, members in enumerate(bins):
        offset = 0
        for k, item in enumerate(members):
            ids, types, label = sequences[item]
            end = offset + len(ids)
            out["input_ids"][row, offset:end] = ids
            out["token_type_ids"][row, offset:end] = types
            out["seq_ids"][row, offset:end] = k + 1
            out["cls_positions"][row, k] = offset
            out["nsp_labels"][row, k] = label
            offset = end
    return out


def _id_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= np.iinfo(np.uint16).max else np.int32


# --- masking ---------------------------------------------------------------------------------


def mask_tokens(input_ids: np.ndarray, seq_ids: np.ndarray, spec: SampleSpec, specials: Specials, rng):
    """BERT masking of one sample: `mask_prob` of the real tokens (not [CLS]/[SEP]/pad, at most
    `max_predictions`) become targets; 80% -> [MASK], 10% -> a random token, 10% unchanged.
    Returns (masked ids, positions [P] padded with 0, labels [P] padded with -1)."""
    ids = input_ids.astype(np.int64)
    candidates = np.flatnonzero((seq_ids > 0) & (ids != specials.cls) & (ids != specials.sep))
    count = min(spec.max_predictions, max(1, int(round(len(candidates) * spec.mask_prob))), len(candidates))
    positions = np.sort(rng.choice(candidates, count, replace=False))
    labels = ids[positions].copy()
    draw = rng.random(count)
    masked = ids.copy()
    masked[positions[draw < 0.8]] = specials.mask
    randomised = positions[(draw >= 0.8) & (draw < 0.9)]
    masked[randomised] = rng.integers(0, specials.vocab_size, len(randomised))
    padded_positions = np.zeros(spec.max_predictions, np.int64)
    padded_labels = np.full(spec.max_predictions, -1, np.int64)
    padded_positions[:count] = positions
    padded_labels[:count] = labels
    return masked, padded_positions, padded_labels


# --- loading ---------------------------------------------------------------------------------


def shard_problem(path: Path, samples: int, arrays: tuple[str, ...]) -> str | None:
    """Why the shard at ``path`` is not whole, or None: read from its zip directory and array headers
    only (no data), so that every shard is checked at start-up in moments. A shard cut short loses
    its zip directory; one that lost rows or arrays disagrees with metadata.json."""
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            members = {Path(info.filename).stem: info for info in archive.infolist()}
            absent = [name for name in arrays if name not in members]
            if absent:
                return f"no {', '.join(absent)} arrays"
            for name in arrays:
                info = members[name]
                if info.header_offset + info.compress_size > size:
                    return f"array {name} runs past the end of the file"
                with archive.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    read_header = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    shape = read_header(f)[0]
                if not shape or shape[0] != samples:
                    return f"array {name} has shape {shape}, metadata.json says {samples} samples"
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        return f"{type(e).__name__}: {e}"
    return None


def read_metadata(path: Path) -> tuple[dict, SampleSpec, Specials]:
    """A prepared directory's metadata.json: (its fields, the sample spec, the special token ids), or one
    line naming the file when it is not JSON, not this format or lacks a field."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path} is not a readable JSON file ({type(e).__name__}: {e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UserError(f"{path} is not a {FORMAT} description")
    try:
        fields = {f.name for f in dataclasses.fields(SampleSpec)}
        spec = SampleSpec(**{k: v for k, v in meta.items() if k in fields})
        specials = Specials(**meta["specials"])
        shards = [(str(s["file"]), int(s["samples"])) for s in meta["shards"]]
    except (KeyError, TypeError, ValueError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}: {e})") from None
    ids = {name: getattr(specials, name) for name in ("pad", "cls", "sep", "mask")}
    if not all(isinstance(v, int) for v in [*ids.values(), specials.vocab_size]) or not shards:
        raise UserError(f"{path} is damaged (specials {dataclasses.asdict(specials)}, {len(shards)} shards)")
    outside = {name: i for name, i in ids.items() if not 0 <= i < specials.vocab_size}
    if outside:
        raise UserError(
            f"{path} places special tokens {outside} outside its {specials.vocab_size}-token vocabulary"
        )
    return meta, spec, specials


def _token_id_problem(path: Path, manifest: DataManifest, vocab_size: int) -> str | None:
    """Why the shard at ``path`` holds a token id outside a ``vocab_size`` vocabulary, or None. The
    largest id comes from the manifest that prepare wrote while the shard is unchanged since, else from
    the shard's own input_ids and mlm_labels (read once, here, before a run writes anything)."""
    facts = manifest.lookup(path) or {}
    largest = facts.get("max_token_id")
    if not isinstance(largest, int):
        try:
            with np.load(path) as f:
                largest = max(
                    int(f[name].max(initial=0)) for name in ("input_ids", "mlm_labels") if name in f
                )
                smallest = int(f["input_ids"].min(initial=0))
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            return f"{type(e).__name__}: {e}"
        if smallest < 0:
            return f"token id {smallest} in input_ids"
    if largest >= vocab_size:
        return f"token id {largest}, beyond the {vocab_size}-token vocabulary metadata.json names"
    return None


class PretrainingData:
    """Shards of one prepared directory, addressed as one stream per epoch.

    The stream is block-shuffled: the shard order and the order inside each shard are permuted
    from (seed, epoch), so only one or two shards are read at a time.
    """

    def __init__(self, data_dir: str | Path, seed: int = 0):
        self.dir = Path(data_dir)
        meta_path = self.dir / "metadata.json"
        if not meta_path.is_file():
            raise UserError(f"{self.dir} has no metadata.json: prepare it with scripts/download_data.sh")
        self.meta, self.spec, self.specials = read_metadata(meta_path)
        missing = [s["file"] for s in self.meta["shards"] if not (self.dir / s["file"]).is_file()]
        if missing:
            raise UserError(f"{self.dir} lacks shards {missing[:3]} listed in metadata.json")
        arrays = SHARD_FIELDS + (STATIC_MASK_FIELDS if self.spec.masking == "static" else ())
        manifest = DataManifest.read(self.dir)
        for shard in self.meta["shards"]:
            path = self.dir / shard["file"]
            problem = shard_problem(path, shard["samples"], arrays)
            if problem is None:
                problem = _token_id_problem(path, manifest, self.specials.vocab_size)
            if problem:
                raise UserError(
                    f"shard {path} is damaged ({problem}): prepare {self.dir} again "
                    "(scripts/download_data.sh prepare)"
                )
        self.sizes = np.array([s["samples"] for s in self.meta["shards"]])
        self.seed = seed
        self._cache: dict[int, dict] = {}
        self._perms: dict[tuple[int, int], np.ndarray] = {}

    def __len__(self) -> int:
        return int(self.sizes.sum())

    def _shard(self, k: int) -> dict:
        if k not in self._cache:
            if len(self._cache) >= 2:
                self._cache.pop(next(iter(self._cache)))
            path = self.dir / self.meta["shards"][k]["file"]
            try:
                with np.load(path) as f:
                    self._cache[k] = {name: f[name] for name in f.files}
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
                raise ShardError(f"shard {path} is damaged ({type(e).__name__}: {e})") from None
        return self._cache[k]

    def locate(self, epoch: int, position: int) -> tuple[int, int]:
        """(shard, row) of the sample at `position` of epoch `epoch`'s stream."""
        order = np.random.default_rng([self.seed, epoch]).permutation(len(self.sizes))
        ends = np.cumsum(self.sizes[order])
        j = int(np.searchsorted(ends, position, side="right"))
        shard = int(order[j])
        local = position - (int(ends[j - 1]) if j else 0)
        key = (epoch, shard)
        if key not in self._perms:
            if len(self._perms) > 4:
                self._perms.pop(next(iter(self._perms)))
            self._perms[key] = np.random.default_rng([self.seed, epoch, shard]).permutation(self.sizes[shard])
        return shard, int(self._perms[key][local])

    def sample(self, epoch: int, position: int) -> dict:
        shard, row = self.locate(epoch, position)
        arrays = {k: v[row] for k, v in self._shard(shard).items()}
        if self.spec.masking == "dynamic":
            rng = np.random.default_rng([self.seed, epoch, shard, row, 1])
            masked, positions, labels = mask_tokens(
                arrays["input_ids"], arrays["seq_ids"], self.spec, self.specials, rng
            )
            arrays.update(input_ids=masked, mlm_positions=positions, mlm_labels=labels)
        return arrays


def unpack_bert_tf_zip(path) -> Path:
    """Extract Google's BERT ``NAME.zip`` beside it as ``NAME/`` (once, renamed into place when whole)
    and return its ``bert_model.ckpt`` prefix; :class:`~zoo.checkpoints.CheckpointError` for a bad or
    foreign zip."""
    import shutil

    from zoo.checkpoints import CheckpointError

    path = Path(path)
    out = path.with_suffix("")
    if not out.is_dir():
        partial = out.parent / (out.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            with zipfile.ZipFile(path) as archive:
                archive.extractall(partial)
        except zipfile.BadZipFile:
            shutil.rmtree(partial, ignore_errors=True)
            raise CheckpointError(f"{path} is not a zip archive") from None
        partial.replace(out)
    prefixes = sorted(out.rglob("bert_model.ckpt.index"))
    if not prefixes:
        raise CheckpointError(f"{path} holds no bert_model.ckpt (expected Google's BERT zip layout)")
    return prefixes[0].with_suffix("")

"""A prepared LibriSpeech folder: manifests, the SentencePiece model, audio decoding, batches.

    DATA_DIR/
      LibriSpeech/<split>/<speaker>/<chapter>/*.flac, *.trans.txt   as extracted (rnnt.download)
      <split>.jsonl          one utterance a line: {"audio": path under DATA_DIR, "duration": s, "text"}
      <tokenizer>            the SentencePiece model (recipe data.tokenizer)

    train = Utterances(data_dir, recipe["data"]["train_splits"], tokenizer, max_duration=16.7)
    batches = epoch_batches(train.durations, batch_per_gpu * world_size, seed, epoch, num_buckets)
    audio, audio_lengths, targets, target_lengths = collate(train.load(i, ...) for i in batch)

Batches are drawn from buckets of similar duration (sorted, cut into ``num_buckets`` buckets, shuffled
within each), the same on every rank and in every resumed run of an epoch.
"""

from __future__ import annotations

import json
import pathlib
import re

import numpy as np
import torch
from zoo.errors import UserError

SAMPLE_RATE = 16000


def normalize_text(text: str) -> str:
    """Lower case, letters, apostrophes and single spaces (LibriSpeech's transcripts are already so, in capitals)."""
    return re.sub(r"\s+", " ", re.sub(r"[^a-z' ]", " ", text.lower())).strip()


def load_tokenizer(path):
    """The SentencePiece model at ``path``; a UserError where there is none."""
    import sentencepiece

    path = pathlib.Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no SentencePiece model (scripts/download_data.sh trains it)")
    try:
        return sentencepiece.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as e:
        raise UserError(f"{path} is not a SentencePiece model ({str(e).splitlines()[0][:120]})") from None


def tokenizer_from_bytes(proto: bytes):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_proto=proto)


def train_tokenizer(texts: list, vocab_size: int, path) -> pathlib.Path:
    """A unigram SentencePiece model of ``vocab_size`` pieces over ``texts`` (the reference's settings:
    full character coverage, no bos/eos), written to ``path`` (``.model`` and ``.vocab`` beside)."""
    import io

    import sentencepiece
    from zoo.io import atomic_write

    path = pathlib.Path(path)
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts),
        model_writer=model,
        vocab_size=vocab_size,
        character_coverage=1.0,
        bos_id=-1,
        eos_id=-1,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_write(path) as tmp:
        pathlib.Path(tmp).write_bytes(model.getvalue())
    return path


def read_audio(path) -> np.ndarray:
    """Mono 16 kHz float32 samples of a FLAC or WAV file; a UserError naming the file if it cannot be used."""
    import soundfile

    try:
        samples, rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except (RuntimeError, OSError, soundfile.LibsndfileError) as e:
        raise UserError(f"{path}: cannot decode audio ({str(e).splitlines()[0][:160]})") from None
    if rate != SAMPLE_RATE:
        raise UserError(f"{path}: {rate} Hz audio, the model takes {SAMPLE_RATE} Hz (resample it first)")
    if samples.shape[0] == 0:
        raise UserError(f"{path}: no audio samples")
    return samples.mean(axis=1)


def read_manifest(data_dir, split: str) -> list[dict]:
    path = pathlib.Path(data_dir) / f"{split}.jsonl"
    if not path.is_file():
        raise UserError(
            f"{data_dir} has no {split}.jsonl: run scripts/download_data.sh --data-dir {data_dir}"
        )
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            entries.append(
                {
                    "audio": str(entry["audio"]),
                    "duration": float(entry["duration"]),
                    "text": str(entry["text"]),
                }
            )
        except (ValueError, KeyError, TypeError):
            raise UserError(f"{path}:{number} is not a manifest line (audio, duration, text)") from None
    if not entries:
        raise UserError(f"{path} lists no utterance")
    return entries


def speed_perturb(samples: np.ndarray, rate: float) -> torch.Tensor:
    """The utterance played ``rate`` times as fast (pitch follows, as with the reference's resampling)."""
    audio = torch.from_numpy(samples)
    if rate == 1.0:
        return audio
    length = max(1, int(round(len(samples) / rate)))
    return torch.nn.functional.interpolate(audio[None, None], size=length, mode="linear", align_corners=True)[
        0, 0
    ]


class Utterances:
    """The utterances of ``splits`` (manifest entries up to ``max_duration`` seconds) with their label ids."""

    def __init__(self, data_dir, splits, tokenizer, max_duration: float | None = None):
        self.data_dir = pathlib.Path(data_dir)
        entries = [entry for split in splits for entry in read_manifest(data_dir, split)]
        if max_duration is not None:
            entries = [e for e in entries if e["duration"] <= max_duration]
        if not entries:
            raise UserError(f"no utterance of {', '.join(splits)} is {max_duration} s or shorter")
        self.entries = entries
        self.durations = np.array([e["duration"] for e in entries])
        self.labels = [tokenizer.encode(e["text"]) for e in entries]

    def __len__(self) -> int:
        return len(self.entries)

    def load(self, index: int, speed: tuple | None = None, seed: int = 0, epoch: int = 0):
        """(audio tensor, label ids) of utterance ``index``; ``speed`` (min, max) draws a speed-perturbation
        rate from a generator of (seed, epoch, index), so every rank and resumed run draws the same."""
        samples = read_audio(self.data_dir / self.entries[index]["audio"])
        rate = 1.0
        if speed is not None and tuple(speed) != (1.0, 1.0):
            rate = float(np.random.default_rng([seed, epoch, index]).uniform(speed[0], speed[1]))
        return speed_perturb(samples, rate), self.labels[index]


def epoch_batches(
    durations, global_batch: int, seed: int, epoch: int, num_buckets: int = 1
) -> list[list[int]]:
    """The epoch's global batches (lists of indices, ``global_batch`` each, the last partial one dropped):
    indices sorted by duration, cut into ``num_buckets`` buckets, shuffled within each bucket, cut into
    batches, and the batches shuffled. A pure function of its arguments."""
    rng = np.random.default_rng([seed, epoch])
    order = np.argsort(np.asarray(durations), kind="stable")
    buckets = np.array_split(order, max(1, num_buckets))
    flat = np.concatenate([rng.permutation(bucket) for bucket in buckets])
    count = len(flat) // global_batch
    batches = [flat[i * global_batch : (i + 1) * global_batch].tolist() for i in range(count)]
    return [batches[i] for i in rng.permutation(count)]


def collate(items) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(audio (B, L) zero-padded, audio lengths (B,), labels (B, U) zero-padded, label lengths (B,))."""
    items = list(items)
    audio_lengths = torch.tensor([len(audio) for audio, _ in items])
    label_lengths = torch.tensor([len(labels) for _, labels in items])
    audio = torch.zeros(len(items), int(audio_lengths.max()))
    labels = torch.zeros(len(items), max(1, int(label_lengths.max())), dtype=torch.long)
    for row, (samples, ids) in enumerate(items):
        audio[row, : len(samples)] = samples
        labels[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return audio, audio_lengths, labels, label_lengths

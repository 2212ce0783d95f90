"""LibriSpeech for the RNN-T: resumable, verified download from openslr.org (resources/12), extraction,
one manifest per split and the SentencePiece model trained on the training transcripts.

    python -m rnnt.download --data-dir /data/librispeech                 # MLPerf's splits, 1023 pieces
    python -m rnnt.download --data-dir /data/librispeech --splits dev-clean
    python -m rnnt.download --data-dir /tmp/spoken --synthetic      # espeak-ng digits, configs/spoken_cpu.yaml

Each archive is fetched through zoo.io.download (HTTP Range resume, a tar signature check), then
checked against openslr's published MD5 before it is extracted (into a temporary folder, renamed into
place when whole). A split already extracted and listed in its manifest is not fetched again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import shutil
import tarfile
import tempfile

from zoo.cli import entry_point
from zoo.errors import UserError

MIRROR = "https://www.openslr.org/resources/12/"
# openslr's published MD5 of each archive (the MLPerf reference's utils/librispeech.csv)
ARCHIVES = {
    "dev-clean": "42e2234ba48799c1f50f24a7926300a1",
    "dev-other": "c8d0bcc9cca99d4f8b62fcc847357931",
    "test-clean": "32fa31d27d2e1cad72775fee3f4849a9",
    "test-other": "fb5a50374b501bb3bac4815ee91d3135",
    "train-clean-100": "2a93770f6d5c6c964bc36631d331a522",
    "train-clean-360": "c0e676e450a7ff2f54aeade5171606fa",
    "train-other-500": "d1a0fd59409feb2c614ce4d30c387708",
}
TRAIN_SPLITS = ["train-clean-100", "train-clean-360", "train-other-500"]
MLPERF_SPLITS = [*TRAIN_SPLITS, "dev-clean"]
TOKENIZER = "sentencepiece/librispeech1023.model"
# --synthetic's: what configs/spoken_cpu.yaml reads
SPOKEN_TOKENIZER, SPOKEN_VOCAB = "sentencepiece/spoken.model", 29


def md5_file(path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_split(split: str, data_dir: pathlib.Path, mirror: str) -> pathlib.Path:
    """Download ``split``'s archive into DATA_DIR/archives, verify its MD5, extract LibriSpeech/<split>."""
    from zoo.io import download

    target = data_dir / "LibriSpeech" / split
    if target.is_dir():
        return target
    archive = download(
        mirror.rstrip("/") + f"/{split}.tar.gz",
        dest=data_dir / "archives" / f"{split}.tar.gz",
        file_format="tar",
    )
    digest = md5_file(archive)
    if digest != ARCHIVES[split]:
        archive.unlink()
        raise UserError(f"{archive}: MD5 {digest}, openslr publishes {ARCHIVES[split]} (removed; run again)")
    with tempfile.TemporaryDirectory(dir=data_dir, prefix=".extract-") as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        extracted = pathlib.Path(tmp) / "LibriSpeech" / split
        if not extracted.is_dir():
            raise UserError(f"{archive} holds no LibriSpeech/{split} folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        extracted.rename(target)
    return target


def write_manifest(data_dir: pathlib.Path, split: str) -> pathlib.Path:
    """DATA_DIR/<split>.jsonl from LibriSpeech/<split>'s transcripts; every transcript line needs its audio
    file and every audio file its transcript line."""
    import soundfile
    from zoo.io import atomic_write

    from rnnt.data import normalize_text

    folder = data_dir / "LibriSpeech" / split
    if not folder.is_dir():
        raise UserError(f"{folder} does not exist")
    lines = []
    for transcript in sorted(folder.rglob("*.trans.txt")):
        texts = dict(line.split(" ", 1) for line in transcript.read_text().splitlines() if " " in line)
        for name, text in sorted(texts.items()):
            audio = transcript.parent / f"{name}.flac"
            if not audio.is_file():
                raise UserError(f"{transcript} lists {name}, but {audio} is missing")
            try:
                duration = soundfile.info(str(audio)).duration
            except (RuntimeError, soundfile.LibsndfileError) as e:
                raise UserError(f"{audio}: cannot decode audio ({str(e).splitlines()[0][:120]})") from None
            entry = {
                "audio": str(audio.relative_to(data_dir)),
                "duration": round(duration, 4),
                "text": normalize_text(text),
            }
            lines.append(json.dumps(entry))
        for audio in transcript.parent.glob("*.flac"):
            if audio.stem not in texts:
                raise UserError(f"{audio} has no transcript line in {transcript}")
    if not lines:
        raise UserError(f"{folder} holds no transcribed utterance")
    path = data_dir / f"{split}.jsonl"
    with atomic_write(path) as tmp:
        pathlib.Path(tmp).write_text("\n".join(lines) + "\n")
    return path


def prepare(
    data_dir, splits, *, train_splits, vocab_size: int, tokenizer: str, mirror: str | None = MIRROR
) -> pathlib.Path:
    """Fetch (unless ``mirror`` is None: the audio is already there), list and tokenize; returns DATA_DIR."""
    from rnnt.data import read_manifest, train_tokenizer

    data_dir = pathlib.Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    for split in splits:
        if mirror is not None:
            if split not in ARCHIVES:
                raise UserError(f"unknown LibriSpeech split {split!r} (one of {', '.join(ARCHIVES)})")
            fetch_split(split, data_dir, mirror)
        write_manifest(data_dir, split)
    texts = [
        entry["text"] for split in train_splits if split in splits for entry in read_manifest(data_dir, split)
    ]
    if texts:
        path = train_tokenizer(texts, vocab_size, data_dir / tokenizer)
        print(f"wrote {path} ({vocab_size} pieces)")
    return data_dir


@entry_point
def main(argv=None) -> pathlib.Path:
    import os

    parser = argparse.ArgumentParser(
        prog="scripts/download_data.sh",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help="where LibriSpeech goes ($DATA_DIR)"
    )
    parser.add_argument(
        "--splits",
        default=",".join(MLPERF_SPLITS),
        help=f"comma-separated (default {','.join(MLPERF_SPLITS)})",
    )
    parser.add_argument(
        "--vocab-size",
        type=int,
        default=None,
        help="SentencePiece pieces (default 1023, MLPerf's; --synthetic 29)",
    )
    parser.add_argument(
        "--tokenizer",
        default=None,
        help=f"the model's path under --data-dir (default {TOKENIZER}; --synthetic {SPOKEN_TOKENIZER})",
    )
    parser.add_argument("--mirror", default=MIRROR, help=f"where the archives are (default {MIRROR})")
    parser.add_argument(
        "--synthetic", action="store_true", help="speak the small espeak-ng set instead (splits train, dev)"
    )
    args = parser.parse_args(argv)
    if not args.data_dir:
        raise UserError("pass --data-dir (or set DATA_DIR)")
    synthetic = args.synthetic
    args.vocab_size = args.vocab_size or (SPOKEN_VOCAB if synthetic else 1023)
    args.tokenizer = args.tokenizer or (SPOKEN_TOKENIZER if synthetic else TOKENIZER)
    if args.vocab_size < 2:
        raise UserError(f"--vocab-size must be at least 2, not {args.vocab_size}")
    if args.synthetic:
        from rnnt.spoken import make_spoken

        make_spoken(args.data_dir)
        return prepare(
            args.data_dir,
            ["train", "dev"],
            train_splits=["train"],
            vocab_size=args.vocab_size,
            tokenizer=args.tokenizer,
            mirror=None,
        )
    splits = [s for s in args.splits.split(",") if s]
    data_dir = prepare(
        args.data_dir,
        splits,
        train_splits=TRAIN_SPLITS,
        vocab_size=args.vocab_size,
        tokenizer=args.tokenizer,
        mirror=args.mirror,
    )
    shutil.rmtree(pathlib.Path(data_dir) / "archives", ignore_errors=True)
    return data_dir


if __name__ == "__main__":
    main()

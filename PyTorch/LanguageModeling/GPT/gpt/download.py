"""Prepare GPT's data: C4 English (the MLPerf split) or the small English corpus that ships with Python,
a byte-level BPE trained with ``tokenizers``, and memory-mapped token shards (gpt.data).

    python -m gpt.download --data-dir /data/c4 --c4-train-files 8            # C4 en, the MLPerf split
    python -m gpt.download --data-dir /data/pydoc --corpus pydoc --vocab-size 1024   # CPU-sized, no network

C4 (allenai/c4 on the Hugging Face hub, ``en/``): training text from ``c4-train.XXXXX-of-01024.json.gz``
(MLPerf's GPT-3 and Llama 3.1 8B use files 00000-01023; ``--c4-train-files N`` takes the first N) and
validation text from ``c4-validation.00000-of-00008.json.gz`` ... (``--c4-validation-files``; MLPerf
evaluates on the validation split). Files are cached in DATA_DIR/downloads, fetched with zoo.io.download
(an interrupted file resumes, a finished one is reused), and each is read through as gzip before use; a
file that is not whole gzip is removed with a one-line error. ``--base-url`` points at a mirror.

pydoc: the topics of the Python documentation (``pydoc_data.topics``, about 460 KB of English prose and
examples, in every CPython), every tenth topic held out for validation.

The tokenizer is trained on (at most ``--tokenizer-documents``) training documents, or read from
``--tokenizer FILE`` (a tokenizer.json of an earlier preparation, so that new shards fit a trained model).
"""

from __future__ import annotations

import argparse
import gzip
import json
import pathlib
import shutil

from zoo.cli import entry_point
from zoo.errors import UserError

from gpt.data import SPLITS, TOKENIZER, load_tokenizer, train_tokenizer, write_meta, write_shards

C4_BASE_URL = "https://huggingface.co/datasets/allenai/c4/resolve/main/en"
C4_TRAIN_FILES = 1024
C4_VALIDATION_FILES = 8
# sha256 of the files whose digests are published with the dataset (the hub's LFS pointers), by name;
# the others are checked as whole gzip streams.
C4_SHA256: dict[str, str] = {}


def c4_file_names(split: str, count: int) -> list[str]:
    total = C4_TRAIN_FILES if split == "train" else C4_VALIDATION_FILES
    if not 1 <= count <= total:
        raise UserError(f"C4 en has {total} {split} files: ask for 1..{total}, not {count}")
    return [f"c4-{split}.{index:05d}-of-{total:05d}.json.gz" for index in range(count)]


def fetch_c4(names: list[str], downloads: pathlib.Path, base_url: str) -> list[pathlib.Path]:
    """Download (resumed, verified) each C4 file into ``downloads``; returns their paths."""
    from zoo.io import download

    paths = []
    for name in names:
        path = download(f"{base_url.rstrip('/')}/{name}", sha256=C4_SHA256.get(name), dest=downloads / name)
        check_gzip(path)
        paths.append(path)
    return paths


def check_gzip(path: pathlib.Path) -> None:
    """Read ``path`` through as gzip; one that is not whole is removed (the next run fetches it again)."""
    try:
        with gzip.open(path, "rb") as stream:
            while stream.read(1 << 22):
                pass
    except (OSError, EOFError) as e:
        path.unlink(missing_ok=True)
        raise UserError(f"{path} is not a whole gzip file ({e}); removed, run the download again") from None


def c4_documents(paths):
    """The ``text`` of every JSON line of the C4 files, in order."""
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            for line in lines:
                yield json.loads(line)["text"]


def pydoc_documents() -> dict:
    """{"train": [...], "validation": [...]}: the topics of pydoc_data (every tenth for validation)."""
    from pydoc_data.topics import topics

    texts = [topics[name].strip() for name in sorted(topics)]
    return {
        "train": [t for i, t in enumerate(texts) if i % 10 != 9],
        "validation": [t for i, t in enumerate(texts) if i % 10 == 9],
    }


def prepare(
    data_dir,
    documents: dict,
    source: str,
    *,
    vocab_size: int,
    tokenizer_file=None,
    tokenizer_documents: int = 200_000,
    shard_tokens: int = 100_000_000,
) -> None:
    """Tokenizer (trained, or copied from ``tokenizer_file``), then the shards of every split, then meta.json.
    ``documents`` maps each split to a function that yields its texts."""
    import itertools

    data_dir = pathlib.Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "meta.json").unlink(missing_ok=True)  # the folder is not ready until meta.json is back
    tokenizer_path = data_dir / TOKENIZER
    if tokenizer_file:
        load_tokenizer(tokenizer_file)
        shutil.copyfile(tokenizer_file, tokenizer_path)
    else:
        train_tokenizer(
            itertools.islice(documents["train"](), tokenizer_documents), vocab_size, tokenizer_path
        )
    tokenizer = load_tokenizer(tokenizer_path)
    splits = {}
    for split in SPLITS:
        shutil.rmtree(data_dir / split, ignore_errors=True)
        splits[split] = write_shards(
            documents[split](),
            tokenizer,
            data_dir / split,
            shard_tokens=shard_tokens,
            vocab_size=tokenizer.get_vocab_size(),
        )
        print(f"{split}: {sum(s['tokens'] for s in splits[split]):,} tokens in {len(splits[split])} shard(s)")
    write_meta(data_dir, tokenizer_path, splits, source)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpt.download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data-dir", default=None, help="where the prepared folder goes ($DATA_DIR)")
    parser.add_argument("--corpus", choices=("c4", "pydoc"), default="c4", help="c4 (default) or pydoc")
    parser.add_argument(
        "--c4-train-files", type=int, default=1, help="first N of the 1024 C4 en training files"
    )
    parser.add_argument(
        "--c4-validation-files", type=int, default=1, help="first N of the 8 validation files"
    )
    parser.add_argument("--base-url", default=C4_BASE_URL, help="where the C4 en files are (a mirror)")
    parser.add_argument(
        "--vocab-size", type=int, default=50257, help="BPE ids to train (default 50257, GPT-2's)"
    )
    parser.add_argument("--tokenizer", default=None, help="a tokenizer.json to use instead of training one")
    parser.add_argument(
        "--tokenizer-documents", type=int, default=200_000, help="documents the BPE is trained on"
    )
    parser.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (about)")
    parser.add_argument(
        "--synthetic", action="store_true", help="the pydoc corpus (no download); same as --corpus pydoc"
    )
    return parser


@entry_point
def main(argv=None) -> None:

    args = build_parser().parse_args(argv)

    import os

    data_dir = args.data_dir or os.environ.get("DATA_DIR")
    if not data_dir:
        raise UserError("pass --data-dir (or set DATA_DIR)")
    if args.vocab_size < 300:
        raise UserError(f"--vocab-size must be at least 300 (256 bytes and merges), not {args.vocab_size}")
    if args.shard_tokens < 1 or args.tokenizer_documents < 1:
        raise UserError("--shard-tokens and --tokenizer-documents must be positive")
    data_dir = pathlib.Path(data_dir)
    if args.corpus == "pydoc" or args.synthetic:
        corpus = pydoc_documents()
        documents = {split: (lambda split=split: iter(corpus[split])) for split in SPLITS}
        source = "pydoc_data.topics"
    else:
        downloads = data_dir / "downloads"
        train = fetch_c4(c4_file_names("train", args.c4_train_files), downloads, args.base_url)
        validation = fetch_c4(c4_file_names("validation", args.c4_validation_files), downloads, args.base_url)
        documents = {"train": lambda: c4_documents(train), "validation": lambda: c4_documents(validation)}
        source = f"allenai/c4 en: {len(train)} train, {len(validation)} validation files"
    prepare(
        data_dir,
        documents,
        source,
        vocab_size=args.vocab_size,
        tokenizer_file=args.tokenizer,
        tokenizer_documents=args.tokenizer_documents,
        shard_tokens=args.shard_tokens,
    )
    print(f"prepared {data_dir} ({source})")


if __name__ == "__main__":
    main()

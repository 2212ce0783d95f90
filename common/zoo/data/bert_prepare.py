"""BERT pretraining data, prepared: text files into shards of packed, masked samples (``prepare``) and
the data-preparation command line both BERTs' ``scripts/download_data.sh`` run::

    python -m zoo.data.bert_prepare wikipedia --data-dir D   # download and extract a Wikipedia dump
    python -m zoo.data.bert_prepare vocab --data-dir D       # bert-large-uncased vocab.txt, or --train one
    python -m zoo.data.bert_prepare squad --data-dir D       # SQuAD v1.1 train and dev
    python -m zoo.data.bert_prepare squad --from-text TEXT --data-dir D   # a small task made from text
    python -m zoo.data.bert_prepare prepare --input TEXT --vocab vocab.txt --data-dir D

The samples (sequences, packing, masking) and the shard reader are zoo.data.bert's.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from zoo.cli import entry_point
from zoo.cli import parse_args as parse_cli_args
from zoo.data.bert import (
    FORMAT,
    SampleSpec,
    Specials,
    build_samples,
    make_sequences,
    mask_tokens,
    pack_best_fit,
    tokenize_documents,
)
from zoo.errors import UserError
from zoo.manifest import MANIFEST_NAME, DataManifest

# --- preprocessing into shards ---------------------------------------------------------------


def prepare(
    inputs: list[str | Path],
    vocab: str | Path,
    out_dir: str | Path,
    spec: SampleSpec,
    *,
    dupe_factor: int = 1,
    shard_size: int = 65536,
    workers: int = 1,
    seed: int = 12345,
    pack_window: int = 50000,
) -> dict:
    """Text files -> shards of samples + metadata.json in out_dir. Returns the metadata."""
    from zoo.data.text import expand_text_paths

    files = expand_text_paths(inputs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    remove_previous_output(out_dir)
    workers = max(1, min(workers, len(files)))
    jobs = [
        (files[w::workers], str(vocab), str(out_dir), spec, dupe_factor, shard_size, seed, w, pack_window)
        for w in range(workers)
    ]
    if workers == 1:
        results = [_prepare_part(*jobs[0])]
    else:
        with Pool(workers) as pool:
            results = pool.starmap(_prepare_part, jobs)
    shards = [s for part in results for s in part["shards"]]
    if not shards:
        raise UserError(f"no samples could be made from {len(files)} text files (too little text?)")
    meta = {
        "format": FORMAT,
        **dataclasses.asdict(spec),
        "vocab_size": results[0]["vocab_size"],
        "specials": results[0]["specials"],
        "samples": sum(s["samples"] for s in shards),
        "sequences": sum(s["sequences"] for s in shards),
        "tokens": sum(s["tokens"] for s in shards),
        "shards": shards,
    }
    manifest = DataManifest(out_dir)  # what training trusts without reading the shards again
    for part in results:
        for name, largest in part["max_token_ids"].items():
            manifest.record(out_dir / name, max_token_id=largest)
    manifest.write()
    tmp = out_dir / "metadata.json.tmp"
    tmp.write_text(json.dumps(meta, indent=1))
    tmp.replace(out_dir / "metadata.json")
    return meta


def remove_previous_output(out_dir: Path) -> None:
    """Delete what an earlier `prepare` left in out_dir: metadata.json first (the completion marker,
    so a crash from here on leaves no directory that reads as complete), then its shards and the
    temporary files of a crashed run."""
    (out_dir / "metadata.json").unlink(missing_ok=True)
    for stale in [out_dir / "metadata.json.tmp", out_dir / MANIFEST_NAME, *out_dir.glob("shard_*.npz*")]:
        stale.unlink(missing_ok=True)


def _prepare_part(files, vocab, out_dir, spec, dupe_factor, shard_size, seed, part, pack_window):
    from zoo.data.text import read_documents
    from zoo.data.wordpiece import load_tokenizer

    tokenizer = load_tokenizer(vocab)
    specials = Specials.from_tokenizer(tokenizer)
    docs = tokenize_documents(read_documents(files), tokenizer)
    rng = np.random.default_rng([seed, part])
    writer = _ShardWriter(Path(out_dir), f"shard_{part:03d}", shard_size)
    for _ in range(dupe_factor):
        sequences = make_sequences(docs, spec, specials, rng)
        order = rng.permutation(len(sequences))
        for start in range(0, len(order), pack_window):
            window = [sequences[i] for i in order[start : start + pack_window]]
            if spec.packing:
                bins = pack_best_fit(np.array([len(s[0]) for s in window]), spec.max_seq, spec.max_sequences)
                bins = [bins[i] for i in rng.permutation(len(bins))]
            else:
                bins = [[i] for i in range(len(window))]
            samples = build_samples(window, bins, spec, specials)
            if spec.masking == "static":
                _mask_statically(samples, spec, specials, rng)
            writer.add(samples)
    writer.close()
    return {
        "shards": writer.shards,
        "max_token_ids": writer.max_token_ids,
        "vocab_size": specials.vocab_size,
        "specials": dataclasses.asdict(specials),
    }


def _mask_statically(samples: dict, spec: SampleSpec, specials: Specials, rng) -> None:
    n = len(samples["input_ids"])
    positions = np.zeros((n, spec.max_predictions), np.int16 if spec.max_seq < 2**15 else np.int32)
    labels = np.full((n, spec.max_predictions), -1, np.int32)
    for i in range(n):
        masked, positions[i], labels[i] = mask_tokens(
            samples["input_ids"][i], samples["seq_ids"][i], spec, specials, rng
        )
        samples["input_ids"][i] = masked
    samples["mlm_positions"], samples["mlm_labels"] = positions, labels


class _ShardWriter:
    def __init__(self, out_dir: Path, prefix: str, shard_size: int):
        self.out_dir, self.prefix, self.shard_size = out_dir, prefix, shard_size
        self.pending: list[dict] = []
        self.count = 0
        self.shards: list[dict] = []
        self.max_token_ids: dict[str, int] = {}  # {shard file: its largest token id} for the manifest

    def add(self, samples: dict) -> None:
        self.pending.append(samples)
        self.count += len(samples["input_ids"])
        while self.count >= self.shard_size:
            self._flush(self.shard_size)

    def close(self) -> None:
        if self.count:
            self._flush(self.count)

    def _flush(self, n: int) -> None:
        merged = {k: np.concatenate([p[k] for p in self.pending]) for k in self.pending[0]}
        shard = {k: v[:n] for k, v in merged.items()}
        rest = {k: v[n:] for k, v in merged.items()}
        self.pending = [rest] if len(rest["input_ids"]) else []
        self.count -= n
        name = f"{self.prefix}_{len(self.shards):05d}.npz"
        tmp = self.out_dir / (name + ".tmp.npz")
        np.savez(tmp, **shard)
        tmp.replace(self.out_dir / name)
        ids = [shard["input_ids"]] + ([shard["mlm_labels"]] if "mlm_labels" in shard else [])
        self.max_token_ids[name] = max(int(a.max(initial=0)) for a in ids)
        self.shards.append(
            {
                "file": name,
                "samples": n,
                "sequences": int((shard["cls_positions"] >= 0).sum()),
                "tokens": int((shard["seq_ids"] > 0).sum()),
            }
        )


# --- command line ----------------------------------------------------------------------------


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.data.bert_prepare", description="BERT pretraining data preparation."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    wiki = sub.add_parser(
        "wikipedia", help="download (resumable) and extract an English Wikipedia dump to text"
    )
    add_data_dir(wiki, "the dump and the extracted text (DIR/text)")
    wiki.add_argument("--url", default=None, help="dump URL (default: the latest enwiki pages-articles)")
    wiki.add_argument(
        "--dump", default=None, help="use this local dump (.xml or .xml.bz2) instead of downloading"
    )
    wiki.add_argument("--docs-per-file", type=int, default=10000)

    vocab = sub.add_parser("vocab", help="fetch the bert-large-uncased vocab.txt, or train one on text")
    add_data_dir(vocab, "vocab.txt")
    vocab.add_argument("--train", nargs="*", default=None, help="train a WordPiece vocab on these files/dirs")
    vocab.add_argument("--vocab-size", type=int, default=30522)

    squad = sub.add_parser("squad", help="download SQuAD v1.1 train-v1.1.json and dev-v1.1.json")
    add_data_dir(squad, "train-v1.1.json and dev-v1.1.json")
    squad.add_argument(
        "--from-text",
        nargs="+",
        default=None,
        metavar="TEXT",
        help="instead of downloading, write a small task in SQuAD's format from these text files or "
        "directories: each question asks for its paragraph's first word (a tiny model learns it on a CPU)",
    )
    squad.add_argument(
        "--questions", type=int, default=96, help="--from-text: training questions (dev: a quarter as many)"
    )

    prep = sub.add_parser("prepare", help="text -> sharded, packed, (statically) masked samples")
    prep.add_argument("--input", nargs="+", required=True, help="text files or directories")
    prep.add_argument("--vocab", required=True, help="vocab.txt")
    add_data_dir(prep, "the prepared samples (shards + metadata.json), what train.sh --data-dir reads")
    prep.add_argument("--max-seq", type=int, default=128, help="128 for phase 1, 512 for phase 2")
    prep.add_argument("--max-predictions", type=int, default=None, help="default: 20 at 128, 80 at 512")
    prep.add_argument("--no-packing", dest="packing", action="store_false", help="one sequence per sample")
    prep.add_argument("--nsp", action="store_true", help="A/B pairs with next-sentence labels")
    prep.add_argument("--masking", choices=["dynamic", "static"], default="dynamic")
    prep.add_argument("--short-seq-prob", type=float, default=None, help="default: 0.1 unpacked, 0 packed")
    prep.add_argument("--max-sequences", type=int, default=0, help="per packed sample (default max_seq/16)")
    prep.add_argument(
        "--dupe-factor", type=int, default=1, help="passes over the text (static masking: 5-10)"
    )
    prep.add_argument("--shard-size", type=int, default=65536, help="samples per shard")
    prep.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    prep.add_argument("--seed", type=int, default=12345)
    args = parse_cli_args(parser, argv, renamed={"--out": "--data-dir"})
    if not args.data_dir:
        raise UserError(f"{args.command} needs --data-dir DIR (or DATA_DIR)")

    if args.command == "wikipedia":
        _wikipedia(args)
    elif args.command == "vocab":
        _vocab(args)
    elif args.command == "squad":
        _squad(args)
    else:
        max_predictions = args.max_predictions or {128: 20, 512: 80}.get(
            args.max_seq, math.ceil(args.max_seq * 0.15)
        )
        short = args.short_seq_prob if args.short_seq_prob is not None else (0.0 if args.packing else 0.1)
        spec = SampleSpec(
            max_seq=args.max_seq,
            max_predictions=max_predictions,
            packing=args.packing,
            nsp=args.nsp,
            masking=args.masking,
            short_seq_prob=short,
            max_sequences=args.max_sequences,
        )
        meta = prepare(
            args.input, args.vocab, args.data_dir, spec, dupe_factor=args.dupe_factor, shard_size=args.shard_size,
            workers=args.workers, seed=args.seed,
        )  # fmt: skip
        print(
            f"{meta['samples']} samples holding {meta['sequences']} sequences "
            f"({meta['sequences'] / meta['samples']:.2f} per sample, "
            f"{meta['tokens'] / (meta['samples'] * spec.max_seq):.1%} of tokens real) in {len(meta['shards'])} shards "
            f"-> {args.data_dir}"
        )


def add_data_dir(parser: argparse.ArgumentParser, holds: str) -> None:
    parser.add_argument(
        "--data-dir", default=os.environ.get("DATA_DIR"), help=f"folder for {holds} ($DATA_DIR)"
    )


def _wikipedia(args) -> None:
    from zoo.data.text import EXTRACTION_MARKER, WIKIPEDIA_URL, extract_wikipedia

    out = Path(args.data_dir)
    if (out / "text" / EXTRACTION_MARKER).is_file():  # checked before the dump is fetched again
        print(f"{out / 'text'} is complete ({EXTRACTION_MARKER} marker): not extracted again")
        return
    out.mkdir(parents=True, exist_ok=True)
    if args.dump:
        dump = Path(args.dump)
        if not dump.is_file():
            raise UserError(f"Wikipedia dump {dump} does not exist")
    else:
        from zoo.io import download

        url = args.url or WIKIPEDIA_URL
        dump = download(url, dest=out / Path(url).name, progress=True)
    files = extract_wikipedia(dump, out / "text", docs_per_file=args.docs_per_file)
    print(f"{len(files)} text files in {out / 'text'}")


def _squad(args) -> None:
    from zoo.data.squad import SQUAD_URLS, write_first_word_task
    from zoo.io import download

    if args.from_text:
        train, dev = write_first_word_task(args.from_text, args.data_dir, questions=args.questions)
        print(
            f"{train} and {dev}: questions asking for the first word of paragraphs of {' '.join(args.from_text)}"
        )
        return
    for name, url in SQUAD_URLS.items():
        print(download(url, dest=Path(args.data_dir) / name, progress=True))


def _vocab(args) -> None:
    from zoo.data.wordpiece import UNCASED_VOCAB_SIZE, UNCASED_VOCAB_URL, load_tokenizer, train_vocab

    out = Path(args.data_dir)
    if args.train:
        path = train_vocab(args.train, out, vocab_size=args.vocab_size)
    else:
        from zoo.io import download

        out.mkdir(parents=True, exist_ok=True)
        path = download(UNCASED_VOCAB_URL, dest=out / "vocab.txt", progress=True)
        size = load_tokenizer(path).get_vocab_size()
        if size != UNCASED_VOCAB_SIZE:
            raise UserError(f"{path} has {size} tokens, expected {UNCASED_VOCAB_SIZE}")
    print(f"vocabulary: {path} ({load_tokenizer(path).get_vocab_size()} tokens)")


if __name__ == "__main__":
    main()

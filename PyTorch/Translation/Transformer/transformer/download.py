"""WMT14 English-German: download (resumable, verified), extract, clean, joint BPE, binarised shards.

    python -m transformer.download --data-dir /data/wmt14_en_de [--vocab-size 33708]
    python -m transformer.download --data-dir /data/numbers --synthetic

Training text: Europarl v7, Common Crawl, News Commentary v9 (the WMT14 en-de constrained corpora,
as in fairseq's prepare-wmt14en2de.sh); validation: newstest2013; test: newstest2014 (the full
version, 3003 sentences; references from its SGML). Archives are cached in DATA_DIR/downloads and
fetched with zoo.io.download (an interrupted file resumes, a finished one is reused); each
is checked as a tar archive and, where a digest is published (sacrebleu's for the test sets), by md5.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import pathlib
import re
import tarfile
import urllib.parse

from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.io import atomic_write

# (url, md5 or None where none is published, {member path in the archive: local name}).
ARCHIVES = [
    (
        "https://statmt.org/wmt13/training-parallel-europarl-v7.tgz",
        None,
        {"training/europarl-v7.de-en.en": "europarl.en", "training/europarl-v7.de-en.de": "europarl.de"},
    ),
    (
        "https://statmt.org/wmt13/training-parallel-commoncrawl.tgz",
        None,
        {"commoncrawl.de-en.en": "commoncrawl.en", "commoncrawl.de-en.de": "commoncrawl.de"},
    ),
    (
        "https://statmt.org/wmt14/training-parallel-nc-v9.tgz",
        None,
        {
            "training/news-commentary-v9.de-en.en": "news-commentary.en",
            "training/news-commentary-v9.de-en.de": "news-commentary.de",
        },
    ),
    (
        "https://statmt.org/wmt14/dev.tgz",
        None,
        {"dev/newstest2013.en": "newstest2013.en", "dev/newstest2013.de": "newstest2013.de"},
    ),
    (
        "https://statmt.org/wmt14/test-full.tgz",
        "a8cd784e006feb32ac6f3d9ec7eb389a",  # sacrebleu's digest of wmt14/full
        {
            "test-full/newstest2014-deen-src.en.sgm": "newstest2014.en.sgm",
            "test-full/newstest2014-deen-ref.de.sgm": "newstest2014.de.sgm",
        },
    ),
]
TRAIN_CORPORA = ("europarl", "commoncrawl", "news-commentary")
SEGMENT = re.compile(r"<seg[^>]*>(.*)</seg>")


def md5_file(path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def mirrored(url: str, mirror: str | None) -> str:
    """``url`` with its scheme and host replaced by ``mirror`` (a base URL), the path kept."""
    if not mirror:
        return url
    return mirror.rstrip("/") + urllib.parse.urlparse(url).path


def fetch_archives(downloads: pathlib.Path, mirror: str | None = None, archives=None) -> list:
    """Download every archive into ``downloads`` (reused when complete); returns their paths."""
    from zoo.io import download

    paths = []
    for url, md5, _ in archives or ARCHIVES:
        source = mirrored(url, mirror)
        path = download(source, dest=downloads / pathlib.PurePosixPath(url).name, file_format="tar")
        if md5 is not None and md5_file(path) != md5:
            path.unlink()
            raise UserError(f"{source}: md5 differs from the published {md5}; the file was removed")
        paths.append(path)
    return paths


def extract(archive: pathlib.Path, members: dict, raw: pathlib.Path) -> None:
    """Write the named members of ``archive`` to ``raw`` under their local names."""
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        for member, local in members.items():
            if member not in names:
                raise UserError(f"{archive} has no {member}")
            with tar.extractfile(member) as src, atomic_write(raw / local) as tmp:
                tmp.write_bytes(src.read())


def sgm_text(path: pathlib.Path) -> pathlib.Path:
    """The segments of an SGML test file as plain lines (``newstest2014.en.sgm`` -> ``newstest2014.en``)."""
    from transformer.data import write_lines

    lines = [html.unescape(m.group(1)).strip() for m in SEGMENT.finditer(path.read_text(encoding="utf-8"))]
    out = path.with_suffix("")
    write_lines(out, lines)
    return out


def concatenate(raw: pathlib.Path, lang: str) -> pathlib.Path:
    out = raw / f"train.{lang}"
    with open(out, "w", encoding="utf-8") as f:
        for corpus in TRAIN_CORPORA:
            text = (raw / f"{corpus}.{lang}").read_text(encoding="utf-8")
            f.write(text if text.endswith("\n") else text + "\n")
    return out


@entry_point
def main(argv=None) -> pathlib.Path:
    import os

    parser = argparse.ArgumentParser(
        prog="python -m transformer.download",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--data-dir", default=os.environ.get("DATA_DIR"), help="output folder ($DATA_DIR)")
    parser.add_argument("--vocab-size", type=int, default=33708, help="joint BPE vocabulary size")
    parser.add_argument("--shard-size", type=int, default=1_000_000, help="sentence pairs per shard")
    parser.add_argument(
        "--mirror", default=None, help="base URL replacing https://statmt.org (a local mirror)"
    )
    parser.add_argument(
        "--synthetic", action="store_true", help="the generated number-words task (no download)"
    )
    args = parser.parse_args(argv)

    if not args.data_dir:
        raise UserError("pass --data-dir (or set DATA_DIR)")

    from transformer.data import make_numbers, prepare

    data_dir = pathlib.Path(args.data_dir)
    if args.synthetic:
        out = make_numbers(data_dir)
        print(f"number-words task written to {out}")
        return out
    downloads, raw = data_dir / "downloads", data_dir / "raw"
    downloads.mkdir(parents=True, exist_ok=True)
    raw.mkdir(parents=True, exist_ok=True)
    for path, (_, _, members) in zip(fetch_archives(downloads, args.mirror), ARCHIVES, strict=True):
        extract(path, members, raw)
    test_en, test_de = sgm_text(raw / "newstest2014.en.sgm"), sgm_text(raw / "newstest2014.de.sgm")
    splits = {
        "train": (concatenate(raw, "en"), concatenate(raw, "de")),
        "valid": (raw / "newstest2013.en", raw / "newstest2013.de"),
        "test": (test_en, test_de),
    }
    out = prepare(splits, data_dir, vocab_size=args.vocab_size, shard_size=args.shard_size)
    print(f"WMT14 en-de prepared in {out}")
    return out


if __name__ == "__main__":
    main()

"""Raw text for pretraining: Wikipedia dump extraction, the user's text files, sentence splitting.

Documents are written in the layout of the original BERT data: one sentence per line, a blank
line between documents. Reading accepts that layout and also wrapped prose (lines of a paragraph
are joined and split again into sentences), so any plain text the user has will do.
"""

from __future__ import annotations

import bz2
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Iterator
from pathlib import Path

from zoo.errors import UserError

WIKIPEDIA_URL = "https://dumps.wikimedia.org/enwiki/latest/enwiki-latest-pages-articles.xml.bz2"
# written into the extraction folder after its last file: a folder without it is unfinished
EXTRACTION_MARKER = ".complete"

_ABBREVIATIONS = {
    "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "e.g", "i.e", "no", "fig", "inc",
    "ltd", "co", "corp", "u.s", "u.k", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept",
    "oct", "nov", "dec", "vol", "pp", "ed", "approx", "ca",
}  # fmt: skip
_SENTENCE_END = re.compile(r"([.!?][\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(paragraph: str) -> list[str]:
    """Rule-based sentence split: at . ! ? followed by space and a capital or digit, except after
    common abbreviations and single initials."""
    paragraph = " ".join(paragraph.split())
    sentences, start = [], 0
    for m in _SENTENCE_END.finditer(paragraph):
        end = m.end(1)
        last_word = paragraph[start:end].rsplit(" ", 1)[-1].rstrip(".!?\"')]").lower()
        if m.group(1).startswith(".") and (last_word in _ABBREVIATIONS or len(last_word) == 1):
            continue
        sentences.append(paragraph[start:end].strip())
        start = m.end()
    tail = paragraph[start:].strip()
    if tail:
        sentences.append(tail)
    return sentences


def read_documents(paths: Iterable[str | Path]) -> Iterator[list[str]]:
    """Documents (lists of sentences) from text files; a blank line ends a document."""
    for path in expand_text_paths(paths):
        with open(path, encoding="utf-8", errors="replace") as f:
            lines: list[str] = []
            for line in f:
                if line.strip():
                    lines.append(line.strip())
                elif lines:
                    yield _sentences_of(lines)
                    lines = []
            if lines:
                yield _sentences_of(lines)


def _sentences_of(lines: list[str]) -> list[str]:
    return [s for s in split_sentences(" ".join(lines)) if s]


def expand_text_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, and every regular file under a given directory (sorted; hidden and ``.tmp``
    files left out). A Wikipedia extraction folder without its completion marker is an error."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            if is_unfinished_extraction(p):
                raise UserError(
                    f"{p} is an unfinished Wikipedia extraction (no {EXTRACTION_MARKER} marker): "
                    "run scripts/download_data.sh wikipedia again"
                )
            files += sorted(
                f
                for f in p.rglob("*")
                if f.is_file() and not f.name.startswith(".") and not f.name.endswith(".tmp")
            )
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"text input {p} does not exist")
    if not files:
        raise UserError(f"no text files in {[str(p) for p in paths]}")
    unique = {f.resolve(): f for f in files}  # symlinked duplicates (GPL -> GPL-3) once
    return list(unique.values())


# --- Wikipedia -------------------------------------------------------------------------------

_WIKI_PATTERNS = [
    (re.compile(r"<!--.*?-->", re.S), ""),
    (re.compile(r"<ref[^>/]*/>"), ""),
    (re.compile(r"<ref[^>]*>.*?</ref>", re.S), ""),
    (re.compile(r"<[^>]+>"), ""),
    (re.compile(r"\[\[(?:File|Image|Category):[^\[\]]*(?:\[\[[^\]]*\]\][^\[\]]*)*\]\]", re.I), ""),
    (re.compile(r"\[\[[^\]|]*\|([^\]]*)\]\]"), r"\1"),
    (re.compile(r"\[\[([^\]]*)\]\]"), r"\1"),
    (re.compile(r"\[https?://[^\s\]]+ ([^\]]*)\]"), r"\1"),
    (re.compile(r"\[https?://[^\]]*\]"), ""),
    (re.compile(r"'{2,}"), ""),
    (re.compile(r"&nbsp;"), " "),
]


def _strip_templates(text: str) -> str:
    """Remove {{...}} and {|...|} blocks, nested."""
    out, depth, i = [], 0, 0
    while i < len(text):
        two = text[i : i + 2]
        if two in ("{{", "{|"):
            depth += 1
            i += 2
        elif two in ("}}", "|}") and depth:
            depth -= 1
            i += 2
        else:
            if not depth:
                out.append(text[i])
            i += 1
    return "".join(out)


def clean_wikitext(text: str) -> list[str]:
    """Wiki markup -> plain paragraphs (headings, lists, tables, templates, references dropped)."""
    text = _strip_templates(text)
    for pattern, repl in _WIKI_PATTERNS:
        text = pattern.sub(repl, text)
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [
            ln.strip()
            for ln in block.splitlines()
            if ln.strip() and not ln.lstrip().startswith(("=", "*", "#", ":", ";", "|", "!"))
        ]
        paragraph = " ".join(lines)
        if len(paragraph.split()) >= 5:
            paragraphs.append(paragraph)
    return paragraphs


def iter_wikipedia_articles(dump: str | Path) -> Iterator[tuple[str, list[str]]]:
    """(title, paragraphs) of every main-namespace, non-redirect article of a pages-articles dump
    (.xml or .xml.bz2), streamed."""
    opener = bz2.open if str(dump).endswith(".bz2") else open
    with opener(dump, "rb") as f:
        title, ns, redirect = "", "", False
        for _, elem in ET.iterparse(f, events=("end",)):
            tag = elem.tag.rsplit("}", 1)[-1]
            if tag == "title":
                title = elem.text or ""
            elif tag == "ns":
                ns = elem.text or ""
            elif tag == "redirect":
                redirect = True
            elif tag == "text":
                if ns == "0" and not redirect and elem.text:
                    paragraphs = clean_wikitext(elem.text)
                    if paragraphs:
                        yield title, paragraphs
            elif tag == "page":
                title, ns, redirect = "", "", False
                elem.clear()


def is_unfinished_extraction(directory: Path) -> bool:
    """True for a folder that `extract_wikipedia` began and did not finish."""
    if (directory / EXTRACTION_MARKER).is_file():
        return False
    return any(directory.glob("wiki_*.txt")) or any(directory.glob("wiki_*.txt.tmp"))


def extract_wikipedia(dump: str | Path, out_dir: str | Path, *, docs_per_file: int = 10000) -> list[Path]:
    """Write the dump's articles as text files (one sentence per line, blank line between articles),
    then the completion marker. A folder that has the marker is returned as it is; one without it
    (an extraction killed midway) is emptied of its files and extracted again."""
    from zoo.log import MetricsLogger

    out_dir = Path(out_dir)
    if (out_dir / EXTRACTION_MARKER).is_file():
        return sorted(out_dir.glob("wiki_*.txt"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*out_dir.glob("wiki_*.txt"), *out_dir.glob("wiki_*.txt.tmp")]:
        stale.unlink()
    files: list[Path] = []
    handle, count = None, 0
    with MetricsLogger(desc="wikipedia") as log:
        for _, paragraphs in iter_wikipedia_articles(dump):
            if count % docs_per_file == 0:
                if handle:
                    _finish(handle, files)
                handle = open(out_dir / f"wiki_{len(files):05d}.txt.tmp", "w", encoding="utf-8")
            for paragraph in paragraphs:
                handle.write("\n".join(split_sentences(paragraph)) + "\n")
            handle.write("\n")
            count += 1
            if count % 1000 == 0:
                log.progress(count, 1000)
    if handle:
        _finish(handle, files)
    (out_dir / EXTRACTION_MARKER).write_text(f"{count} articles in {len(files)} files\n")
    return files


def _finish(handle, files: list[Path]) -> None:
    handle.close()
    final = Path(handle.name[: -len(".tmp")])
    Path(handle.name).replace(final)
    files.append(final)

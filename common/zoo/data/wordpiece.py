"""WordPiece tokenizer (the `tokenizers` implementation) of both BERTs: load a BERT vocab.txt or train a new one."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from zoo.errors import UserError

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# The vocabulary of bert-large-uncased (identical to bert-base-uncased's): 30,522 WordPieces.
UNCASED_VOCAB_URL = "https://huggingface.co/google-bert/bert-large-uncased/resolve/main/vocab.txt"
UNCASED_VOCAB_SIZE = 30522


def load_tokenizer(vocab: str | Path, *, lowercase: bool = True):
    """A fast WordPiece tokenizer from a BERT vocab.txt."""
    from tokenizers import BertWordPieceTokenizer

    vocab = Path(vocab)
    if not vocab.is_file():
        raise UserError(f"vocabulary {vocab} does not exist (scripts/download_data.sh vocab fetches it)")
    try:
        lines = vocab.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"vocabulary {vocab} is not a UTF-8 text file ({type(e).__name__}: {e})") from None
    missing = [t for t in SPECIAL_TOKENS if t not in lines]
    if missing:
        raise UserError(f"vocabulary {vocab} lacks the special tokens {missing}: not a BERT vocab.txt")
    return BertWordPieceTokenizer(str(vocab), lowercase=lowercase)


def train_vocab(files: Iterable[str | Path], out_dir: str | Path, *, vocab_size: int = 2000) -> Path:
    """Train a WordPiece vocabulary on text files (or directories of them); returns vocab.txt."""
    from tokenizers import BertWordPieceTokenizer

    from zoo.data.text import expand_text_paths

    tokenizer = BertWordPieceTokenizer(lowercase=True)
    tokenizer.train(
        [str(f) for f in expand_text_paths(files)],
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = Path(tokenizer.save_model(str(out_dir))[0])
    return written

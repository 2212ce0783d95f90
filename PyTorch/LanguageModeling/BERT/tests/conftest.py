"""Make the model package importable from any cwd and share small fixtures."""

import os
import pathlib
import sys

import pytest

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
if str(MODEL_DIR) not in sys.path:
    sys.path.insert(0, str(MODEL_DIR))

# Two cores shared with other work: keep each test process to a couple of threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def model_dir() -> pathlib.Path:
    return MODEL_DIR


LICENSES = pathlib.Path("/usr/share/common-licenses")


@pytest.fixture(scope="session")
def english_text() -> pathlib.Path:
    """Real English prose that ships on every Debian machine."""
    if not LICENSES.is_dir():
        pytest.skip("/usr/share/common-licenses is missing")
    return LICENSES


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory, english_text) -> pathlib.Path:
    from zoo.data.wordpiece import train_vocab

    return train_vocab([english_text], tmp_path_factory.mktemp("vocab"), vocab_size=1000)


@pytest.fixture(scope="session")
def packed_data(tmp_path_factory, english_text, tiny_vocab) -> pathlib.Path:
    from zoo.data.bert import SampleSpec
    from zoo.data.bert_prepare import prepare

    out = tmp_path_factory.mktemp("packed128")
    prepare([english_text], tiny_vocab, out, SampleSpec(max_seq=128, max_predictions=20), shard_size=150)
    return out

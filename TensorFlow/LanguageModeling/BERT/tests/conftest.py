"""The model package on sys.path, quiet TensorFlow with few threads, and small shared fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]
REPO = MODEL_DIR.parents[2]
TORCH_PYTHON = REPO / ".venv" / "pytorch" / "bin" / "python"
TORCH_BERT = REPO / "PyTorch" / "LanguageModeling" / "BERT"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMP_NUM_THREADS", "2")
if str(MODEL_DIR) not in sys.path:
    sys.path.insert(0, str(MODEL_DIR))

LICENSES = Path("/usr/share/common-licenses")


@pytest.fixture(scope="session")
def english_text() -> Path:
    """Real English prose that ships on every Debian machine."""
    if not LICENSES.is_dir():
        pytest.skip("/usr/share/common-licenses is missing")
    return LICENSES


@pytest.fixture(scope="session")
def tiny_vocab(tmp_path_factory, english_text) -> Path:
    from zoo.wordpiece import train_vocab

    return train_vocab([english_text], tmp_path_factory.mktemp("vocab"), vocab_size=1000)


@pytest.fixture(scope="session")
def packed_data(tmp_path_factory, english_text, tiny_vocab) -> Path:
    from zoo.bert_data import SampleSpec, prepare

    out = tmp_path_factory.mktemp("packed128")
    prepare([english_text], tiny_vocab, out, SampleSpec(max_seq=64, max_predictions=10), shard_size=400)
    return out


@pytest.fixture
def policy():
    """Restore the global Keras dtype policy after a test that changes it."""
    import keras

    before = keras.mixed_precision.global_policy().name
    yield
    keras.mixed_precision.set_global_policy(before)


@pytest.fixture(scope="session")
def torch_side() -> tuple[Path, Path]:
    """(the PyTorch venv's python, the PyTorch BERT's directory): the other side of the weight round trips."""
    if not TORCH_PYTHON.is_file():
        pytest.skip(f"{TORCH_PYTHON} is missing (make setup-pytorch): the PyTorch side cannot run")
    if not (TORCH_BERT / "bert" / "convert.py").is_file():
        pytest.skip(f"{TORCH_BERT} is not in this checkout: the PyTorch side cannot run")
    return TORCH_PYTHON, TORCH_BERT


@pytest.fixture(scope="session")
def pretrained_run(packed_data, tmp_path_factory):
    """(run dir, summary) of the tiny recipe on the licence texts: shared by the learning, MLPerf,
    SQuAD-initialisation and export tests."""
    import keras
    from bert_tf.pretrain import main

    run = tmp_path_factory.mktemp("pretrained")
    before = keras.mixed_precision.global_policy().name
    recipe = MODEL_DIR / "configs" / "pretrain_tiny_cpu.yaml"
    summary = main(["--recipe", str(recipe), "--data-dir", str(packed_data), "--results-dir", str(run)])
    keras.mixed_precision.set_global_policy(before)
    return run, summary

"""The model package on sys.path, quiet TensorFlow with few threads, and small shared fixtures."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]
REPO = MODEL_DIR.parents[2]
TORCH_PYTHON = REPO / ".venv" / "pytorch" / "bin" / "python"
TORCH_BERT = REPO / "PyTorch" / "LanguageModeling" / "BERT"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("OMP_NUM_THREADS", "1")
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
    from zoo.data.wordpiece import train_vocab

    return train_vocab([english_text], tmp_path_factory.mktemp("vocab"), vocab_size=1000)


@pytest.fixture(scope="session")
def packed_data(tmp_path_factory, english_text, tiny_vocab) -> Path:
    from zoo.data.bert import SampleSpec
    from zoo.data.bert_prepare import prepare

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


def write_first_word_squad(path, english_text, count):
    """Questions whose answer is the first word of a paragraph of licence text (articles and
    punctuation skipped: they normalise to nothing, which no F1 can score)."""
    from zoo.data.squad import normalize_answer
    from zoo.data.text import read_documents

    docs = [d for d in read_documents([english_text]) if len(d) >= 2][:count]
    paragraphs = []
    for i, d in enumerate(docs):
        context = " ".join(d[:2])
        word = next(w for w in context.split() if normalize_answer(w))
        answer = {"text": word, "answer_start": context.index(word)}
        qas = [{"id": f"q{i}", "question": "Which word opens the text?", "answers": [answer]}]
        paragraphs.append({"context": context, "qas": qas})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}))
    return path


@pytest.fixture(scope="session")
def squad_data(tmp_path_factory, english_text):
    data = tmp_path_factory.mktemp("squad")
    write_first_word_squad(data / "train-v1.1.json", english_text, 64)
    (data / "dev-v1.1.json").write_text((data / "train-v1.1.json").read_text())
    return data


@pytest.fixture(scope="session")
def squad_run(pretrained_run, squad_data, tiny_vocab, tmp_path_factory):
    """(run dir, untrained scores, fine-tuned scores): fine-tuning starts from the pretraining run."""
    import keras
    from bert_tf.finetune_squad import main

    run = tmp_path_factory.mktemp("squad_run")
    before_policy = keras.mixed_precision.global_policy().name
    common = [
        "--recipe",
        str(MODEL_DIR / "configs" / "squad_tiny_cpu.yaml"),
        "--vocab",
        str(tiny_vocab),
        "--data-dir",
        str(squad_data),
    ]
    common += ["--init-checkpoint", str(pretrained_run[0])]
    before = main([*common, "--do-predict", "--results-dir", str(tmp_path_factory.mktemp("untrained"))])
    after = main(
        [
            *common,
            "--do-train",
            "--do-predict",
            "--epochs",
            "10",
            "--target-f1",
            "85",
            "--results-dir",
            str(run),
        ]
    )
    keras.mixed_precision.set_global_policy(before_policy)
    return run, before, after

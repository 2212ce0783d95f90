import shutil
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
torch.set_num_threads(1)  # as the subprocesses (OMP_NUM_THREADS=1): the same sums, bit for bit

from rnnt_testutil import TOKENIZER, train_args  # noqa: E402


def needs_espeak():
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (apt-get install espeak-ng): it speaks the test sentences")


@pytest.fixture(scope="session")
def spoken_data(tmp_path_factory):
    """Digit sequences spoken by espeak-ng in LibriSpeech's layout, with manifests and a 29-piece
    SentencePiece model (train: 48 utterances, dev: 8 others at another speaking rate)."""
    needs_espeak()
    from rnnt.download import prepare
    from rnnt.spoken import make_spoken

    data = tmp_path_factory.mktemp("spoken")
    make_spoken(data)
    return prepare(
        data, ["train", "dev"], train_splits=["train"], vocab_size=29, tokenizer=TOKENIZER, mirror=None
    )


@pytest.fixture(scope="session")
def trained(tmp_path_factory, spoken_data):
    """(results dir, summary) of the CPU recipe's whole run on the spoken digits."""
    from rnnt.train import main

    results = tmp_path_factory.mktemp("trained")
    return results, main(train_args(spoken_data, results))

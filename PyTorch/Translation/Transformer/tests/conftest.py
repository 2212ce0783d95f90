import os
import sys
from pathlib import Path

import pytest
import torch

MODEL_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MODEL_DIR))
# One thread a process: make test runs two suites at once on 2 cores.
torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))
RECIPE = MODEL_DIR / "configs" / "numbers_cpu.yaml"


@pytest.fixture(scope="session")
def numbers_data(tmp_path_factory):
    """The English -> German number-words task, prepared (4000 training lines)."""
    from transformer.data import make_numbers

    return make_numbers(tmp_path_factory.mktemp("numbers"))


@pytest.fixture(scope="session")
def small_data(tmp_path_factory):
    """The same task with 600 training lines, for runs that check mechanics rather than quality."""
    from transformer.data import make_numbers

    return make_numbers(tmp_path_factory.mktemp("numbers_small"), train=600, valid=40, test=40)


@pytest.fixture(scope="session")
def trained(tmp_path_factory, numbers_data):
    """(results dir, summary) of a 4-epoch training run of the numbers recipe."""
    from transformer.train import main

    results = tmp_path_factory.mktemp("trained")
    summary = main(
        [
            "--recipe",
            str(RECIPE),
            "--data-dir",
            str(numbers_data),
            "--results-dir",
            str(results),
            "--device",
            "cpu",
        ]
    )
    return results, summary

import os
import sys
from pathlib import Path

import pytest
import torch

MODEL_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MODEL_DIR))
# One thread a process: make test runs two suites at once on 2 cores.
torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))


@pytest.fixture(scope="session")
def digits(tmp_path_factory) -> Path:
    """The digits detection set (retinanet.digits): 16 training and 4 validation images of 32 pixels."""
    from retinanet.digits import make_digits_coco

    return make_digits_coco(tmp_path_factory.mktemp("digits"), images=16, size=32)

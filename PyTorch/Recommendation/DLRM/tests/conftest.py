import os
import sys
from pathlib import Path

import pytest
import torch

MODEL_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MODEL_DIR))
sys.path.insert(0, str(Path(__file__).parent))  # dlrm_testing
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory):
    from dlrm.download import write_synthetic

    path = tmp_path_factory.mktemp("criteo_synthetic")
    write_synthetic(path, train_rows=4096, val_rows=2048, seed=0)
    return path

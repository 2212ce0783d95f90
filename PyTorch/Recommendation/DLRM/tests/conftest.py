import os
import sys
from pathlib import Path

import pytest
import torch

MODEL_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MODEL_DIR))
sys.path.insert(0, str(Path(__file__).parent))  # dlrm_testing
# One thread a process: make test runs two suites at once on 2 cores.
torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))
if not torch.cuda.is_available():
    # test_table_kernels runs the Triton kernels in Triton's interpreter, which must be on before anything
    # imports triton (zoo.torch.triton_interpreted says why); a GPU runs them compiled.
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def synthetic_dir(tmp_path_factory):
    from dlrm.download import write_synthetic

    path = tmp_path_factory.mktemp("criteo_synthetic")
    write_synthetic(path, train_rows=4096, val_rows=2048, seed=0)
    return path

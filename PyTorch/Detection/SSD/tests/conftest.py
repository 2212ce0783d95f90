import os
import sys
from pathlib import Path

import torch

MODEL_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MODEL_DIR))
# One thread a process: make test runs two suites at once on 2 cores.
torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))

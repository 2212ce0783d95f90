import os
import sys
from pathlib import Path

import torch

MODEL_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MODEL_DIR))
torch.set_num_threads(min(2, os.cpu_count() or 1))

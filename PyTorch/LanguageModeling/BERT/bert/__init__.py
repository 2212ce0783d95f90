"""BERT pretraining (phase 1/2, sequence packing, LAMB) and SQuAD v1.1 fine-tuning in PyTorch."""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"
# what pretrain.py, benchmark.py and benchmark.sh --gpus run without --recipe, and SQuAD fine-tuning's
DEFAULT_RECIPE = CONFIG_DIR / "pretrain_phase1_1gpu.yaml"
SQUAD_RECIPE = CONFIG_DIR / "squad_1gpu.yaml"

"""DLRM and DLRM-DCNv2 (MLPerf recommendation) on Criteo: TorchRec-sharded or single-device embeddings."""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
# The recipe train.py, evaluation, export and the benchmark take without --recipe.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "dlrm_dcnv2_small.yaml"

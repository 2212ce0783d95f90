"""Transformer (big/base) for WMT14 English-German: model, data, training, evaluation, export."""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
# The recipe train.py and the benchmark take without --recipe.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "transformer_big_wmt14.yaml"

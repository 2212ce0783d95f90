"""GPT: decoder-only language-model pretraining (GPT-3 and Llama 3 shapes) on FSDP2 and tensor parallelism."""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
# The recipe train.py and the benchmark take without --recipe.
DEFAULT_RECIPE = MODEL_DIR / "configs" / "gpt3_125m.yaml"

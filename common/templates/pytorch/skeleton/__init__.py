"""Skeleton: a model of the zoo in its one shape (docs/ARCHITECTURE.md, "One shape inside every model").

Replace this line with what the model is. The package reads top to bottom: model.py (the network),
data.py (the batches), step.py (one training step), engine.py (the loop), train.py (the wiring), then
evaluate.py, export.py, deploy.py and benchmark.py.
"""

import pathlib

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_RECIPE = MODEL_DIR / "configs" / "tiny_cpu.yaml"

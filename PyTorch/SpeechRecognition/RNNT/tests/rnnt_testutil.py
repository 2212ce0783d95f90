"""Helpers shared by the RNN-T tests: paths, the CPU recipe's arguments, a subprocess environment."""

import os
import pathlib
import sys

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]
RECIPE = MODEL_DIR / "configs" / "spoken_cpu.yaml"
TOKENIZER = "sentencepiece/spoken.model"  # the CPU recipe's data.tokenizer


def train_args(data, results, *extra) -> list:
    return [
        "--recipe",
        str(RECIPE),
        "--data-dir",
        str(data),
        "--results-dir",
        str(results),
        "--device",
        "cpu",
        *extra,
    ]


def subprocess_env() -> dict:
    """The package importable, one thread each, the running interpreter's venv first on PATH."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = str(MODEL_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env

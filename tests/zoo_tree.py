"""Discovery for the repo-wide checks: every model directory and the venv of its framework."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRAMEWORK_VENVS = {"PyTorch": "pytorch", "TensorFlow": "tensorflow", "MXNet": "mxnet"}
# model id -> (seconds, pytest summary line) of each model suite run (test_model_suites.py), for the
# end-of-run table (conftest.py).
SUITE_TIMES: dict[str, tuple[float, str, list[str]]] = {}


def model_dirs() -> list[Path]:
    """Every <Framework>/<Domain>/<Model> directory that holds a README.md."""
    found = []
    for framework in FRAMEWORK_VENVS:
        found += sorted(p.parent for p in (ROOT / framework).glob("*/*/README.md"))
    return found


def venv_bin(model_dir: Path) -> Path:
    framework = model_dir.relative_to(ROOT).parts[0]
    return ROOT / ".venv" / FRAMEWORK_VENVS[framework] / "bin"


def model_env(model_dir: Path) -> dict[str, str]:
    """The environment a user has after `make setup`: the framework's venv first on PATH."""
    env = dict(os.environ)
    env["PATH"] = f"{venv_bin(model_dir)}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def model_id(model_dir: Path) -> str:
    return str(model_dir.relative_to(ROOT))

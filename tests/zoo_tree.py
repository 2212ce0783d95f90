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
    env = _environment()
    env.pop("PYTEST_CURRENT_TEST", None)
    env["PATH"] = f"{venv_bin(model_dir)}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _environment() -> dict[str, str]:
    """A copy of os.environ, taken from a worker thread while pytest's main thread sets and removes
    PYTEST_CURRENT_TEST in it: a copy that meets such a change (KeyError, RuntimeError) is taken again."""
    for _ in range(100):
        try:
            return dict(os.environ)
        except (KeyError, RuntimeError):
            continue
    return dict(os.environ)


def model_id(model_dir: Path) -> str:
    return str(model_dir.relative_to(ROOT))

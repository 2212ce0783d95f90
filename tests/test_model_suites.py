"""Each model's own tests, run in its framework's venv (their pins conflict, so one process each)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from zoo_tree import ROOT, model_dirs, model_env, model_id, venv_bin


@pytest.mark.parametrize("model_dir", model_dirs(), ids=model_id)
def test_model_suite(model_dir):
    python = venv_bin(model_dir) / "python"
    assert python.exists(), f"{python} missing: run `make setup`"
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", str(model_dir / "tests")],
        cwd=ROOT,
        env=model_env(model_dir),
        capture_output=True,
        text=True,
        timeout=1500,
    )
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    print(f"{model_id(model_dir)}: {summary}")
    sys.stdout.flush()
    assert proc.returncode == 0, (
        f"{model_id(model_dir)} tests failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    )

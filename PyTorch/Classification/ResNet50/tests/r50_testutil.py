"""Helpers shared by the ResNet-50 tests (subprocess runs of the package, one-line error checks)."""

import os
import pathlib
import re
import subprocess
import sys

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]


def model_env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(MODEL_DIR) + os.pathsep + env.get("PYTHONPATH", "")
    env["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")
    env["PATH"] = str(pathlib.Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env.update(extra)
    return env


def run_module(module: str, *args, timeout=600, **env) -> subprocess.CompletedProcess:
    """``python -m module args`` in a subprocess; returns the completed process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=model_env(**env), cwd=str(MODEL_DIR),
    )  # fmt: skip


def assert_one_line_error(result: subprocess.CompletedProcess, *needles: str) -> None:
    """Failed, and stderr is one line naming the problem, with no traceback."""
    assert result.returncode != 0, result.stdout + result.stderr
    # Progress and metric lines printed before the failure are logging, not part of the error.
    logging = (":::MLLOG", "[train]", "[eval]", "train  [", "eval  [")
    progress = re.compile(r"^\S+: [\d.]+/[\d.?]+ [KMG]?i?B")  # a download's progress lines
    lines = [
        line
        for line in result.stderr.strip().splitlines()
        if line.strip() and not line.startswith(logging) and not progress.match(line)
    ]
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]

"""Helpers shared by the tests (importable by name: conftest puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parents[1]
REPO_ROOT = MODEL_DIR.parents[2]
# Two cores are shared with other work: keep each MXNet process to one or two threads.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
RECIPE = MODEL_DIR / "configs" / "resnet50_digits_cpu.yaml"


def cpu_runs_bf16() -> bool:
    """Whether oneDNN can run bf16 convolutions here: it needs AVX-512 (avx512bw and up)."""
    try:
        return "avx512bw" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def run_module(
    module: str, *args, env: dict | None = None, timeout: int = 600
) -> subprocess.CompletedProcess:
    """``python -m resnet50_mx.<module> args`` as a script would run it; fails the test on a non-zero exit."""
    full_env = dict(os.environ, PYTHONPATH=str(MODEL_DIR), PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.run(
        [sys.executable, "-m", f"resnet50_mx.{module}", *map(str, args)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
    assert proc.returncode == 0, f"{module} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


def epoch_metrics(results_dir: Path) -> list[dict]:
    """Per train reading (one an epoch where --log-every is the epoch's steps), with the evaluation of the
    same step merged in: loss and train top-1, then top1/top5 (%) and samples where the epoch was evaluated."""
    by_step: dict[int, dict] = {}
    for record in map(json.loads, (Path(results_dir) / "metrics.jsonl").read_text().splitlines()):
        by_step.setdefault(record["step"], {}).update(record["metrics"])
    return [by_step[step] for step in sorted(by_step)]


def training_state(results_dir: Path) -> dict:
    """state.json of the run's newest checkpoint (zoo.mx.save_training_checkpoint)."""
    from zoo.checkpoint_folder import read_state

    return read_state(results_dir, name="resnet50_mx", what="an MXNet ResNet-50 training checkpoint")

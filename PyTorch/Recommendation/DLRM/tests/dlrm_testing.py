"""Helpers of this model's tests: the tiny recipe, running entry points, reading losses."""

import json
import os
import subprocess
import sys
from pathlib import Path

MODEL_DIR = Path(__file__).resolve().parents[1]

# A tiny recipe: batches of 256 rows on one process, losses logged every step (the equality tests compare
# them). A run of N processes adds per_gpu(N): the same global batch, 256 / N rows a process.
TINY = [
    "--set",
    "model.embedding_dim=8",
    "--set",
    "model.bottom_mlp=[16,8]",
    "--set",
    "model.top_mlp=[16]",
    "--set",
    "model.cross_rank=8",
    "--set",
    "run.batch_per_gpu=256",
    "--set",
    "run.log_every=1",
    "--set",
    "eval.batch_size=1024",
]


def per_gpu(nproc: int) -> list[str]:
    """The flag that keeps TINY's global batch of 256 rows over ``nproc`` processes."""
    return ["--batch-size", str(256 // nproc)]


def run_module(
    module: str, *args, nproc: int = 1, check: bool = True, timeout: int = 240, sigterm_at: int | None = None
):
    """``python -m module args`` (torchrun with gloo for nproc > 1; one process sent SIGTERM after optimizer
    step ``sigterm_at``, zoo.testing.sigterm_at_step); returns the CompletedProcess."""
    env = {
        **os.environ,
        "PYTHONPATH": f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    env.pop("WORLD_SIZE", None)
    if nproc > 1:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node",
            str(nproc),
            "--master_port",
            str(29500 + os.getpid() % 1000),
            "-m",
            module,
            *args,
        ]
    elif sigterm_at is not None:
        from zoo.testing import sigterm_at_step

        cmd = sigterm_at_step(sigterm_at, module, *args)
    else:
        cmd = [sys.executable, "-m", module, *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and done.returncode:
        raise AssertionError(
            f"{module} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
        )
    return done


def losses(results_dir) -> dict:
    """{step: loss} of a run's metrics.jsonl."""
    out = {}
    for line in (Path(results_dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["phase"] == "train":
            out[record["step"]] = record["metrics"]["loss"]
    return out

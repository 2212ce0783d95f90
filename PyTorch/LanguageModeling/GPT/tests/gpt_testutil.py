"""Helpers the GPT tests share (conftest.py holds the fixtures)."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import torch

MODEL_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(MODEL_DIR))
# One thread a process: make test runs two suites at once on 2 cores.
torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))
RECIPE = MODEL_DIR / "configs" / "tiny_cpu.yaml"


def train_args(data_dir, results, *extra) -> list[str]:
    return ["--recipe", str(RECIPE), "--data-dir", str(data_dir), "--results-dir", str(results), "--device", "cpu",
            *extra]  # fmt: skip


def torchrun(args: list[str], processes: int = 2, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node N <args>`` on a free port; fails the test on error."""
    env = dict(os.environ, PYTHONPATH=f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}", OMP_NUM_THREADS="1")
    with socket.socket() as probe:  # torchrun's --master_port 0 does not pick a free port: pick one
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        str(processes),
        "--master_port",
        port,
    ]
    proc = subprocess.run([*cmd, *args], capture_output=True, text=True, env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


# The runs the parallel tests compare step by step: 4 updates of 8 sequences, each logged, no evaluation
# before the end, a checkpoint at the end.
PARALLEL_RUN = ("--steps", "4", "--set", "run.log_every=1", "--set", "run.eval_every=null",
                "--set", "run.checkpoint_every=null")  # fmt: skip

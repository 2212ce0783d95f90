import json
import os
import subprocess
import sys

import pytest
from dlrm_testing import MODEL_DIR, run_module


def test_benchmark_reports_ours_and_eager_on_cpu(tmp_path):
    out = tmp_path / "bench.json"
    run_module(
        "dlrm.benchmark",
        "--rows",
        "1000",
        "--batch-size",
        "256",
        "--warmup",
        "1",
        "--iters",
        "2",
        "--windows",
        "1",
        "--amp",
        "bf16",
        "--output",
        str(out),
        "--recipe",
        str(MODEL_DIR / "configs" / "dlrm_small_plain.yaml"),
    )
    report = json.loads(out.read_text())
    names = [r["name"] for r in report["results"]]
    assert names == ["ours (plain embeddings)", "eager PyTorch DLRM (EmbeddingBag per table, SGD)"]
    assert all(r["train_samples_per_s"] > 0 for r in report["results"])
    assert report["meta"]["amp"] == "bf16" and report["meta"]["ratio_ours_to_eager"] > 0


@pytest.mark.timeout(300)
def test_scaling_mode_times_the_training_step_on_one_and_two_processes(tmp_path):
    """benchmark.sh --gpus 2 (zoo.scaling): 1 and 2 gloo processes through train.sh's launcher, the
    recipe's TrainStep (the plain path under DDP) at a fixed batch per process, replicas equal."""
    report = tmp_path / "scaling.json"
    args = ["--gpus", "2", "--recipe", str(MODEL_DIR / "configs" / "dlrm_small_plain.yaml")]
    args += ["--set", "benchmark.rows_per_table=1000", "--batch-size", "64"]
    args += ["--window-seconds", "0.2", "--windows", "1", "--warmup", "1", "--output", str(report)]
    # One thread a process: the CPU test checks the mode, not the machine, and leaves cores to others.
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    done = subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / "benchmark.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(report.read_text())["results"]
    assert [row["gpus"] for row in rows] == [1, 2]
    assert [row["replicas_agree"] for row in rows] == [None, True]
    assert all(row["unit"] == "samples/s" and row["throughput"] > 0 for row in rows)
    assert all(row["batch_per_gpu"] == 64 for row in rows)
    assert "scripts/benchmark.sh --gpus 2" in done.stdout and "equal" in done.stdout

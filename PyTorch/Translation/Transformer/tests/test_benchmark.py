import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformer.benchmark import main

MODEL_DIR = Path(__file__).resolve().parents[1]
RECIPE = MODEL_DIR / "configs" / "numbers_cpu.yaml"


def test_benchmark_measures_ours_and_marian(tmp_path):
    args = ["--recipe", str(RECIPE), "--vocab-size", "100", "--batch-size", "4", "--seq-len", "8"]
    args += ["--warmup", "1", "--iters", "2", "--windows", "1", "--translate-batch", "2", "--device", "cpu"]
    results = main(args + ["--results-dir", str(tmp_path)])
    assert results["train_ours"]["throughput"] > 0
    assert results["train_marian"]["throughput"] > 0
    assert results["translate_beam4_ours"]["throughput"] > 0
    report = json.loads((tmp_path / "benchmark.json").read_text())
    assert report["schema"] == "zoo.bench/v1"
    assert {r["name"] for r in report["results"]} >= {
        "train_ours",
        "train_marian",
        "train_ratio_ours_over_marian",
    }
    ours = results["train_ours"]
    levers = (ours["fused_qkv"], ours["fused_cross_kv"], ours["compile"], ours["fused_adam"])
    assert levers == (True, True, None, False)
    assert ours["first_step_s"] > 0
    assert results["train_marian"]["compiled"] is False


def test_benchmark_levers_follow_set_and_translation_can_be_skipped(tmp_path):
    args = ["--recipe", str(RECIPE), "--vocab-size", "100", "--batch-size", "2", "--seq-len", "6"]
    args += ["--warmup", "0", "--iters", "1", "--windows", "1", "--device", "cpu", "--no-marian"]
    args += ["--no-translation", "--set", "model.fused_qkv=false", "--set", "optimizer.fused=true"]
    results = main(args + ["--results-dir", str(tmp_path)])
    assert set(results) == {"train_ours"}
    assert (results["train_ours"]["fused_qkv"], results["train_ours"]["fused_adam"]) == (False, True)


@pytest.mark.timeout(300)
def test_scaling_mode_times_the_training_step_on_one_and_two_processes(tmp_path):
    """benchmark.sh --gpus 2 (zoo.scaling): 1 and 2 gloo processes through train.sh's launcher, the
    recipe's TrainStep on token batches of run.batch_per_gpu, replicas equal after the timed steps."""
    report = tmp_path / "scaling.json"
    args = ["--gpus", "2", "--recipe", str(RECIPE), "--window-seconds", "0.2", "--windows", "1"]
    args += ["--warmup", "1", "--output", str(report)]
    # One thread a process: the CPU test checks the mode, not the machine, and leaves cores to others.
    env = {**os.environ, "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
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
    assert all(row["unit"] == "tokens/s" and row["throughput"] > 0 for row in rows)
    assert all(row["batch_per_gpu"] == 1024 and row["precision"] == "fp32" for row in rows)
    assert "scripts/benchmark.sh --gpus 2" in done.stdout and "equal" in done.stdout

"""Training on small organ-like volumes: Dice well above a baseline, the MLPerf log passes the checker,
resume after a kill equals an unbroken run, two gloo processes keep equal weights."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import MODEL_DIR, TINY
from unet3d.train import main
from zoo.mlperf import check_log


def readings(results, phase):
    lines = (results / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if json.loads(line)["phase"] == phase]


def test_dice_rises_well_above_a_baseline_and_the_log_passes(prepared, trained):
    train = [r["metrics"]["loss"] for r in readings(trained, "train") if "loss" in r["metrics"]]
    evals = [r["metrics"]["dice"] for r in readings(trained, "eval")]
    assert len(evals) == 2
    assert sum(train[-3:]) < sum(train[:3])
    # all background scores at most 0.5: kidney 0, tumour 1 only in a volume without one
    assert evals[-1] > 0.55, evals
    assert (trained / "tensorboard").is_dir()
    check_log(trained / "mlperf.log", "unet3d")
    # best.pt evaluates alone (its recipe: model, precision, window) to the Dice training scored it at
    out = trained / "eval"
    done = subprocess.run(
        [sys.executable, "-m", "unet3d.evaluate", "--checkpoint", str(trained / "best.pt"), "--data-dir",
         str(prepared), "--device", "cpu", "--results-dir", str(out)],
        capture_output=True, text=True, cwd=MODEL_DIR, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads((out / "eval.json").read_text())["dice"] == pytest.approx(max(evals), abs=1e-5)


def test_resume_after_a_kill_and_after_sigterm_equals_an_unbroken_run(prepared, trained, tmp_path):
    """kill -9 after step 5 (3 steps an epoch, checkpoints every 2 steps): --resume auto redoes step 5 from
    step 4's mid-epoch checkpoint. That run is sent SIGTERM after step 11 (mid-epoch, no checkpoint due):
    exit 143 with a checkpoint of step 11, and --resume auto ends with the unbroken run's weights."""
    from zoo.testing import sigterm_at_step

    killed = tmp_path / "killed"
    args = [*TINY, "--data-dir", str(prepared), "--results-dir", str(killed), "--checkpoint-every", "2"]
    command = [sys.executable, "-m", "unet3d.train", *args, "--exit-after-steps", "5"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=MODEL_DIR, timeout=300)
    assert done.returncode == 137, done.stderr[-2000:]
    command = sigterm_at_step(11, "unet3d.train", *args, "--resume", "auto")
    done = subprocess.run(command, capture_output=True, text=True, cwd=MODEL_DIR, timeout=300)
    assert done.returncode == 143 and "terminated (SIGTERM)" in done.stderr, done.stderr[-2000:]
    stopped = torch.load(killed / "checkpoint.pt", weights_only=False)
    assert (stopped["step"], stopped["epoch"], stopped["step_in_epoch"]) == (11, 3, 2)
    main([*args, "--resume", "auto"])
    assert (killed / "mlperf_resume2.log").is_file()
    unbroken = torch.load(trained / "checkpoint.pt", weights_only=False)
    resumed = torch.load(killed / "checkpoint.pt", weights_only=False)
    assert resumed["step"] == unbroken["step"] == 12
    for name, tensor in unbroken["model"].items():
        torch.testing.assert_close(resumed["model"][name], tensor, rtol=0, atol=0, msg=name)


def test_two_gloo_processes_equal_one_process_of_twice_the_batch(prepared, tmp_path):
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ['PATH']}"}
    two, one = tmp_path / "two", tmp_path / "one"
    command = ["bash", str(MODEL_DIR / "scripts" / "train.sh"), "--gpus", "2", *TINY, "--epochs", "2"]
    command += ["--data-dir", str(prepared), "--results-dir", str(two), "--rdzv-endpoint", "127.0.0.1:29761"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "weights identical on all 2 ranks" in done.stdout
    check_log(two / "mlperf.log", "unet3d")
    main(
        [*TINY, "--epochs", "2", "--batch-size", "4", "--data-dir", str(prepared), "--results-dir", str(one)]
    )
    by_two = torch.load(two / "checkpoint.pt", weights_only=False)
    by_one = torch.load(one / "checkpoint.pt", weights_only=False)
    assert by_one["step"] == by_two["step"] == 2  # 6 cases, 4 a step: 1 step an epoch
    for name, tensor in by_one["model"].items():
        torch.testing.assert_close(by_two["model"][name], tensor, rtol=1e-4, atol=1e-5, msg=name)

import json
import math
import subprocess
import sys

import pytest
import torch
from gpt_testutil import MODEL_DIR, train_args


def metrics(results, phase):
    lines = [json.loads(line) for line in (results / "metrics.jsonl").read_text().splitlines()]
    return [r for r in lines if r.get("phase", "train") == phase]


def test_the_loss_falls_and_the_model_beats_chance_on_real_text(trained):
    results, summary = trained
    losses = [r["metrics"]["loss"] for r in metrics(results, "train")]
    assert losses[-1] < losses[0] - 0.5
    evals = metrics(results, "eval")
    assert [r["step"] for r in evals] == [20, 40]
    assert summary["log_perplexity"] == pytest.approx(evals[-1]["metrics"]["log_perplexity"])
    assert summary["log_perplexity"] < math.log(1024) - 0.8  # uniform guessing: log(vocabulary)
    assert evals[-1]["units"]["log_perplexity"] == ""
    assert list((results / "tensorboard").glob("events.out.tfevents.*"))
    assert (results / "checkpoint" / "checkpoint.pt").is_file() and (results / "tokenizer.json").is_file()


def test_a_tiny_run_fails_the_mlperf_check_only_on_the_target(trained):
    from zoo.mlperf import MLPerfComplianceError, check_log

    results, _ = trained
    with pytest.raises(MLPerfComplianceError) as failure:
        check_log(results / "mlperf.log", "llama31_8b")
    report = str(failure.value)
    assert "5.1.0" in report.splitlines()[0]
    complaints = [line for line in report.splitlines()[1:] if line.startswith(("WARNING", "ERROR"))]
    assert complaints == [
        "WARNING -  Failed checks for eval_accuracy : v['value'] < 1.0",
        "ERROR - FAILED",
    ], report


def test_a_killed_run_resumed_equals_the_unbroken_run(trained, pydoc_data, tmp_path):
    """Checkpoints every 10 steps here; the run dies after step 20 (steps 11-20 lost) and resumes at 10."""
    from gpt.train import main

    results, _ = trained
    every = ["--set", "run.checkpoint_every=10 steps"]
    cmd = [
        sys.executable,
        "-m",
        "gpt.train",
        *train_args(pydoc_data, tmp_path, *every),
        "--exit-after-steps",
        "20",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=MODEL_DIR, timeout=300)
    assert proc.returncode == 137, proc.stderr[-2000:]
    assert torch.load(tmp_path / "checkpoint" / "checkpoint.pt", weights_only=False)["step"] == 10
    resumed = main(train_args(pydoc_data, tmp_path, *every, "--resume", "auto"))
    assert resumed["step"] == 40
    unbroken = torch.load(results / "model.pt", weights_only=False)["model"]
    again = torch.load(tmp_path / "model.pt", weights_only=False)["model"]
    assert unbroken.keys() == again.keys()
    for key in unbroken:
        assert torch.equal(unbroken[key], again[key]), key
    assert (tmp_path / "mlperf_resume1.log").is_file()
    assert resumed["log_perplexity"] == pytest.approx(trained[1]["log_perplexity"], abs=1e-9)


def test_sigterm_checkpoints_the_step_and_the_resumed_run_equals_the_unbroken_run(
    trained, pydoc_data, tmp_path
):
    """SIGTERM after update 25 (a scheduler's preemption, between two scheduled checkpoints): exit 143 with
    a checkpoint of update 25, and --resume auto ends with the unbroken run's weights."""
    from gpt.train import main
    from zoo.testing import sigterm_at_step

    results, _ = trained
    cmd = sigterm_at_step(25, "gpt.train", *train_args(pydoc_data, tmp_path))
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=MODEL_DIR, timeout=300)
    assert proc.returncode == 143 and "terminated (SIGTERM)" in proc.stderr, proc.stderr[-2000:]
    assert torch.load(tmp_path / "checkpoint" / "checkpoint.pt", weights_only=False)["step"] == 25
    assert main(train_args(pydoc_data, tmp_path, "--resume", "auto"))["step"] == 40
    unbroken = torch.load(results / "model.pt", weights_only=False)["model"]
    again = torch.load(tmp_path / "model.pt", weights_only=False)["model"]
    for key in unbroken:
        assert torch.equal(unbroken[key], again[key]), key


def test_the_target_stops_the_run(pydoc_data, tmp_path):
    from gpt.train import main

    summary = main(train_args(pydoc_data, tmp_path, "--target-log-perplexity", "100"))
    assert summary == {"log_perplexity": summary["log_perplexity"], "step": 20, "status": "success"}
    assert '"status": "success"' in (tmp_path / "mlperf.log").read_text()


def test_evaluate_reads_model_pt_and_the_checkpoint_folder(trained, pydoc_data):
    from gpt.evaluate import main

    results, summary = trained
    for checkpoint in (results / "model.pt", results / "checkpoint"):
        result = main(["--checkpoint", str(checkpoint), "--data-dir", str(pydoc_data), "--device", "cpu"])
        assert result["log_perplexity"] == pytest.approx(summary["log_perplexity"], rel=1e-6)
    # best/: the evaluation that beat the others (lower is better), a sharded folder like checkpoint/
    records = [json.loads(line) for line in (results / "metrics.jsonl").read_text().splitlines()]
    scored = [r["metrics"]["log_perplexity"] for r in records if r["phase"] == "eval"]
    result = main(["--checkpoint", str(results / "best"), "--data-dir", str(pydoc_data), "--device", "cpu"])
    assert len(scored) == 2 and result["log_perplexity"] == pytest.approx(min(scored), rel=1e-6)


def test_checkpoints_written_in_the_background_hold_the_same_state(trained, pydoc_data, tmp_path):
    from gpt.inference import load_model
    from gpt.train import main

    results, summary = trained
    again = main(train_args(pydoc_data, tmp_path, "--set", "checkpoint.async=true"))
    assert again["log_perplexity"] == summary["log_perplexity"]
    saved = torch.load(tmp_path / "checkpoint" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 40 and not (tmp_path / "checkpoint.tmp").exists()
    from_shards, _ = load_model(tmp_path / "checkpoint")
    unbroken = torch.load(results / "model.pt", weights_only=False)["model"]
    for key, value in from_shards.state_dict().items():
        assert torch.equal(value, unbroken[key]), key

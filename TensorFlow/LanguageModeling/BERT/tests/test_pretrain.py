"""Pretraining on real English text: the loss falls and the MLM accuracy beats chance; exact resume, after
a SIGTERM too; the MLM-accuracy target stops the run; the MLPerf log passes the compliance checker; two
MultiWorkerMirroredStrategy workers on 127.0.0.1 hold identical weights."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from zoo.testing import tf_workers

MODEL_DIR = Path(__file__).resolve().parents[1]
TINY = str(MODEL_DIR / "configs" / "pretrain_tiny_cpu.yaml")


def _events(path):
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in path.read_text().splitlines()]


def test_loss_falls_and_mlm_accuracy_beats_chance(pretrained_run):
    run, summary = pretrained_run
    losses = summary["losses"]
    assert summary["steps"] == 40 and len(losses) == 40
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.5, losses
    # 1,000 WordPieces: guessing is right 0.1% of the time; the frequent words alone give far more
    assert summary["mlm_accuracy"] > 0.03
    evals = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals if r.get("phase") == "eval"] == [20, 40]
    info = json.loads((run / "run.json").read_text())
    assert info["task"] == "pretraining" and info["config"]["hidden_size"] == 64
    assert sorted(np.load(run / "model.npz").files)[0] == "bert/embeddings/LayerNorm/beta"


def test_mlperf_log_passes_the_checker(pretrained_run):
    from zoo.mlperf import RULESETS, check_log

    run, _ = pretrained_run
    assert RULESETS["bert"] == "5.0.0"  # the ruleset the README names
    check_log(run / "mlperf.log", "bert")
    events = _events(run / "mlperf.log")
    keys = [e["key"] for e in events]
    assert keys.index("init_stop") < keys.index("run_start") < keys.index("block_start")
    values = {e["key"]: e["value"] for e in events}
    assert values["opt_name"] == "lamb" and values["global_batch_size"] == 8
    assert values["opt_learning_rate_training_steps"] == 40 and values["gradient_accumulation_steps"] == 1
    accuracy = [e for e in events if e["key"] == "eval_accuracy"]
    assert [e["metadata"]["epoch_num"] for e in accuracy] == [160, 320]  # samples trained
    assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "success"


def _run(args, policy_restore=True):
    import keras
    from bert_tf.pretrain import main

    before = keras.mixed_precision.global_policy().name
    try:
        return main([str(a) for a in args])
    finally:
        keras.mixed_precision.set_global_policy(before)


def _train_losses(run):
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["metrics"]["loss"] for r in rows if r.get("phase") == "train"]


def test_resume_continues_the_same_run(packed_data, tmp_path):
    """A SIGTERM after step 3 (between the checkpoints of steps 2 and 4) ends the run with exit 143 and a
    checkpoint of step 3; 2 steps more (--stop-after), then the rest after --resume auto == 8 unbroken
    steps (each step's loss and the weights), accumulation 2."""
    from bert_tf.checkpoint import CHECKPOINT_OWNER, CHECKPOINT_WHAT
    from zoo.testing import sigterm_at_step
    from zoo.tf import load_training_checkpoint

    common = ["--recipe", TINY, "--data-dir", packed_data, "--steps", 8, "--accumulation", 2]
    common += ["--eval-every", 100, "--checkpoint-every", 2, "--batch-size", 4, "--log-every", 1]
    whole = _run([*common, "--results-dir", tmp_path / "whole"])
    split = tmp_path / "split"
    env = dict(os.environ, PYTHONPATH=str(MODEL_DIR), TF_CPP_MIN_LOG_LEVEL="2")
    cmd = sigterm_at_step(3, "bert_tf.pretrain", *common, "--results-dir", split)
    stopped = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert "terminated (SIGTERM)" in stopped.stderr and "Traceback" not in stopped.stderr, stopped.stderr[
        -3000:
    ]
    assert load_training_checkpoint(split, name=CHECKPOINT_OWNER, what=CHECKPOINT_WHAT)["step"] == 3
    with pytest.raises(SystemExit, match="pass --resume auto to continue it"):
        _run([*common, "--results-dir", split])
    first = _run([*common, "--results-dir", split, "--resume", "auto", "--stop-after", 2])
    rest = _run([*common, "--results-dir", split, "--resume", "auto"])
    assert first["steps"] == 5 and rest["steps"] == 8
    np.testing.assert_allclose(first["losses"] + rest["losses"], whole["losses"][3:], rtol=1e-5)
    np.testing.assert_allclose(
        _train_losses(split), whole["losses"], rtol=1e-5
    )  # steps 1-3 before the SIGTERM
    a, b = np.load(tmp_path / "whole" / "model.npz"), np.load(split / "model.npz")
    for name in a.files:
        np.testing.assert_allclose(a[name], b[name], rtol=1e-5, atol=1e-6, err_msg=name)
    from zoo.mlperf import check_log

    check_log(split / "mlperf_resume2.log", "bert")


def test_mlm_accuracy_target_stops_the_run(packed_data, tmp_path):
    summary = _run(
        ["--recipe", TINY, "--data-dir", packed_data, "--results-dir", tmp_path, "--eval-every", 2]
        + ["--target-mlm-accuracy", 0.001, "--steps", 30]
    )
    assert summary["steps"] == 2 and summary["reached_target"]
    assert _events(tmp_path / "mlperf.log")[-1]["metadata"]["status"] == "success"
    with pytest.raises(SystemExit, match="is not a fraction"):
        _run(["--recipe", TINY, "--synthetic", "--results-dir", tmp_path / "x", "--target-mlm-accuracy", 72])


def test_two_workers_on_localhost_equal_one_process_with_their_global_batch(packed_data, tmp_path):
    """MultiWorkerMirroredStrategy, TF_CONFIG with 2 workers on 127.0.0.1 (ring all-reduce on the CPU), 4
    samples each: both end with the same weights, and train as one process on the 8 samples of each
    global batch (dropout off): the same losses (a worker reading the wrong slice changes them), and
    weight matrices within a few percent (the reduction order differs, and LAMB's normalised update
    turns tiny gradient differences into visible ones; zero-initialised biases are not compared)."""
    common = ["--recipe", TINY, "--data-dir", str(packed_data), "--steps", "3", "--eval-every", "3"]
    common += ["--set", "dropout=0", "--log-every", "1"]

    def command(index):
        cmd = [sys.executable, "-m", "bert_tf.pretrain", *common, "--results-dir", str(tmp_path / "run")]
        return cmd + ["--batch-size", "4", "--dump-weights", str(tmp_path / "w{worker}.npz")]

    with tf_workers(2, command, tmp_path, PYTHONPATH=str(MODEL_DIR)) as procs:
        single = _run([*common, "--results-dir", tmp_path / "single", "--batch-size", 8])
        codes = [p.wait(timeout=300) for p in procs]
    logs = [(tmp_path / f"worker{i}.log").read_text()[-2000:] for i in range(2)]
    assert codes == [0, 0], logs
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["workers"] == 2 and run["global_batch"] == 8 and run["distribution"] == "multiworker"
    w0, w1 = np.load(tmp_path / "w0.npz"), np.load(tmp_path / "w1.npz")
    assert sorted(w0.files) == sorted(w1.files)
    for key in w0.files:
        np.testing.assert_allclose(w0[key], w1[key], rtol=1e-5, atol=1e-7, err_msg=key)

    losses, single_losses = _train_losses(tmp_path / "run"), _train_losses(tmp_path / "single")
    assert losses[0] == pytest.approx(single_losses[0], rel=1e-6)  # the same weights see the same 8 samples
    assert losses == pytest.approx(single_losses, rel=1e-3)
    both, one = np.load(tmp_path / "run" / "model.npz"), np.load(tmp_path / "single" / "model.npz")
    for key in [k for k in one.files if one[k].ndim == 2]:
        assert np.linalg.norm(both[key] - one[key]) <= 5e-2 * np.linalg.norm(one[key]), key
    assert single["steps"] == 3 and not (tmp_path / "run" / ".worker1_checkpoints").exists()

"""Two MultiWorkerMirroredStrategy workers on 127.0.0.1 (TF_CONFIG, gRPC ring all-reduce on the CPU): the
same weights on both; a SIGTERM to one stops both after the same step (zoo.tf.preemption)."""

import json
import sys
from pathlib import Path

import numpy as np
from zoo.testing import tf_workers

MODEL_DIR = Path(__file__).resolve().parents[1]


def test_two_workers_end_with_identical_weights(digits_tfrecords, tmp_path):
    """Weights and batch-norm statistics agree on both workers after 4 steps."""

    def command(index):
        cmd = [
            sys.executable,
            "-m",
            "resnet50_tf.train",
            "--recipe",
            str(MODEL_DIR / "configs/digits_cpu.yaml"),
        ]
        cmd += [
            "--data-dir",
            str(digits_tfrecords),
            "--results-dir",
            str(tmp_path / "run"),
            "--batch-size",
            "8",
        ]
        return cmd + [
            "--epochs",
            "1",
            "--steps-per-epoch",
            "4",
            "--dump-weights",
            str(tmp_path / "w{worker}.npz"),
        ]

    with tf_workers(2, command, tmp_path, PYTHONPATH=str(MODEL_DIR)) as procs:
        codes = [p.wait(timeout=400) for p in procs]
    logs = [(tmp_path / f"worker{i}.log").read_text()[-2000:] for i in range(2)]
    assert codes == [0, 0], logs
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert run["workers"] == 2 and run["global_batch"] == 16 and run["distribution"] == "multiworker"
    w0, w1 = np.load(tmp_path / "w0.npz"), np.load(tmp_path / "w1.npz")
    assert sorted(w0.files) == sorted(w1.files) and len(w0.files) == 161 + 106
    # The all-reduced gradients are the same on both workers, but each applies its update with
    # vectorised CPU kernels whose rounding can depend on buffer alignment: 1-ulp differences in a
    # handful of elements (seen: 1 of 2.4M) are noise; a missed all-reduce differs by ~1e-2.
    for key in w0.files:
        np.testing.assert_allclose(w0[key], w1[key], rtol=1e-5, atol=1e-7, err_msg=key)
    # only the chief's checkpoint is kept (and, its evaluation the first, as best/); validation ran over
    # both workers' (uneven) shards
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoint").iterdir())
    assert kept == ["best", "latest.json", "step-4"]
    val = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["metrics"]["samples"] for r in val if r.get("phase") == "eval"] == [359]


# The loop of train.py without the model (zoo.tf.preemption, as engine.train_one_epoch asks it): worker 1
# of 2 is sent SIGTERM before step 3; they agree every 2 steps, so both "checkpoint" step 4, exit 143.
WORKER = """
import os, signal
from zoo.cli import entry_point
from zoo.tf import make_runtime, preemption

@entry_point
def main():
    runtime = make_runtime("multiworker")
    with preemption(runtime, every=2) as preempted:
        for step in range(1, 11):
            if runtime.worker_index == 1 and step == 3:
                os.kill(os.getpid(), signal.SIGTERM)
            if preempted.requested(step):
                print(f"checkpoint of step {step}", flush=True)
                preempted.stop()
    print("finished", flush=True)

main()
"""


def test_a_sigterm_to_one_worker_stops_both_after_the_same_step(tmp_path):
    """The strategy's all-reduce carries worker 1's flag to worker 0, and the SIGTERM reaches zoo.cli's
    handler although building the strategy installs TensorFlow's own (zoo.tf gives it back)."""

    def command(index):
        return [sys.executable, "-c", WORKER]

    with tf_workers(2, command, tmp_path, CUDA_VISIBLE_DEVICES="") as procs:
        codes = [p.wait(timeout=180) for p in procs]
    logs = [(tmp_path / f"worker{i}.log").read_text() for i in range(2)]
    assert codes == [143, 143], [log[-2000:] for log in logs]
    for log in logs:
        assert "checkpoint of step 4" in log and "terminated (SIGTERM)" in log, log[-2000:]
        assert "finished" not in log and "Traceback" not in log, log[-2000:]

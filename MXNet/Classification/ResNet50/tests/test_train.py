"""Training on real images (scikit-learn digits): learning, exact resume, dist_sync workers, AMP path."""

from __future__ import annotations

import json
import math
import sys

import mxnet as mx
import numpy as np
import pytest
from mx_resnet_testing import MODEL_DIR, RECIPE, cpu_runs_bf16, epoch_metrics, run_module, training_state
from resnet50_mx.launch import _free_port, launch


def trainable(params: dict) -> dict:
    return {k: v.asnumpy() for k, v in params.items() if "running" not in k}


def test_loss_falls_and_accuracy_beats_chance(trained):
    epochs = epoch_metrics(trained)
    assert len(epochs) == 2
    assert epochs[1]["loss"] < epochs[0]["loss"], epochs
    assert epochs[1]["top1"] > 25, epochs  # 10 classes: chance is 10%
    state = training_state(trained)
    assert state["epoch"] == 2 and state["step"] == 44
    assert state["classes"] == [str(d) for d in range(10)]


SHORT_RUN = ["--recipe", RECIPE, "--epochs", 2, "--steps-per-epoch", 3, "--log-every", 1, "--no-eval",
             "--set", "data.threads=1"]  # fmt: skip


def _short_run(results, data, *extra):
    return run_module("train", *SHORT_RUN, "--data-dir", data, "--results-dir", results, *extra)


@pytest.fixture(scope="module")
def unbroken(tmp_path_factory, digits_rec):
    """The short run (2 epochs of 3 steps, a train reading every step) without a break; its results."""
    results = tmp_path_factory.mktemp("unbroken")
    _short_run(results, digits_rec)
    return results


def assert_same_final_parameters(a_dir, b_dir):
    a = mx.nd.load(str(a_dir / "final.params"))
    b = mx.nd.load(str(b_dir / "final.params"))
    assert sorted(a) == sorted(b)
    for key in a:  # running statistics included
        np.testing.assert_array_equal(a[key].asnumpy(), b[key].asnumpy(), err_msg=key)


def train_losses(results) -> dict:
    """{step: loss} of the train readings in metrics.jsonl (one a step with --log-every 1)."""
    records = map(json.loads, (results / "metrics.jsonl").read_text().splitlines())
    return {r["step"]: r["metrics"]["loss"] for r in records if r["phase"] == "train"}


def test_resume_equals_unbroken_run(tmp_path, digits_rec, unbroken):
    _short_run(tmp_path / "resumed", digits_rec, "--stop-after", 1)
    assert not (tmp_path / "resumed" / "checkpoint" / "step-6").exists()
    stale = tmp_path / "resumed" / "checkpoint" / ".step-6.k2x9q1.tmp"
    stale.mkdir()
    (stale / "model.params").write_bytes(b"half of a checkpoint written when the job was killed")
    _short_run(tmp_path / "resumed", digits_rec, "--resume", "auto")
    assert not stale.exists()  # removed by the next save
    assert_same_final_parameters(unbroken, tmp_path / "resumed")
    assert epoch_metrics(unbroken)[-1]["loss"] == epoch_metrics(tmp_path / "resumed")[-1]["loss"]
    # each job has its own MLPerf log (the checker takes one run per file); the time-limited job aborted
    first, second = (mlperf_events(tmp_path / "resumed" / name) for name in MLPERF_LOGS_OF_RESUMED_RUN)
    assert [e["metadata"]["epoch_num"] for e in first if e["key"] == "epoch_start"] == [1]
    assert [e["metadata"]["epoch_num"] for e in second if e["key"] == "epoch_start"] == [2]
    assert [e["metadata"]["status"] for e in first + second if e["key"] == "run_stop"] == [
        "aborted",
        "aborted",
    ]


MLPERF_LOGS_OF_RESUMED_RUN = ("mlperf.log", "mlperf_resume1.log")


def test_sigterm_mid_epoch_checkpoints_that_step_and_resumes_as_unbroken(tmp_path, digits_rec, unbroken):
    """SIGTERM after step 4 (the first of epoch 2's three): a checkpoint of step 4, exit 143; --resume auto
    skips the batch already trained on and ends as the unbroken run, step by step."""
    import os
    import subprocess

    from zoo.testing import sigterm_at_step

    results = tmp_path / "preempted"
    args = [*SHORT_RUN, "--data-dir", digits_rec, "--results-dir", results]
    stopped = subprocess.run(
        sigterm_at_step(4, "resnet50_mx.train", *args), capture_output=True, text=True, timeout=600,
        env=dict(os.environ, PYTHONPATH=str(MODEL_DIR), PYTHONUNBUFFERED="1"),
    )  # fmt: skip
    err = stopped.stderr[-3000:]
    assert stopped.returncode == 143 and "terminated (SIGTERM)" in err and "Traceback" not in err, err
    state = training_state(results)
    assert (state["step"], state["epoch"], state["step_in_epoch"]) == (4, 1, 1)
    assert sorted(train_losses(results)) == [1, 2, 3, 4]
    _short_run(results, digits_rec, "--resume", "auto")
    assert train_losses(results) == train_losses(unbroken)
    assert_same_final_parameters(unbroken, results)
    final = training_state(results)
    assert (final["step"], final["epoch"]) == (6, 2) and "step_in_epoch" not in final


def mlperf_events(path) -> list[dict]:
    marker = ":::MLLOG "
    return [json.loads(line.split(marker, 1)[1]) for line in path.read_text().splitlines() if marker in line]


def test_mlperf_log_passes_the_compliance_checker(trained, tmp_path):
    from zoo.mlperf import RULESETS, MLPerfComplianceError, check_log

    log = trained / "mlperf.log"
    assert RULESETS["resnet"] == "4.0.0"
    assert check_log(log, "resnet").strip().endswith("SUCCESS")
    events = mlperf_events(log)
    keys = [e["key"] for e in events]
    assert keys[:7] == [
        "submission_benchmark",
        "submission_org",
        "submission_division",
        "submission_status",
        "submission_platform",
        "cache_clear",
        "init_start",
    ]
    per_epoch = ["epoch_start", "epoch_stop", "eval_start", "eval_stop", "eval_accuracy"]
    assert keys[keys.index("init_stop") :] == ["init_stop", "run_start", *per_epoch, *per_epoch, "run_stop"]
    values = {e["key"]: e["value"] for e in events}
    assert values["submission_benchmark"] == "resnet" and values["submission_division"] == "open"
    assert (values["global_batch_size"], values["train_samples"], values["eval_samples"]) == (32, 1438, 359)
    assert values["opt_name"] == "sgd" and values["sgd_opt_base_learning_rate"] == 0.2 * 32 / 256
    accuracy = [e for e in events if e["key"] == "eval_accuracy"]
    assert [e["value"] for e in accuracy] == pytest.approx([m["top1"] / 100 for m in epoch_metrics(trained)])
    assert [e["metadata"]["epoch_num"] for e in accuracy] == [1, 2]
    status = events[-1]["metadata"]["status"]
    assert status == ("success" if max(e["value"] for e in accuracy) >= 0.759 else "aborted")
    # the checker does reject a broken sequence: the same log without its run_stop
    broken = tmp_path / "mlperf.log"
    broken.write_text("".join(line for line in log.read_text().splitlines(True) if '"run_stop"' not in line))
    with pytest.raises(MLPerfComplianceError, match="run_stop"):
        check_log(broken, "resnet")


def test_tensorboard_scalars_of_the_run(trained):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert list((trained / "tensorboard").glob("events.out.tfevents.*"))
    events = EventAccumulator(str(trained / "tensorboard"))
    events.Reload()
    top1 = [(s.step, s.value) for s in events.Scalars("eval/top1")]
    expected = [
        (22 * (i + 1), pytest.approx(m["top1"], rel=1e-6)) for i, m in enumerate(epoch_metrics(trained))
    ]
    assert top1 == expected


def test_target_top1_ends_the_run_with_success(tmp_path, digits_rec):
    from zoo.mlperf import check_log

    run_module(
        "train",
        "--recipe", RECIPE,
        "--data-dir", digits_rec,
        "--epochs", 3,
        "--steps-per-epoch", 2,
        "--set", "data.threads=1",
        "--target-top1", 2,  # percent: ten balanced classes give any network about 10%
        "--results-dir", tmp_path,
    )  # fmt: skip
    assert len(epoch_metrics(tmp_path)) == 1 and epoch_metrics(tmp_path)[0]["top1"] >= 2
    events = mlperf_events(tmp_path / "mlperf.log")
    assert events[-1]["key"] == "run_stop" and events[-1]["metadata"]["status"] == "success"
    check_log(tmp_path / "mlperf.log", "resnet")


def _dist_sync_run(results, data):
    args = ["--recipe", RECIPE, "--data-dir", data, "--epochs", 1, "--steps-per-epoch", 3]
    args += ["--no-eval", "--set", "data.threads=1", "--results-dir", results]
    assert launch([str(a) for a in args], workers=2, servers=1, timeout=300) == 0
    w0 = mx.nd.load(str(results / "final.rank0.params"))
    w1 = mx.nd.load(str(results / "final.rank1.params"))
    t0, t1 = trainable(w0), trainable(w1)
    differ = {k: float(np.abs(t0[k] - t1[k]).max()) for k in t0 if not np.array_equal(t0[k], t1[k])}
    return w0, w1, t0, differ


def test_two_dist_sync_workers_end_with_identical_weights(tmp_path, digits_rec, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(MODEL_DIR))
    results = tmp_path / "run"
    w0, w1, t0, differ = _dist_sync_run(results, digits_rec)
    assert len(t0) == 161  # 53 convolutions + 53 BatchNorm (gamma, beta) + fc weight and bias
    assert differ == {}, f"workers' weights differ: {dict(sorted(differ.items())[:5])}"
    # each worker read its own shard, so their BatchNorm statistics differ: the weights agree by the kvstore
    assert any(not np.array_equal(w0[k].asnumpy(), w1[k].asnumpy()) for k in w0 if "running" in k)
    assert training_state(results)["step"] == 3


AGREE_SCRIPT = """
import mxnet as mx  # the scheduler and the server serve inside this import
from resnet50_mx.processes import Processes
from zoo.cli import Terminated
procs = Processes("dist_sync", 0, horovod=False)
preemption = procs.preemption()
asked = [preemption.requested(10)]  # no flag set: every worker goes on
preemption.signalled = procs.rank == 1  # SIGTERM reached worker 1 only
asked += [preemption.requested(15), preemption.requested(20)]  # agreed every 10 steps: at 20
try:
    preemption.stop()
except Terminated:
    asked.append("stopped")
print(procs.rank, asked)
"""


def test_dist_sync_workers_agree_on_one_workers_sigterm(tmp_path):
    """zoo.cli.Preemption through the kvstore: a flag set on one worker stops both after the same step."""
    import os
    import subprocess

    env = dict(os.environ, PYTHONPATH=str(MODEL_DIR), DMLC_PS_ROOT_URI="127.0.0.1", DMLC_NUM_WORKER="2",
               DMLC_NUM_SERVER="1", DMLC_NODE_HOST="127.0.0.1")  # fmt: skip
    env["DMLC_PS_ROOT_PORT"] = str(_free_port())
    roles = ["scheduler", "server", "worker", "worker"]
    command = [sys.executable, "-c", AGREE_SCRIPT]
    pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs = [subprocess.Popen(command, env=dict(env, DMLC_ROLE=role), text=True, **pipes) for role in roles]
    try:
        outputs = [proc.communicate(timeout=300) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert [proc.returncode for proc in procs] == [0] * 4, [err[-2000:] for _, err in outputs]
    lines = sorted(out.strip() for out, _ in outputs[2:])
    assert lines == [f"{rank} [False, False, True, 'stopped']" for rank in (0, 1)], lines


NEEDS_BF16_CPU = pytest.mark.skipif(
    not cpu_runs_bf16(),
    reason="bf16 AMP on the CPU needs AVX-512 for oneDNN's bf16 kernels; this CPU has none",
)


@NEEDS_BF16_CPU
def test_bf16_amp_trains_on_cpu(tmp_path, digits_rec):
    _short_run(tmp_path, digits_rec, "--amp", "bf16", "--stop-after", 1)
    metrics = epoch_metrics(tmp_path)[-1]
    assert math.isfinite(metrics["loss"]) and metrics["loss"] < 10
    state = training_state(tmp_path)
    assert state["recipe"]["run"]["precision"] == "bf16"
    assert state["loss_scaler"]["_unskipped"] == 3  # the AMP trainer hook ran every step


def test_amp_casts_convolutions_to_bf16():
    code = (
        "import mxnet as mx\n"
        "from mxnet.contrib import amp\n"
        "amp.init(target_dtype='bfloat16')\n"
        "from resnet50_mx.model import build_model\n"
        "net = build_model(10); net.initialize()\n"
        "x = mx.nd.ones((2, 3, 32, 32))\n"
        "print(net.conv1(x).dtype, net.bn1(x[:, :1].tile((1, 64, 1, 1))).dtype)\n"
    )
    import os
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(MODEL_DIR)),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    conv_dtype, bn_dtype = proc.stdout.strip().rsplit(" ", 1)[0], proc.stdout.strip()
    assert "bfloat16" in conv_dtype, proc.stdout
    assert bn_dtype.endswith("float32'>"), proc.stdout  # BatchNorm stays in float32


def test_one_process_two_devices_through_kvstore_device():
    """The multi-GPU path (batch split over devices, kvstore 'device' reduce) on two CPU contexts."""
    from resnet50_mx.model import build_model
    from resnet50_mx.processes import Processes
    from resnet50_mx.step import TrainStep, build_trainer

    ctx = [mx.cpu(0), mx.cpu(1)]
    procs = Processes("device", len(ctx), horovod=False)
    assert procs.kv is not None and procs.kv.type == "device"
    mx.random.seed(0)
    net = build_model(10)
    net.initialize(mx.init.Xavier(), ctx=ctx)
    recipe = {"optimizer": {"name": "sgd", "momentum": 0.9, "weight_decay": 1e-4}}
    trainer = build_trainer(net, recipe, procs, "fp32", base_lr=0.05)
    before = net.fc.weight.data(ctx[0]).asnumpy().copy()
    data = mx.nd.random.uniform(shape=(8, 3, 32, 32))
    label = mx.nd.array([0, 1, 2, 3, 4, 5, 6, 7])
    step = TrainStep(net, trainer, ctx, num_classes=10, smoothing=0.1, amp="fp32", step_batch=8)
    for _ in range(2):
        loss, hits = step(data, label)
    assert math.isfinite(float(loss.asscalar())) and 0 <= float(hits.asscalar()) <= 8
    for name, param in net.collect_params().items():
        if param.grad_req != "null":
            a, b = (param.data(c).asnumpy() for c in ctx)
            np.testing.assert_array_equal(a, b, err_msg=name)
    assert not np.array_equal(net.fc.weight.data(ctx[0]).asnumpy(), before)


@NEEDS_BF16_CPU
def test_evaluation_shows_progress_and_runs_in_bf16(trained, digits_rec):
    proc = run_module(
        "evaluate", "--checkpoint", trained, "--data-dir", digits_rec, "--batch-size", 32, "--amp", "bf16"
    )
    assert "evaluate  [####################] 12/12" in proc.stderr  # 359 images in batches of 32
    assert "items/s" in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    state = training_state(trained)
    assert result["samples"] == 359
    assert abs(result["top1"] - state["metrics"]["top1"]) < 5  # bf16 logits: a few images may flip

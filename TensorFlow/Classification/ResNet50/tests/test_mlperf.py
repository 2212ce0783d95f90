"""The training's MLPerf log (benchmark "resnet") passes mlperf-logging's compliance checker."""

import json
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]


def _events(path):
    return [json.loads(line.split(":::MLLOG ", 1)[1]) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def interrupted_and_resumed(digits_tfrecords, tmp_path_factory):
    """A tiny run stopped after epoch 1 of 2, then resumed with a target it reaches at once."""
    import keras
    from resnet50_tf.train import main

    run = tmp_path_factory.mktemp("mlperf_run")
    common = ["--recipe", MODEL_DIR / "configs" / "digits_cpu.yaml", "--data-dir", digits_tfrecords]
    common += ["--results-dir", run, "--batch-size", 16, "--epochs", 2, "--steps-per-epoch", 2]
    before = keras.mixed_precision.global_policy().name
    main([str(a) for a in [*common, "--max-steps", 2]])
    main([str(a) for a in [*common, "--resume", "auto", "--target-top1", 0]])
    keras.mixed_precision.set_global_policy(before)
    return run


def test_logs_pass_the_compliance_checker(interrupted_and_resumed):
    from zoo.mlperf import RULESETS, check_log

    run = interrupted_and_resumed
    assert RULESETS["resnet"] == "4.0.0"  # the ruleset the README names
    for name in ("mlperf.log", "mlperf_resume1.log"):
        check_log(run / name, "resnet")  # raises MLPerfComplianceError with the checker's output


def test_event_sequence_and_status(interrupted_and_resumed):
    run = interrupted_and_resumed
    first, resumed = _events(run / "mlperf.log"), _events(run / "mlperf_resume1.log")
    keys = [e["key"] for e in first]
    assert keys[:5] == [
        "submission_benchmark",
        "submission_org",
        "submission_division",
        "submission_status",
        "submission_platform",
    ]
    assert first[0]["value"] == "resnet"
    assert keys.index("init_start") < keys.index("init_stop") < keys.index("run_start")
    assert keys[-6:] == ["epoch_start", "epoch_stop", "eval_start", "eval_stop", "eval_accuracy", "run_stop"]
    values = {e["key"]: e["value"] for e in first}
    assert values["global_batch_size"] == 16 and values["train_samples"] == 1438
    assert values["eval_samples"] == 359 and values["opt_name"] == "sgd"
    assert values["sgd_opt_base_learning_rate"] == pytest.approx(0.2 * 16 / 256)
    assert values["model_bn_span"] == 16 and values["gradient_accumulation_steps"] == 1
    accuracy = [e for e in first if e["key"] == "eval_accuracy"]
    assert len(accuracy) == 1 and accuracy[0]["metadata"]["epoch_num"] == 1
    assert 0.0 <= accuracy[0]["value"] < 0.759  # a fraction; two steps are far from MLPerf's target
    assert first[-1]["metadata"]["status"] == "aborted"
    # the resumed run: epoch 2 only, and the target (0%) is reached at its evaluation
    epochs = [e["metadata"]["epoch_num"] for e in resumed if e["key"] in ("epoch_start", "eval_accuracy")]
    assert epochs == [2, 2] and resumed[-1]["metadata"]["status"] == "success"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert not [m for m in metrics if "key" in m]  # MLPerf events live in mlperf.log only


def test_the_checker_rejects_a_broken_log(interrupted_and_resumed, tmp_path):
    from zoo.mlperf import MLPerfComplianceError, check_log

    lines = (interrupted_and_resumed / "mlperf.log").read_text().splitlines(True)
    broken = tmp_path / "mlperf.log"
    broken.write_text("".join(line for line in lines if '"key": "run_start"' not in line))
    with pytest.raises(MLPerfComplianceError, match="run_start"):
        check_log(broken, "resnet")


def test_tensorboard_scalars_beside_the_metrics(interrupted_and_resumed):
    """zoo.log writes every logged metric as a TensorBoard scalar under RESULTS_DIR/tensorboard."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = interrupted_and_resumed / "tensorboard"
    assert sorted(logdir.glob("events.out.tfevents.*"))
    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    scalars = {tag: accumulator.Scalars(tag) for tag in accumulator.Tags()["scalars"]}
    metrics = [
        json.loads(line) for line in (interrupted_and_resumed / "metrics.jsonl").read_text().splitlines()
    ]
    val = [m for m in metrics if m.get("phase") == "eval"]
    assert [(e.step, round(e.value, 4)) for e in scalars["eval/top1"]] == [
        (m["step"], round(m["metrics"]["top1"], 4)) for m in val
    ]
    assert [e.step for e in scalars["train/loss"]] == [2, 4]  # one line per epoch end (2 steps each)

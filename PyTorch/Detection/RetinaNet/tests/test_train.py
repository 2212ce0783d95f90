"""Training on the digits detection set (loss falls, mAP beats random boxes; evaluate.sh and detect.sh
on the result), the MLPerf log and its checker, exact resume, two gloo processes, bad inputs."""

import json
import os
import random
import subprocess
import sys

import pytest
import torch
from PIL import Image
from retinanet.detect import main as detect_main
from retinanet.evaluate import coco_map
from retinanet.evaluate import main as evaluate_main
from retinanet.train import main, parse_args, train
from zoo.errors import UserError

from .conftest import MODEL_DIR

RECIPE = str(MODEL_DIR / "configs" / "digits_cpu.yaml")


def digits_args(data, out, *extra):
    return ["--recipe", RECIPE, "--data-dir", str(data), "--results-dir", str(out), *extra]


def mlperf_records(path):
    return [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in path.read_text().splitlines()
        if ":::MLLOG" in line
    ]


def random_box_results(images, category_ids, per_image=20, seed=0):
    rng = random.Random(seed)
    out = []
    for image in images:
        w, h = image["width"], image["height"]
        for _ in range(per_image):
            x, y = rng.uniform(0, w * 0.7), rng.uniform(0, h * 0.7)
            box = [x, y, rng.uniform(4, w - x), rng.uniform(4, h - y)]
            out.append(
                {
                    "image_id": image["id"],
                    "category_id": rng.choice(category_ids),
                    "bbox": box,
                    "score": rng.random(),
                }
            )
    return out


@pytest.fixture(scope="module")
def trained(digits, tmp_path_factory):
    """120 steps on the 16 training images (one batch an epoch), scored on the same images in a background
    process (a short CPU run learns them; it does not yet generalise to the validation digits)."""
    out = tmp_path_factory.mktemp("trained")
    argv = ["--epochs", "120", "--eval-epochs", "120", "--val-split", "train2017", "--log-every", "1", "--async-eval",
            "--set", "run.checkpoint_every=60 epochs"]  # fmt: skip
    return train(parse_args(digits_args(digits, out, *argv))), out


@pytest.mark.timeout(1200)  # pays for the trained fixture: 602 s beside another suite on 2 cores (2026-11-27)
def test_loss_falls_and_map_beats_random_boxes(trained, digits):
    summary, out = trained
    losses = summary["losses"]
    assert sum(losses[-3:]) / 3 < 0.6 * sum(losses[:3]) / 3, losses
    annotations = digits / "annotations" / "instances_train2017.json"
    data = json.loads(annotations.read_text())
    baselines = [coco_map(str(annotations), random_box_results(data["images"], list(range(1, 11)), seed=seed))["map"]
                 for seed in range(3)]  # fmt: skip
    final = summary["maps"][120]
    assert final["map"] > max(0.01, 5 * max(baselines)), (final, baselines)
    assert (out / "metrics.jsonl").is_file() and list((out / "tensorboard").glob("events.out.tfevents.*"))


def test_evaluate_and_detect_on_the_trained_model(trained, digits, tmp_path, capsys):
    summary, out = trained
    evaluate_main(["--checkpoint", str(out / "model.pt"), "--data-dir", str(digits), "--split", "train2017", "--workers", "0",
                   "--batch-size", "8", "--device", "cpu"])  # fmt: skip
    captured = capsys.readouterr()
    scores = json.loads(captured.out.strip().splitlines()[-1])
    assert "detect train2017" in captured.err
    assert scores["map"] == pytest.approx(summary["maps"][120]["map"], abs=1e-3)
    detect_main(["--checkpoint", str(out / "model.pt"), "--output", str(tmp_path / "png"), "--threshold", "0.2",
                 "--device", "cpu", str(digits / "train2017" / "000001.jpg")])  # fmt: skip
    with Image.open(tmp_path / "png" / "000001.png") as image:
        assert image.size == (32, 32)


def test_mlperf_log_passes_the_checker(trained):
    from zoo.mlperf import MLPerfComplianceError, check_log

    _, out = trained
    log = out / "mlperf.log"
    check_log(log, "retinanet")
    records = mlperf_records(log)
    by_key = {r["key"]: r["value"] for r in records}
    assert by_key["submission_benchmark"] == "retinanet" and by_key["opt_name"] == "adam"
    assert by_key["opt_learning_rate_warmup_epochs"] == 1 and by_key["opt_weight_decay"] == 0.0
    keys = [r["key"] for r in records]
    assert keys[-1] == "run_stop" and keys.count("eval_accuracy") == 1 and keys.count("epoch_start") == 120
    cut = out.parent / "no_accuracy.log"
    cut.write_text("".join(line for line in log.read_text().splitlines(True) if "eval_accuracy" not in line))
    with pytest.raises(MLPerfComplianceError):
        check_log(cut, "retinanet")


def short_args(data, out, *extra):
    return digits_args(data, out, "--steps-per-epoch", "2", "--batch-size", "4", "--epochs", "2",
                       "--eval-epochs", "", "--log-every", "1", *extra)  # fmt: skip


def test_resume_equals_unbroken_run(digits, tmp_path):
    from zoo.testing import sigterm_at_step

    unbroken = train(parse_args(short_args(digits, tmp_path / "a")))
    # SIGTERM after step 1, inside the first epoch (a scheduler's preemption): a checkpoint of that step,
    # exit 143; the resumed run starts at the epoch's second batch and goes on as the unbroken run.
    env = {**os.environ, "PYTHONPATH": f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}"}
    stopped = subprocess.run(
        sigterm_at_step(1, "retinanet.train", *short_args(digits, tmp_path / "b")),
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert stopped.returncode == 143 and "terminated (SIGTERM)" in stopped.stderr, stopped.stderr[-3000:]
    saved = torch.load(tmp_path / "b" / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (saved["epoch"], saved["step_in_epoch"], saved["step"]) == (0, 1, 1)
    with pytest.raises(UserError, match="--resume auto"):  # never overwrites a run by default
        train(parse_args(short_args(digits, tmp_path / "b")))
    resumed = train(parse_args(short_args(digits, tmp_path / "b", "--resume", "auto")))
    assert resumed["epochs"] == 2 and resumed["losses"] == unbroken["losses"][1:]
    assert loss_records(tmp_path / "b") == loss_records(tmp_path / "a")  # step 1 logged before the signal
    state = resumed["model"].state_dict()
    for key, value in unbroken["model"].state_dict().items():
        torch.testing.assert_close(state[key], value, rtol=0, atol=0, msg=key)
    assert (tmp_path / "b" / "mlperf_resume1.log").is_file()


def loss_records(results_dir) -> dict:
    lines = (results_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return {r["step"]: r["metrics"]["loss"] for r in records if "loss" in r["metrics"]}


RANK_SCRIPT = """
import os, sys, torch
from retinanet.train import parse_args, train
summary = train(parse_args(sys.argv[2:]))
torch.save(dict(summary["model"].named_parameters()), f"{sys.argv[1]}/rank{os.environ['RANK']}.pt")
"""


def test_two_gloo_processes_keep_identical_weights(digits, tmp_path):
    script = tmp_path / "rank_train.py"
    script.write_text(RANK_SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531",
           str(script), str(tmp_path), *short_args(digits, tmp_path / "out", "--epochs", "1"), "--device", "cpu"]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0, rank1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    for key in rank0:
        torch.testing.assert_close(rank0[key], rank1[key], rtol=0, atol=0, msg=key)
    saved = torch.load(tmp_path / "out" / "checkpoint.pt", weights_only=False)
    assert saved["step"] == 2 and len(saved["rng"]) == 2


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON"),
        ('{"images": [], "categories": []}', "has no 'annotations' list"),
        ('{"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "category_id": 1, '
         '"bbox": [1, 2, 3]}], "categories": [{"id": 1, "name": "x"}]}', "has bbox [1, 2, 3]"),
        ('{"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 7, "category_id": 1, '
         '"bbox": [1, 2, 3, 4]}], "categories": [{"id": 1, "name": "x"}]}', "unknown image_id 7"),
    ],
)  # fmt: skip
def test_bad_annotation_file_gives_one_line_error(tmp_path, content, message):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "train2017").mkdir()
    if content is not None:
        (tmp_path / "annotations" / "instances_train2017.json").write_text(content)
    with pytest.raises(SystemExit) as e:
        main(digits_args(tmp_path, tmp_path / "out", "--eval-epochs", ""))
    assert message in str(e.value) and "\n" not in str(e.value)
    assert not (tmp_path / "out" / "checkpoint.pt").exists()


def test_synthetic_run_and_bad_model_key(tmp_path):
    summary = train(parse_args(["--recipe", RECIPE, "--synthetic", "--steps-per-epoch", "1", "--epochs", "1",
                                "--batch-size", "2", "--results-dir", str(tmp_path / "s")]))  # fmt: skip
    assert summary["epochs"] == 1 and not summary["maps"]
    with pytest.raises(UserError, match="unknown recipe key .model.depth."):
        train(
            parse_args(
                [
                    "--recipe",
                    RECIPE,
                    "--synthetic",
                    "--set",
                    "model.depth=3",
                    "--results-dir",
                    str(tmp_path / "t"),
                ]
            )
        )

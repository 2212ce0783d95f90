import json
import os
import random
import subprocess
import sys

import pytest
import torch
from maskrcnn.detect import main as detect_main
from maskrcnn.evaluate import coco_map
from maskrcnn.evaluate import main as evaluate_main
from maskrcnn.shapes import make_shapes_coco
from maskrcnn.train import main, parse_args, train
from zoo.errors import UserError

from .conftest import MODEL_DIR

TINY = str(MODEL_DIR / "configs" / "shapes_cpu.yaml")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    root = tmp_path_factory.mktemp("shapes")
    make_shapes_coco(root, images=8, size=128, max_objects=2, seed=0, split="train")
    return root


def run_args(shapes, results, *extra):
    return [
        "--recipe",
        TINY,
        "--data-dir",
        str(shapes),
        "--train-split",
        "train",
        "--val-split",
        "train",
        "--results-dir",
        str(results),
        "--log-every",
        "1",
        *extra,
    ]


def random_results(images, category_ids, seed=0, per_image=10):
    """Random boxes with random rectangular masks: the baseline a trained model must beat."""
    from pycocotools import mask as mask_utils

    rng = random.Random(seed)
    out = []
    for img in images:
        w, h = img["width"], img["height"]
        for _ in range(per_image):
            x, y = rng.randint(0, w - 10), rng.randint(0, h - 10)
            bw, bh = rng.randint(5, w - x), rng.randint(5, h - y)
            m = torch.zeros(h, w, dtype=torch.uint8)
            m[y : y + bh, x : x + bw] = 1
            rle = mask_utils.encode(m.numpy().copy(order="F"))
            out.append(
                {
                    "image_id": img["id"],
                    "category_id": rng.choice(category_ids),
                    "bbox": [x, y, bw, bh],
                    "score": rng.random(),
                    "segmentation": {"size": rle["size"], "counts": rle["counts"].decode()},
                }
            )
    return out


def test_short_run_learns_logs_and_scores(shapes, tmp_path, capsys):
    from zoo.mlperf import check_log

    out = tmp_path / "out"
    # 12 epochs of 4 steps: after 6 the masks of 2 of 4 seeds were still at 0 mAP; after 12 all 4 learnt
    # (mask mAP 0.04-0.24, 2026-11-27)
    summary = train(parse_args(run_args(shapes, out, "--async-eval", "--epochs", "12")))
    losses = summary["losses"]
    assert len(losses) == 48
    assert sum(losses[-4:]) / 4 < 0.5 * sum(losses[:2]) / 2, losses
    ann = shapes / "annotations" / "instances_train.json"
    data = json.loads(ann.read_text())
    baseline = coco_map(str(ann), random_results(data["images"], [1, 2, 3]))
    stats = summary["maps"][12]
    assert stats["mask_map"] > max(0.002, 2 * baseline["mask_map"]), (stats, baseline)
    # The MLPerf log of the run passes the maskrcnn compliance checker (open division).
    check_log(out / "mlperf.log", "maskrcnn")
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert any(x["phase"] == "eval" and x["metrics"]["mask_map"] == stats["mask_map"] for x in lines)
    assert list((out / "tensorboard").glob("events.*"))
    # The evaluation script on the saved model gives the numbers training logged.
    capsys.readouterr()
    evaluate_main(
        [
            "--checkpoint",
            str(out / "model.pt"),
            "--data-dir",
            str(shapes),
            "--split",
            "train",
            "--workers",
            "0",
        ]
    )
    scored = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert scored["mask_map"] == pytest.approx(stats["mask_map"], abs=1e-6)
    assert scored["map"] == pytest.approx(stats["map"], abs=1e-6)
    # detect writes a PNG of the image's size (drawing itself: test_data.test_draw_*).
    from PIL import Image

    image = shapes / "train" / "000001.png"
    detect_main(
        [
            "--checkpoint",
            str(out / "model.pt"),
            "--output",
            str(tmp_path / "png"),
            "--threshold",
            "0.0",
            str(image),
        ]
    )
    assert Image.open(tmp_path / "png" / "000001.png").size == Image.open(image).size


def test_resume_continues_like_an_unbroken_run(shapes, tmp_path):
    common = [
        "--epochs",
        "2",
        "--steps-per-epoch",
        "2",
        "--eval-epochs",
        "",
        "--set",
        "run.checkpoint_every=1 epochs",
    ]
    from zoo.testing import sigterm_at_step

    whole = train(parse_args(run_args(shapes, tmp_path / "whole", *common)))
    # SIGTERM after step 1, inside the first epoch (a scheduler's preemption): a checkpoint of that step,
    # exit 143; the resumed run starts at the epoch's second batch and goes on as the unbroken run.
    env = {**os.environ, "PYTHONPATH": f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}"}
    stopped = subprocess.run(
        sigterm_at_step(1, "maskrcnn.train", *run_args(shapes, tmp_path / "split", *common)),
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert stopped.returncode == 143 and "terminated (SIGTERM)" in stopped.stderr, stopped.stderr[-3000:]
    saved = torch.load(tmp_path / "split" / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (saved["epoch"], saved["step_in_epoch"], saved["step"]) == (0, 1, 1)
    resumed = train(parse_args(run_args(shapes, tmp_path / "split", *common, "--resume", "auto")))
    assert resumed["losses"] == whole["losses"][1:]
    assert loss_records(tmp_path / "split") == loss_records(tmp_path / "whole")  # step 1 before the signal
    a, b = whole["model"].state_dict(), resumed["model"].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "split" / "mlperf_resume1.log").is_file()
    # A results folder with a checkpoint needs --resume: a one-line error, the checkpoint untouched.
    before = (tmp_path / "split" / "checkpoint.pt").read_bytes()
    with pytest.raises(UserError, match="--resume auto"):
        train(parse_args(run_args(shapes, tmp_path / "split", *common)))
    assert (tmp_path / "split" / "checkpoint.pt").read_bytes() == before


def loss_records(results_dir) -> dict:
    lines = (results_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return {r["step"]: r["metrics"]["loss"] for r in records if "loss" in r["metrics"]}


def test_two_process_torchrun_reaches_target_and_stops(shapes, tmp_path):
    from zoo.mlperf import check_log

    env = {
        **os.environ,
        "PYTHONPATH": f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    args = run_args(
        shapes, tmp_path / "ddp", "--epochs", "3", "--steps-per-epoch", "1", "--eval-epochs", "1,2,3"
    )
    args += ["--target-map", "0.0", "--set", "eval.target_mask_map=0.0", "--amp", "bf16", "--device", "cpu"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29531"]
    done = subprocess.run(
        [*cmd, "-m", "maskrcnn.train", *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "reached after epoch 1" in done.stderr
    log = (tmp_path / "ddp" / "mlperf.log").read_text()
    assert '"global_batch_size", "value": 4' in log and '"status": "success"' in log
    check_log(tmp_path / "ddp" / "mlperf.log", "maskrcnn")


def test_bad_flags_and_paths_end_in_one_line(shapes, tmp_path):
    with pytest.raises(UserError, match="--config was renamed: use --recipe"):
        parse_args(["--config", TINY])
    with pytest.raises(SystemExit, match="does not exist"):
        main(run_args(tmp_path / "nowhere", tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="accumulation must be a positive integer"):
        main(run_args(shapes, tmp_path / "out", "--accumulate", "0"))

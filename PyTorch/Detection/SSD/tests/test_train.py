import os
import random
import subprocess
import sys

import pytest
import torch
from PIL import Image
from ssd.detect import main as detect_main
from ssd.evaluate import coco_map
from ssd.evaluate import main as evaluate_main
from ssd.shapes import make_shapes_coco
from ssd.train import FLAG_TO_RECIPE, main, parse_args, train
from zoo.coco import training_recipe
from zoo.errors import UserError

from .conftest import MODEL_DIR

SMOKE = str(MODEL_DIR / "configs" / "shapes_smoke.yaml")


def random_box_results(ann_images, category_ids, seed=0, per_image=20):
    rng = random.Random(seed)
    out = []
    for img in ann_images:
        w, h = img["width"], img["height"]
        for _ in range(per_image):
            x, y = rng.uniform(0, w * 0.8), rng.uniform(0, h * 0.8)
            out.append(
                {
                    "image_id": img["id"],
                    "category_id": rng.choice(category_ids),
                    "bbox": [x, y, rng.uniform(5, w - x), rng.uniform(5, h - y)],
                    "score": rng.random(),
                }
            )
    return out


def test_short_run_loss_falls_and_map_beats_random_boxes(tmp_path, capsys):
    import json

    image_dir, ann = make_shapes_coco(tmp_path / "shapes", images=8, size=96, max_objects=2, seed=0)
    summary = train(
        parse_args(
            [
                "--recipe",
                SMOKE,
                "--data-dir",
                str(tmp_path / "shapes"),
                "--train-split",
                "train",
                "--val-split",
                "train",
                "--results-dir",
                str(tmp_path / "out"),
                "--log-every",
                "1",
                "--async-eval",  # scored in a background process; collected before training returns
            ]
        )
    )
    losses = summary["losses"]
    assert len(losses) == 24
    assert sum(losses[-3:]) / 3 < 0.3 * sum(losses[:3]) / 3, losses
    data = json.loads(ann.read_text())
    baseline = coco_map(str(ann), random_box_results(data["images"], [1, 2, 3]))["map"]
    assert baseline < 0.02
    assert summary["maps"][12]["map"] > max(0.05, 5 * baseline), (summary["maps"], baseline)
    assert (tmp_path / "out" / "metrics.jsonl").is_file()
    # The evaluation script on the saved model gives the number training logged.
    evaluate_main(
        [
            "--checkpoint",
            str(tmp_path / "out" / "model.pt"),
            "--data-dir",
            str(tmp_path / "shapes"),
            "--split",
            "train",
            "--amp",
            "fp32",  # training's evaluation ran in the smoke recipe's fp32
            "--workers",
            "0",
            "--batch-size",
            "8",
        ]
    )
    captured = capsys.readouterr()
    stats = json.loads(captured.out.strip().splitlines()[-1])
    # Evaluation draws its progress: batches done of total (one batch of 8 images here).
    assert "detect train" in captured.err and "1/1" in captured.err
    assert stats["map"] == pytest.approx(summary["maps"][12]["map"], abs=0.02)
    # The trained model draws its detections into a PNG of the input's size.
    detect_main(
        [
            "--checkpoint",
            str(tmp_path / "out" / "model.pt"),
            "--output",
            str(tmp_path / "png"),
            "--threshold",
            "0.3",
            str(image_dir / "000001.jpg"),
        ]
    )
    with Image.open(tmp_path / "png" / "000001.png") as im:
        assert im.size == (96, 96)


def mlperf_records(path):
    import json

    return [
        json.loads(line.split(":::MLLOG ", 1)[1])
        for line in path.read_text().splitlines()
        if ":::MLLOG" in line
    ]


def test_mlperf_log_passes_the_compliance_checker_and_tensorboard_gets_scalars(tmp_path):
    from zoo.mlperf import RULESETS, MLPerfComplianceError, check_log

    make_shapes_coco(tmp_path / "shapes", images=4, size=64, max_objects=2, seed=1)
    out = tmp_path / "out"
    argv = [
        "--recipe",
        SMOKE,
        "--data-dir",
        str(tmp_path / "shapes"),
        "--train-split",
        "train",
        "--val-split",
        "train",
        "--results-dir",
        str(out),
        "--set",
        "run.epochs=2",
        "--set",
        "run.batch_per_gpu=2",
        "--steps-per-epoch",
        "1",
        "--eval-epochs",
        "1,2",
        "--set",
        "eval.precise_bn_batches=0",
    ]
    summary = train(parse_args(argv))
    log = out / "mlperf.log"
    check_log(log, "ssd")  # raises MLPerfComplianceError if the checker rejects the log
    assert RULESETS["ssd"] == "1.0.0"  # the ruleset the README names
    records = mlperf_records(log)
    keys = [r["key"] for r in records]
    assert keys[0] == "submission_benchmark" and records[0]["value"] == "ssd"
    order = ["init_start", "init_stop", "run_start", "epoch_start", "epoch_stop", "eval_start", "eval_stop"]
    assert [keys.index(k) for k in order] == sorted(keys.index(k) for k in order), keys
    assert keys[-1] == "run_stop" and records[-1]["metadata"]["status"] == "aborted"  # no target set
    accuracy = [r for r in records if r["key"] == "eval_accuracy"]
    maps = sorted((epoch, scores["map"]) for epoch, scores in summary["maps"].items())
    assert [(r["metadata"]["epoch_num"], r["value"]) for r in accuracy] == maps
    by_key = {r["key"]: r["value"] for r in records}
    assert by_key["global_batch_size"] == 2 and by_key["train_samples"] == 2 and by_key["eval_samples"] == 4
    assert by_key["opt_learning_rate_decay_boundary_epochs"] == [] and by_key["seed"] == 0
    assert keys.count("epoch_start") == 2 and keys.count("eval_accuracy") == 2
    # The checker does reject a log without the quality metric.
    cut = tmp_path / "no_accuracy.log"
    cut.write_text("".join(line for line in log.read_text().splitlines(True) if "eval_accuracy" not in line))
    with pytest.raises(MLPerfComplianceError):
        check_log(cut, "ssd")
    # The metrics logger's TensorBoard scalars sit beside metrics.jsonl.
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    # A resumed run writes its own log (one run per file), which passes the checker too.
    first_log = log.read_text()
    train(parse_args([*argv, "--set", "run.epochs=3", "--eval-epochs", "3", "--resume", "auto"]))
    assert log.read_text() == first_log
    check_log(out / "mlperf_resume1.log", "ssd")


def test_mlperf_log_reports_success_once_the_target_is_reached(tmp_path):
    make_shapes_coco(tmp_path / "shapes", images=4, size=64, max_objects=2, seed=1)
    out = tmp_path / "out"
    argv = [
        "--recipe",
        SMOKE,
        "--data-dir",
        str(tmp_path / "shapes"),
        "--train-split",
        "train",
        "--val-split",
        "train",
        "--results-dir",
        str(out),
        "--set",
        "run.batch_per_gpu=2",
        "--steps-per-epoch",
        "1",
        "--epochs",
        "3",
        "--eval-epochs",
        "1,2,3",
        "--target-map",
        "0.0",
    ]
    summary = train(parse_args(argv))
    assert summary["epochs"] == 1  # stopped at the first evaluation: any mAP reaches 0.0
    records = mlperf_records(out / "mlperf.log")
    assert records[-1]["key"] == "run_stop" and records[-1]["metadata"]["status"] == "success"


def test_async_scorer_scores_in_a_background_process(tmp_path):
    from ssd.evaluate import coco_map
    from zoo.coco import AsyncScorer

    _, ann = make_shapes_coco(tmp_path, images=3, size=64, seed=5)
    import json

    data = json.loads(ann.read_text())
    perfect = [
        {"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 0.9}
        for a in data["annotations"]
    ]
    scorer = AsyncScorer(coco_map)
    scorer.submit(1, str(ann), perfect)
    scorer.submit(2, str(ann), random_box_results(data["images"], [1, 2, 3]))
    (e1, s1), (e2, s2) = scorer.done(wait=True)
    scorer.close()
    assert (e1, e2) == (1, 2)
    assert s1["map"] == pytest.approx(1.0) and s2["map"] < 0.1


def synthetic_args(out, *extra):
    return [
        "--recipe",
        SMOKE,
        "--synthetic",
        "--steps-per-epoch",
        "1",
        "--batch-size",
        "2",
        "--epochs",
        "2",
        "--eval-epochs",
        "",
        "--results-dir",
        str(out),
        "--log-every",
        "1",
        *extra,
    ]


def test_resume_equals_unbroken_run(tmp_path):
    from zoo.testing import sigterm_at_step

    whole = train(parse_args(synthetic_args(tmp_path / "a")))
    unbroken = whole["model"].state_dict()
    # SIGTERM after step 1, the first epoch's last (a scheduler's preemption): a checkpoint of that step,
    # exit 143; the resumed run ends that epoch (its checkpoint) and goes on as the unbroken run.
    env = {**os.environ, "PYTHONPATH": f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}"}
    stopped = subprocess.run(
        sigterm_at_step(1, "ssd.train", *synthetic_args(tmp_path / "b")),
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert stopped.returncode == 143 and "terminated (SIGTERM)" in stopped.stderr, stopped.stderr[-3000:]
    saved = torch.load(tmp_path / "b" / "checkpoint.pt", map_location="cpu", weights_only=False)
    assert (saved["epoch"], saved["step_in_epoch"], saved["step"]) == (0, 1, 1)
    with pytest.raises(UserError, match="--resume auto"):  # never overwrites a run by default
        train(parse_args(synthetic_args(tmp_path / "b")))
    resumed = train(parse_args(synthetic_args(tmp_path / "b", "--resume", "auto")))
    assert resumed["epochs"] == 2 and resumed["losses"] == whole["losses"][1:]
    assert loss_records(tmp_path / "b") == loss_records(tmp_path / "a")  # step 1 logged before the signal
    state = resumed["model"].state_dict()
    for k, v in unbroken.items():
        torch.testing.assert_close(state[k], v, rtol=0, atol=0, msg=k)


def loss_records(results_dir) -> dict:
    import json

    lines = (results_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return {r["step"]: r["metrics"]["loss"] for r in records if "loss" in r["metrics"]}


def load_config(args):
    return training_recipe(args, FLAG_TO_RECIPE)[0]


def test_set_is_repeatable_and_flags_override_the_recipe():
    argv = ["--recipe", SMOKE, "--set", "run.epochs=1", "--set", "run.batch_per_gpu=2", "--amp", "fp32"]
    run = load_config(parse_args(argv))["run"]
    assert (run["epochs"], run["batch_per_gpu"], run["precision"]) == (1, 2, "fp32")
    recipe = load_config(
        parse_args(["--recipe", SMOKE, "--set", "optimizer.base_lr=0.5", "--target-map", "0.23"])
    )
    assert recipe["optimizer"]["base_lr"] == 0.5 and recipe["run"]["target"]["value"] == 0.23
    # The CPU smoke recipe's own epochs and precision.
    assert recipe["run"]["epochs"] == 12 and recipe["run"]["precision"] == "fp32"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config", "x.yaml"], "--config was renamed: use --recipe"),
        (["--precision", "fp16"], "--precision was renamed: use --amp"),
        (["--amp", "none"], "--amp none was renamed: use --amp fp32"),
        (["--no-resume"], "--no-resume was renamed: use --resume none"),
        (["--resume"], "--resume takes a value now: use --resume auto"),
        (["--resume", "--synthetic"], "--resume takes a value now: use --resume auto"),
        (["--steps", "1"], "--steps was renamed: use --steps-per-epoch"),
    ],
)
def test_old_spellings_end_in_one_line(argv, message):
    with pytest.raises(UserError) as e:
        parse_args(argv)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_recipe_with_the_old_precision_key_is_a_one_line_error(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text(f"base: {SMOKE}\nprecision: fp16\n")
    with pytest.raises(UserError, match="unknown recipe key 'precision'.*did you mean 'run.precision'"):
        load_config(parse_args(["--recipe", str(old)]))


def test_resume_path_continues_that_checkpoint(tmp_path):
    first = train(parse_args(synthetic_args(tmp_path / "a", "--stop-epoch", "1")))
    assert first["epochs"] == 1
    moved = tmp_path / "kept.pt"
    (tmp_path / "a" / "checkpoint.pt").rename(moved)
    resumed = train(parse_args(synthetic_args(tmp_path / "b", "--resume", str(moved))))
    assert resumed["epochs"] == 2
    with pytest.raises(UserError, match="no such checkpoint"):
        train(parse_args(synthetic_args(tmp_path / "c", "--resume", str(tmp_path / "missing.pt"))))


RANK_SCRIPT = """
import sys, torch
from ssd.train import parse_args, train
summary = train(parse_args(sys.argv[2:]))
import os
torch.save({k: v for k, v in summary["model"].named_parameters()}, f"{sys.argv[1]}/rank{os.environ['RANK']}.pt")
"""


def test_torchrun_two_processes_keep_identical_weights(tmp_path):
    script = tmp_path / "rank_train.py"
    script.write_text(RANK_SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": f"{MODEL_DIR}:{os.environ.get('PYTHONPATH', '')}",
        "OMP_NUM_THREADS": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--master_port",
        "29517",
        str(script),
        str(tmp_path),
        *synthetic_args(tmp_path / "out", "--epochs", "1"),
        "--device",
        "cpu",
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    w0 = torch.load(tmp_path / "rank0.pt")
    w1 = torch.load(tmp_path / "rank1.pt")
    init = torch.load(tmp_path / "out" / "checkpoint.pt", weights_only=False)["model"]
    assert w0.keys() == w1.keys()
    for k in w0:
        torch.testing.assert_close(w0[k], w1[k], rtol=0, atol=0, msg=k)
    for k in w0:  # rank 0's checkpoint holds the same trained weights
        torch.testing.assert_close(init[k], w0[k], rtol=0, atol=0, msg=k)


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "does not exist"),
        ("{not json", "is not valid JSON"),
        ('{"images": [], "categories": []}', "has no 'annotations' list"),
        (
            '{"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 1, "category_id": 1, '
            '"bbox": [1, 2, 3]}], "categories": [{"id": 1, "name": "x"}]}',
            "has bbox [1, 2, 3]",
        ),
        (
            '{"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"image_id": 7, "category_id": 1, '
            '"bbox": [1, 2, 3, 4]}], "categories": [{"id": 1, "name": "x"}]}',
            "unknown image_id 7",
        ),
    ],
)
def test_bad_annotation_file_gives_one_line_error(tmp_path, content, message):
    (tmp_path / "annotations").mkdir()
    (tmp_path / "train2017").mkdir()
    if content is not None:
        (tmp_path / "annotations" / "instances_train2017.json").write_text(content)
    with pytest.raises(SystemExit) as e:
        main(
            [
                "--recipe",
                SMOKE,
                "--data-dir",
                str(tmp_path),
                "--eval-epochs",
                "",
                "--results-dir",
                str(tmp_path / "out"),
            ]
        )
    assert message in str(e.value) and "\n" not in str(e.value)


def test_train_script_reports_bad_data_dir_in_one_line(tmp_path):
    proc = subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / "train.sh"), "--data-dir", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHON": sys.executable},  # the venv's interpreter, activated or not
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].endswith("does not exist")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "results").exists()  # a failed start leaves no results folder behind

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
from ssd.train import main, parse_args, train

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
    baseline = coco_map(str(ann), random_box_results(data["images"], [1, 2, 3]))["mAP"]
    assert baseline < 0.02
    assert summary["maps"][12] > max(0.05, 5 * baseline), (summary["maps"], baseline)
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
            "bf16",
            "--workers",
            "0",
            "--batch-size",
            "8",
        ]
    )
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stats["mAP"] == pytest.approx(summary["maps"][12], abs=0.02)
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


def test_async_scorer_scores_in_a_background_process(tmp_path):
    from ssd.evaluate import AsyncScorer

    _, ann = make_shapes_coco(tmp_path, images=3, size=64, seed=5)
    import json

    data = json.loads(ann.read_text())
    perfect = [
        {"image_id": a["image_id"], "category_id": a["category_id"], "bbox": a["bbox"], "score": 0.9}
        for a in data["annotations"]
    ]
    scorer = AsyncScorer()
    scorer.submit(1, str(ann), perfect)
    scorer.submit(2, str(ann), random_box_results(data["images"], [1, 2, 3]))
    (e1, s1), (e2, s2) = scorer.done(wait=True)
    scorer.close()
    assert (e1, e2) == (1, 2)
    assert s1["mAP"] == pytest.approx(1.0) and s2["mAP"] < 0.1


def synthetic_args(out, *extra):
    return [
        "--recipe",
        SMOKE,
        "--synthetic",
        "--steps",
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
    unbroken = train(parse_args(synthetic_args(tmp_path / "a")))["model"].state_dict()
    first = train(parse_args(synthetic_args(tmp_path / "b", "--stop-epoch", "1")))
    assert first["epochs"] == 1
    resumed = train(parse_args(synthetic_args(tmp_path / "b", "--resume")))
    assert resumed["epochs"] == 2
    state = resumed["model"].state_dict()
    for k, v in unbroken.items():
        torch.testing.assert_close(state[k], v, rtol=0, atol=0, msg=k)


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
    )
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1].endswith("does not exist")
    assert "Traceback" not in proc.stderr

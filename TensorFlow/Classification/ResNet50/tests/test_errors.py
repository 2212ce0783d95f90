"""Bad input ends with one clear line naming the problem, never a traceback."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from zoo.errors import UserError

MODEL_DIR = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((MODEL_DIR / "scripts").glob("*.sh"))


def _script(name, *args):
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / name), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


def test_every_script_answers_help():
    for script in SCRIPTS:
        proc = _script(script.name, "--help")
        assert proc.returncode == 0 and "usage" in proc.stdout.lower(), (script.name, proc.stderr[-500:])


def test_train_script_missing_data_dir_is_one_line(tmp_path):
    proc = _script("train.sh", "--data-dir", str(tmp_path / "nope"), "--results-dir", str(tmp_path / "r"))
    assert proc.returncode != 0
    assert proc.stderr.strip().splitlines()[-1] == f"error: data dir {tmp_path / 'nope'} does not exist"
    assert "Traceback" not in proc.stderr


def test_unknown_recipe_key(digits_tfrecords, tmp_path):
    from resnet50_tf.train import main

    with pytest.raises(SystemExit, match="unknown recipe key 'optimizer.lrr'"):
        main(
            ["--data-dir", str(digits_tfrecords), "--results-dir", str(tmp_path), "--set", "optimizer.lrr=1"]
        )


def test_folder_instead_of_tfrecords(digits_folder, tmp_path):
    from resnet50_tf.train import main

    with pytest.raises(SystemExit, match="no dataset.json.*convert_tfrecords"):
        main(["--data-dir", str(digits_folder), "--results-dir", str(tmp_path)])


def test_corrupt_jpeg_names_the_file(digits_folder, tmp_path):
    import shutil

    from resnet50_tf.convert_tfrecords import convert

    src = tmp_path / "src"
    shutil.copytree(digits_folder, src)
    bad = sorted((src / "train" / "3").glob("*.jpg"))[0]
    bad.write_bytes(bad.read_bytes()[:200])  # truncated JPEG
    with pytest.raises(UserError, match=f"corrupt or unreadable image {bad}"):
        convert(src, tmp_path / "out", train_shards=2, val_shards=1, workers=1)
    assert not [p.name for p in (tmp_path / "out").iterdir() if p.name.endswith(".tmp")]  # no partial shard


def test_checkpoint_with_wrong_class_count(trained_run, digits_tfrecords, tmp_path):
    from resnet50_tf.evaluate import main

    run, _ = trained_run
    info = json.loads((digits_tfrecords / "dataset.json").read_text())
    other = tmp_path / "five_classes"
    other.mkdir()
    for f in digits_tfrecords.iterdir():
        (other / f.name).symlink_to(f)
    (other / "dataset.json").unlink()
    (other / "dataset.json").write_text(json.dumps({**info, "classes": info["classes"][:5]}))
    # labels 5..9 of the records are not classes of this dataset.json: the data is refused first
    with pytest.raises(SystemExit, match="holds label 9, but .*dataset.json lists 5 classes"):
        main(["--checkpoint", str(run), "--data-dir", str(other)])
    from resnet50_tf.checkpoint import restore_weights
    from resnet50_tf.model import resnet50

    with pytest.raises(UserError, match=f"--checkpoint {run} does not fit this model"):
        restore_weights(resnet50(5, image_size=32), run)


def test_evaluate_reports_accuracy(trained_run, digits_tfrecords, tmp_path):
    from resnet50_tf.evaluate import main

    run, summary = trained_run
    metrics = main(
        ["--checkpoint", str(run), "--data-dir", str(digits_tfrecords), "--results-dir", str(tmp_path)]
    )
    assert metrics["samples"] == 359
    assert metrics["top1"] == pytest.approx(summary["val_top1"], abs=1e-6)
    assert json.loads((tmp_path / "eval.json").read_text())["samples"] == 359
    # checkpoint/best/: the step whose evaluation scored best, evaluated alone to that score
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    scored = [r["metrics"]["top1"] for r in records if r["phase"] == "eval"]
    best = main(["--checkpoint", str(run / "checkpoint" / "best"), "--data-dir", str(digits_tfrecords),
                 "--results-dir", str(tmp_path / "best")])  # fmt: skip
    assert len(scored) == 3 and best["top1"] == pytest.approx(max(scored), abs=1e-6)


def test_deploy_without_repository(tmp_path):
    from resnet50_tf.deploy import main

    with pytest.raises(SystemExit, match="run scripts/export_triton.sh first"):
        main(["--model-repository", str(tmp_path), "--images", "x.jpg"])

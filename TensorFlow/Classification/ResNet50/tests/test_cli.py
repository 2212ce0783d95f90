"""The shared command-line vocabulary (zoo.cli) on every entry point: new flags, old spellings, resume."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]
RECIPE = str(MODEL_DIR / "configs" / "digits_cpu.yaml")


def _recipe(argv):
    from resnet50_tf.train import FLAG_TO_RECIPE, parse_args
    from zoo.cli import recipe_from_args

    return recipe_from_args(parse_args(["--recipe", RECIPE, "--synthetic", *argv]), FLAG_TO_RECIPE)


def test_flags_and_every_set_item_override_the_recipe():
    recipe = _recipe(
        ["--set", "optimizer.lr_per_256=0.3", "--set", "label_smoothing=0.2", "--amp", "bf16"]
        + ["--batch-size", "7", "--epochs", "2", "--image-size", "48", "--target-top1", "75.9"]
    )
    run = recipe["run"]
    assert recipe["optimizer"]["lr_per_256"] == 0.3 and recipe["label_smoothing"] == 0.2
    assert run["precision"] == "bf16" and run["batch_per_gpu"] == 7 and run["epochs"] == 2
    assert recipe["data"]["image_size"] == 48 and run["target"]["value"] == 75.9
    own = _recipe([])["run"]
    assert own["precision"] == "fp32" and own["target"]["value"] is None  # the recipe's own


@pytest.mark.parametrize(
    "flag, key",
    [("--batch-size", "run.batch_per_gpu"), ("--epochs", "run.epochs"), ("--image-size", "data.image_size")],
)
def test_zero_is_an_error_not_the_recipe_value(flag, key, tmp_path):
    from resnet50_tf.train import main

    with pytest.raises(SystemExit, match=f"^error: {key} must be a positive integer, not 0"):
        main(["--recipe", RECIPE, "--synthetic", "--results-dir", str(tmp_path), flag, "0"])


@pytest.mark.parametrize(
    "module, argv, old, new",
    [
        ("train", ["--config", RECIPE], "--config", "--recipe"),
        ("train", ["--precision", "bf16"], "--precision", "--amp"),
        ("train", ["--no-resume"], "--no-resume", "--resume none"),
        ("train", ["--target-accuracy", "75.9"], "--target-accuracy", "--target-top1"),
        ("train", ["--amp", "none"], "--amp none", "--amp fp32"),
        ("evaluate", ["--checkpoint", "run", "--precision=fp16"], "--precision", "--amp"),
        ("evaluate", ["--checkpoint", "run", "--out", "m.json"], "--out", "--results-dir"),
        ("benchmark", ["--config", RECIPE], "--config", "--recipe"),
        ("benchmark", ["--out", "bench.json"], "--out", "--output"),
        ("prepare_data", ["--digits", "--out", "x"], "--out", "--data-dir"),
        ("convert_tfrecords", ["--src", "x", "--out", "y"], "--out", "--data-dir"),
    ],
)
def test_old_spellings_end_in_one_line_naming_the_new(module, argv, old, new):
    import importlib

    entry = importlib.import_module(f"resnet50_tf.{module}")
    with pytest.raises(SystemExit) as error:
        entry.main(argv)
    assert str(error.value).startswith(f"error: {old} was renamed: use {new}")
    assert "\n" not in str(error.value)


def test_amp_choices_are_the_shared_ones(capsys):
    from resnet50_tf import benchmark, evaluate, train

    for parse in (train.parse_args, evaluate.parse_args, benchmark.parse_args):
        with pytest.raises(SystemExit):
            parse(["--help"])
        assert "--amp {bf16,fp16,fp32}" in capsys.readouterr().out


def test_resume_default_refuses_a_results_dir_with_a_checkpoint(tmp_path):
    """train.py's --resume: zoo.cli.resolve_resume on RESULTS_DIR/checkpoint/latest.json, read by zoo.tf."""
    import tensorflow as tf
    from resnet50_tf.checkpoint import CHECKPOINT_KIND, read_training_state
    from zoo.checkpoint_folder import checkpoint_pointer
    from zoo.cli import resolve_resume
    from zoo.errors import UserError
    from zoo.tf import save_training_checkpoint

    def resume_checkpoint(resume, results_dir):
        found = resolve_resume(resume, checkpoint_pointer(results_dir))
        return None if found is None else str(read_training_state(found, "--resume")["folder"])

    (tmp_path / "checkpoint").mkdir()
    assert resume_checkpoint(None, tmp_path) is None  # an empty folder is a new run
    weights = {"model": tf.Variable([1.0, 2.0])}
    save_training_checkpoint(
        tmp_path / "checkpoint", weights, name=CHECKPOINT_KIND, step=4, epoch=1, recipe={}
    )
    with pytest.raises(UserError, match="pass --resume auto to continue it, --resume none to start over"):
        resume_checkpoint(None, tmp_path)
    assert resume_checkpoint("none", tmp_path) is None
    expected = str(tmp_path / "checkpoint" / "step-4")
    assert resume_checkpoint("auto", tmp_path) == expected
    assert resume_checkpoint(str(tmp_path), tmp_path / "other") == expected  # a run directory
    assert resume_checkpoint(expected, tmp_path / "other") == expected  # a checkpoint folder
    assert resume_checkpoint("auto", tmp_path / "other") is None
    with pytest.raises(UserError, match="no such checkpoint"):
        resume_checkpoint(str(tmp_path / "nope"), tmp_path)


def _script(name, *args, env=None):
    env = dict(
        os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **(env or {})
    )
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / name), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )


def test_train_script_help_shows_the_launcher_and_the_python_flags():
    text = _script("train.sh", "--help").stdout
    for flag in (
        "--gpus",
        "NGPU",
        "--recipe",
        "--set",
        "--amp {bf16,fp16,fp32}",
        "--resume",
        "--target-top1",
    ):
        assert flag in text, flag
    assert text.index("--gpus N") < text.index("usage: train.sh")  # the shell usage first


@pytest.mark.parametrize(
    "args, env, line",
    [
        (["--gpus", "two"], {}, "error: --gpus/NGPU must be a number >= 1, got 'two'"),
        ([], {"NGPU": "0"}, "error: --gpus/NGPU must be a number >= 1, got '0'"),
        (["--gpus", "3"], {"CUDA_VISIBLE_DEVICES": "4,5"}, "error: --gpus 3 but CUDA_VISIBLE_DEVICES has 2"),
        (["--config", "x.yaml"], {}, "error: --config was renamed: use --recipe"),
    ],
)
def test_train_script_bad_flags_are_one_line(args, env, line):
    proc = _script("train.sh", *args, env=env)
    assert proc.returncode != 0 and proc.stderr.strip().splitlines() == [line]


def test_train_script_gpus_selects_devices(tmp_path):
    """--gpus N sets CUDA_VISIBLE_DEVICES to the first N devices (of those the job was given)."""
    fake = tmp_path / "python"
    # answers the launcher's zoo lookup (-c) with the real python; prints any other command line
    fake.write_text(
        f'#!/usr/bin/env bash\n[[ "$1" == -c ]] && exec {sys.executable} "$@"\necho "$CUDA_VISIBLE_DEVICES $*"\n'
    )
    fake.chmod(0o755)
    env = {"PYTHON": str(fake)}
    assert _script("train.sh", "--gpus", "3", "--synthetic", env=env).stdout.split() == [
        "0,1,2", "-m", "resnet50_tf.train", "--synthetic",
    ]  # fmt: skip
    env["CUDA_VISIBLE_DEVICES"] = "4,5,6"
    assert _script("train.sh", "--gpus=2", env=env).stdout.split()[0] == "4,5"
    assert _script("train.sh", env={**env, "NGPU": "1"}).stdout.split()[0] == "4"


def test_slurm_script_resumes_unless_told(tmp_path):
    """train_slurm.sbatch passes --resume auto (a requeued job continues) unless --resume is given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text('#!/usr/bin/env bash\necho "$*"\n')
    (bin_dir / "srun").chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def submitted(*args):
        cmd = ["bash", str(MODEL_DIR / "scripts" / "train_slurm.sbatch"), *args]
        return subprocess.run(
            cmd, capture_output=True, text=True, env=env, cwd=MODEL_DIR, check=True
        ).stdout.split()

    assert submitted("--recipe", "r.yaml") == [
        "--ntasks-per-node=1", "scripts/train.sh", "--distribution", "multiworker", "--resume", "auto",
        "--recipe", "r.yaml",
    ]  # fmt: skip
    assert "auto" not in submitted("--resume", "none")


def test_set_is_repeatable_in_the_parser():
    from resnet50_tf.train import parse_args

    args = parse_args(["--synthetic", "--set", "a=1", "--set", "b=2"])
    assert isinstance(args, argparse.Namespace) and args.set == ["a=1", "b=2"]

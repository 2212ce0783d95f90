"""The shared command-line vocabulary on every script: --help, old spellings, --gpus, the registry."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODEL_DIR = Path(__file__).resolve().parents[1]
AMP = "--amp {bf16,fp16,fp32}"


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


@pytest.mark.parametrize(
    "script, flags",
    [
        ("train.sh", ["--gpus", "NGPU", "--recipe", "--set", AMP, "--resume", "--data-dir", "--results-dir",
                      "--target-mlm-accuracy", "--target-f1", "--init-checkpoint", "--vocab"]),
        ("evaluate.sh", ["--data-dir", AMP, "--results-dir", "--init-checkpoint"]),
        ("benchmark.sh", [AMP, "--output", "--recipe", "--no-keras-hub"]),
        ("download_data.sh", ["--data-dir", "wikipedia", "prepare", "squad", "phase1"]),
        ("download_checkpoint.sh", ["list", "pull NAME"]),
        ("export_triton.sh", ["--checkpoint", "--model-repository", "--vocab"]),
        ("deploy_triton.sh", ["--model-repository", "--question", "--concurrency"]),
    ],
)  # fmt: skip
def test_help_shows_the_shared_vocabulary(script, flags):
    proc = _script(script, "--help")
    assert proc.returncode == 0, proc.stderr[-1000:]
    for flag in flags:
        assert flag in proc.stdout, (script, flag)
    for old in ("--config", "--precision", "--no-resume", "--target-accuracy"):
        assert old not in proc.stdout, (script, old)


@pytest.mark.parametrize(
    "args, env, line",
    [
        (["--config", "x.yaml"], {}, "error: --config was renamed: use --recipe"),
        (
            ["squad", "--vocab", "v.txt", "--precision", "bf16"],
            {},
            "error: --precision was renamed: use --amp",
        ),
        (["--amp", "none"], {}, "error: --amp none was renamed: use --amp fp32"),
        (["--gpus", "two"], {}, "error: --gpus/NGPU must be a number >= 1, got 'two'"),
        ([], {"NGPU": "0"}, "error: --gpus/NGPU must be a number >= 1, got '0'"),
        (["--distribution", "horovod", "--synthetic"], {}, "horovod"),
    ],
)
def test_bad_train_flags_end_in_one_line(args, env, line):
    proc = _script("train.sh", *args, env=env)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert line in proc.stderr.strip().splitlines()[-1]


def test_gpus_selects_the_first_devices_and_squad_adds_its_modes(tmp_path):
    fake = tmp_path / "python"
    # answers the launcher's zoo lookup (-c) with the real python; prints any other command line
    fake.write_text(
        f'#!/usr/bin/env bash\n[[ "$1" == -c ]] && exec {sys.executable} "$@"\necho "$CUDA_VISIBLE_DEVICES $*"\n'
    )
    fake.chmod(0o755)
    out = _script(
        "train.sh", "squad", "--gpus", "2", "--vocab", "v", env={"PYTHON": str(fake)}
    ).stdout.split()
    assert out == ["0,1", "-m", "bert_tf.finetune_squad", "--do-train", "--do-predict", "--vocab", "v"]
    env = {"PYTHON": str(fake), "CUDA_VISIBLE_DEVICES": "4,5,6", "NGPU": "1"}
    assert _script("train.sh", env=env).stdout.split()[:3] == ["4", "-m", "bert_tf.pretrain"]


def test_registry_lists_googles_checkpoints():
    proc = _script("download_checkpoint.sh", "list")
    assert proc.returncode == 0, proc.stderr
    assert "google-bert-large-uncased" in proc.stdout and "google-bert-base-uncased" in proc.stdout


def test_synthetic_data_needs_no_download():
    proc = _script("download_data.sh", "--synthetic")
    assert proc.returncode == 0 and "no download" in proc.stdout


def test_evaluate_scores_a_predictions_file(tmp_path):
    import json

    qas = [{"id": "q1", "question": "?", "answers": [{"text": "Denver Broncos", "answer_start": 0}]}]
    data = {"data": [{"paragraphs": [{"context": "Denver Broncos won.", "qas": qas}]}]}
    (tmp_path / "dev.json").write_text(json.dumps(data))
    (tmp_path / "pred.json").write_text(json.dumps({"q1": "the Broncos"}))
    proc = _script("evaluate.sh", "--score", str(tmp_path / "dev.json"), str(tmp_path / "pred.json"))
    assert json.loads(proc.stdout) == pytest.approx({"exact_match": 0.0, "f1": 100 * 2 / 3})

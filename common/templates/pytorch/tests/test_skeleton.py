"""The model's own tests, on the CPU and the real digits: training learns, resume is exact, evaluation
reads the checkpoint alone, export answers like the model, bad input ends in one line."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import torch
from skeleton.data import load_split, prepare
from skeleton.evaluate import load_trained
from skeleton.train import parse_args, train
from zoo.errors import UserError

MODEL_DIR = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    return prepare(tmp_path_factory.mktemp("data")).parent


def run(results, data_dir, *flags):
    return train(
        parse_args(["--data-dir", str(data_dir), "--results-dir", str(results), "--threads", "1", *flags])
    )


def losses(results) -> list[float]:
    rows = [json.loads(line) for line in (pathlib.Path(results) / "metrics.jsonl").read_text().splitlines()]
    return [r["metrics"]["loss"] for r in rows if r["phase"] == "train" and "loss" in r["metrics"]]


@pytest.fixture(scope="session")
def trained(tmp_path_factory, data_dir):
    results = tmp_path_factory.mktemp("run")
    return results, run(results, data_dir, "--epochs", "4", "--log-every", "1")


def test_training_learns_the_digits(trained):
    results, result = trained
    curve = losses(results)
    assert np.mean(curve[-5:]) < 0.5 * np.mean(curve[:5])
    assert result["top1"] > 80.0  # chance is 10%


def test_resume_continues_the_same_run(tmp_path, data_dir, trained, monkeypatch):
    """A run that dies in its third epoch (after the checkpoint of the second), resumed with --resume
    auto, logs the losses of the unbroken run and ends with its weights."""
    import skeleton.engine

    epochs_started, train_one_epoch = [], skeleton.engine.train_one_epoch

    def dies_in_the_third_epoch(*args, **kwargs):
        epochs_started.append(1)
        if len(epochs_started) == 3:
            raise RuntimeError("killed")
        return train_one_epoch(*args, **kwargs)

    # train.py imports the loop when a run starts (after parsing its flags)
    monkeypatch.setattr(skeleton.engine, "train_one_epoch", dies_in_the_third_epoch)
    with pytest.raises(RuntimeError, match="killed"):
        run(tmp_path, data_dir, "--epochs", "4", "--log-every", "1")
    monkeypatch.undo()
    run(tmp_path, data_dir, "--epochs", "4", "--log-every", "1", "--resume", "auto")
    results, _ = trained
    assert losses(tmp_path) == losses(results)
    resumed, _ = load_trained(tmp_path / "checkpoint.pt")
    unbroken, _ = load_trained(results / "checkpoint.pt")
    for a, b in zip(resumed.state_dict().values(), unbroken.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_evaluate_needs_only_the_checkpoint(trained, data_dir):
    """The last checkpoint scores what training's last evaluation did, best.pt the best evaluation's."""
    results, result = trained
    rows = [json.loads(line) for line in (results / "metrics.jsonl").read_text().splitlines()]
    best = max(r["metrics"]["top1"] for r in rows if r["phase"] == "eval")
    env = {**os.environ, "PYTHONPATH": str(MODEL_DIR), "OMP_NUM_THREADS": "1"}
    for checkpoint, expected in (("checkpoint.pt", result["top1"]), ("best.pt", best)):
        out = subprocess.run(
            ["bash", str(MODEL_DIR / "scripts" / "evaluate.sh"), "--checkpoint", str(results / checkpoint),
             "--data-dir", str(data_dir)], capture_output=True, text=True, env={**env, "PYTHON": sys.executable}, timeout=300,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.splitlines()[-1])["top1"] == pytest.approx(expected, abs=0.01), (
            checkpoint
        )


def test_export_answers_like_the_model(tmp_path, trained, data_dir):
    import onnxruntime
    from skeleton.export import export_repository

    model, _ = load_trained(trained[0] / "checkpoint.pt")
    written = export_repository(model, tmp_path / "repo")
    x, _ = load_split(data_dir, "val")
    session = onnxruntime.InferenceSession(str(written["skeleton_onnx"] / "1" / "model.onnx"))
    served = session.run(["logits"], {"inputs": x[:32].numpy()})[0]
    np.testing.assert_allclose(served, model(x[:32]).detach().numpy(), rtol=1e-4, atol=1e-4)
    with pytest.raises(UserError, match="pass --force"):
        export_repository(model, tmp_path / "repo")


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, data_dir):
    with pytest.raises(UserError, match="download_data.sh"):
        run(tmp_path / "r", tmp_path / "missing")
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "digits.npz").write_text("not a split")
    with pytest.raises(UserError, match="not a prepared split"):
        run(tmp_path / "r", tmp_path / "bad")
    with pytest.raises(UserError, match="run.batch_per_gpu"):
        run(tmp_path / "r", data_dir, "--set", "run.batch_per_gpu=0")
    assert not (tmp_path / "r").exists()


def test_tritonserver_answers_like_evaluation(tmp_path, trained, data_dir):
    """deploy_triton.sh on the exported repository: the real tritonserver (python backend) scores the
    validation split with the top-1 that training's evaluation gave."""
    from skeleton.export import export_repository

    model, _ = load_trained(trained[0] / "checkpoint.pt")
    export_repository(model, tmp_path / "repo")
    env = {**os.environ, "PYTHONPATH": str(MODEL_DIR), "OMP_NUM_THREADS": "1", "PYTHON": sys.executable}
    env["PATH"] = f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    out = subprocess.run(
        ["bash", str(MODEL_DIR / "scripts" / "deploy_triton.sh"), "--repository", str(tmp_path / "repo"),
         "--data-dir", str(data_dir)], capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"served top1 {trained[1]['top1']:.2f}%" in out.stdout

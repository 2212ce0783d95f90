"""Which training checkpoints stay (zoo.retention): the newest run.keep_checkpoints, and the best, for
PyTorch's checkpoint file (zoo.torch) and the TensorFlow / MXNet checkpoint folder (zoo.checkpoint_folder)."""

from __future__ import annotations

import json

import pytest
import torch
from zoo.checkpoint_folder import read_state, save_folder
from zoo.retention import copy_whole, improves, numbered_copies
from zoo.torch import load_training_checkpoint, save_training_checkpoint


@pytest.mark.parametrize(
    "metric, value, best, expected",
    [
        ("top1", 71.0, 70.0, True),
        ("top1", 70.0, 70.0, False),
        ("top1", 69.0, 70.0, False),
        ("wer", 0.2, 0.3, True),
        ("wer", 0.4, 0.3, False),
        ("log_perplexity", 3.0, None, True),
        ("bleu", float("nan"), None, False),
        ("bleu", None, 10.0, False),
    ],
)
def test_improves_follows_the_metric_direction(metric, value, best, expected):
    assert improves(metric, value, best) is expected


def _state(step: int) -> dict:
    return {"model": {"w": torch.full((2,), float(step))}, "step": step, "epoch": step}


def test_torch_checkpoint_keeps_the_newest_n_and_the_best(tmp_path):
    path = tmp_path / "checkpoint.pt"
    scores = {100: 50.0, 200: 70.0, 300: 60.0, 400: 65.0, 500: 55.0}
    best = None
    for step, score in scores.items():
        better = improves("top1", score, best)
        best = score if better else best
        save_training_checkpoint(path, _state(step), keep=3, mark_best=better)
    kept = numbered_copies(path)
    assert [p.name for p in kept] == [f"checkpoint_step{s:09d}.pt" for s in (300, 400, 500)]
    for copy in kept:  # each copy holds its own step's weights
        step = int(copy.stem.rsplit("step", 1)[1])
        assert load_training_checkpoint(copy, ["model"], "x")["model"]["w"][0] == step
    assert torch.load(path)["step"] == 500
    assert torch.load(tmp_path / "best.pt")["step"] == 200  # 70.0, never beaten afterwards
    save_training_checkpoint(path, _state(600), keep=1)  # a resumed run that keeps fewer
    assert numbered_copies(path) == [] and torch.load(path)["step"] == 600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.pt", "checkpoint.pt"]


def test_a_copy_replaces_the_old_one_whole(tmp_path):
    source, target = tmp_path / "new", tmp_path / "best"
    source.mkdir()
    (source / "a").write_text("new")
    target.mkdir()
    (target / "a").write_text("old")
    (target / "b").write_text("old only")
    (tmp_path / ".best.999.tmp").mkdir()  # left by a copy killed midway
    copy_whole(source, target)
    assert sorted(p.name for p in target.iterdir()) == ["a"] and (target / "a").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best", "new"]


def test_checkpoint_folder_keeps_the_newest_n_and_the_best(tmp_path):
    directory = tmp_path / "checkpoint"

    def save(step: int, best: bool):
        state = {"name": "m", "step": step, "epoch": step, "recipe": {}}
        save_folder(
            directory,
            state,
            lambda folder: (folder / "weights").write_text(str(step)),
            keep=2,
            mark_best=best,
        )

    for step, best in ((1, True), (2, False), (3, True), (4, False), (5, False)):
        save(step, best)
    assert sorted(p.name for p in directory.glob("step-*")) == ["step-4", "step-5"]
    assert json.loads((directory / "latest.json").read_text())["folder"] == "step-5"
    best = read_state(directory / "best", name="m", what="a checkpoint", flag="--checkpoint")
    assert best["step"] == 3 and (directory / "best" / "weights").read_text() == "3"


def test_a_detector_score_copies_the_checkpoint_of_its_epoch(tmp_path):
    """zoo.coco's evaluation: a score (at once, or from the background process after later saves) that
    beats the earlier ones copies the checkpoint of the epoch it scored, never a later one."""
    from types import SimpleNamespace

    from zoo.coco.scoring import Evaluation

    quiet = SimpleNamespace(log=lambda *a, **k: None, eval_accuracy=lambda *a, **k: None)
    run = SimpleNamespace(target=SimpleNamespace(metric="map"), eval_every=None, epochs=3)
    env = SimpleNamespace(is_primary=True, world_size=1)
    path, best = tmp_path / "checkpoint.pt", tmp_path / "best.pt"
    evaluation = Evaluation(
        run, None, "a.json", targets={"map": None}, logger=quiet, mlperf=quiet, env=env, device="cpu",
        checkpoint=path,
    )  # fmt: skip
    save_training_checkpoint(path, _state(10), keep=2)
    evaluation.saved(1)
    evaluation._record(1, 10, {"map": 0.2})  # scored at once: checkpoint.pt holds epoch 1
    assert torch.load(best)["step"] == 10
    for step, epoch in ((20, 2), (30, 3)):
        save_training_checkpoint(path, _state(step), keep=2)
        evaluation.saved(epoch)
    evaluation._record(2, 20, {"map": 0.3})  # epoch 2's background score, after epoch 3's save
    assert torch.load(best)["step"] == 20
    evaluation._record(3, 30, {"map": 0.25})  # lower: best.pt stays
    assert torch.load(best)["step"] == 20

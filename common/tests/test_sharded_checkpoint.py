"""zoo.torch's sharded training checkpoint survives a kill at any instant of its swap."""

from __future__ import annotations

import torch
from zoo.torch import (
    SHARDED_STATE_FIELDS,
    load_training_checkpoint_sharded,
    recover_sharded_checkpoint,
    save_training_checkpoint_sharded,
)


def _state(step: int) -> dict:
    return {"optimizer": {}, "rng": None, "epoch": 0, "step": step, "recipe": {}}


def _save(path, value: float, step: int) -> None:
    save_training_checkpoint_sharded(path, {"model": {"w": torch.full((4,), value)}}, _state(step))


def _read(path) -> tuple[int, float]:
    sharded = {"model": {"w": torch.zeros(4)}}
    state = load_training_checkpoint_sharded(path, sharded, SHARDED_STATE_FIELDS, "a test checkpoint")
    return state["step"], float(sharded["model"]["w"][0])


def test_a_kill_between_the_two_renames_keeps_the_newer_checkpoint(tmp_path):
    path = tmp_path / "checkpoint"
    _save(path, 1.0, 10)
    _save(tmp_path / "newer", 2.0, 20)
    path.rename(tmp_path / "checkpoint.old")  # the swap's first rename done, the second not
    (tmp_path / "newer").rename(tmp_path / "checkpoint.tmp")
    recover_sharded_checkpoint(path)
    assert _read(path) == (20, 2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_kill_while_the_shards_are_written_keeps_the_previous_checkpoint(tmp_path):
    path = tmp_path / "checkpoint"
    _save(path, 1.0, 10)
    (tmp_path / "checkpoint.tmp").mkdir()  # shards begun, checkpoint.pt (written last) not yet
    (tmp_path / "checkpoint.tmp" / "__0_0.distcp").write_bytes(b"partial")
    path.rename(tmp_path / "checkpoint.old")
    recover_sharded_checkpoint(path)
    assert _read(path) == (10, 1.0)
    _save(path, 3.0, 30)  # the next save works where the old swap left its folders
    assert _read(path) == (30, 3.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_kill_after_the_two_renames_leaves_no_folder_in_the_next_saves_way(tmp_path):
    path = tmp_path / "checkpoint"
    _save(path, 1.0, 10)
    _save(tmp_path / "checkpoint.old", 0.5, 5)  # the swap done, the previous folder not yet removed
    _save(path, 2.0, 20)  # renaming checkpoint/ to checkpoint.old/ would meet a folder there
    assert _read(path) == (20, 2.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]

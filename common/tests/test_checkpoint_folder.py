"""zoo.checkpoint_folder: the folder of a TensorFlow or MXNet training checkpoint, written whole or not at all
(the frameworks' own files are tested with zoo.tf and zoo.mx, in their venvs)."""

from __future__ import annotations

import json

import pytest
from zoo.checkpoint_folder import CHECKPOINT_NAME, checkpoint_pointer, read_state, save_folder
from zoo.errors import UserError

WHAT = "a demo training checkpoint"


def save(results, step: int, payload: str = "weights", **options):
    state = {"name": "demo", "step": step, "epoch": step // 4, "recipe": {"run": {"seed": 0}}}
    return save_folder(
        results / CHECKPOINT_NAME, state, lambda f: (f / "weights.txt").write_text(payload), **options
    )


def test_latest_names_the_newest_folder_and_keep_leaves_the_newest(tmp_path):
    for step in (4, 8, 12):
        save(tmp_path, step, payload=f"at {step}", keep=2)
    folders = sorted(p.name for p in (tmp_path / CHECKPOINT_NAME).iterdir() if p.is_dir())
    assert folders == ["step-12", "step-8"]
    state = read_state(tmp_path, name="demo", what=WHAT)
    assert state["step"] == 12 and (state["folder"] / "weights.txt").read_text() == "at 12"
    for path in (
        checkpoint_pointer(tmp_path),
        tmp_path / CHECKPOINT_NAME,
        tmp_path / CHECKPOINT_NAME / "step-8",
        tmp_path / CHECKPOINT_NAME / "step-8" / "state.json",
    ):
        assert read_state(path, name="demo", what=WHAT)["step"] in (8, 12)
    save(tmp_path, 12, payload="again")  # the same step: a folder of its own; keep=1 leaves it alone
    assert [p.name for p in (tmp_path / CHECKPOINT_NAME).iterdir() if p.is_dir()] == ["step-12.1"]


def test_a_killed_save_leaves_the_previous_checkpoint_and_its_temporary_goes_next_time(tmp_path):
    save(tmp_path, 4)

    def killed(folder):
        (folder / "weights.txt").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        save_folder(tmp_path / CHECKPOINT_NAME, {"name": "demo", "step": 8}, killed)
    assert read_state(tmp_path, name="demo", what=WHAT)["step"] == 4
    torn = tmp_path / CHECKPOINT_NAME / ".step-8.k2x9q1.tmp"  # what a SIGKILL leaves
    torn.mkdir()
    save(tmp_path, 8)
    assert not torn.exists() and read_state(tmp_path, name="demo", what=WHAT)["step"] == 8


def test_another_worker_keeps_nothing(tmp_path):
    assert save(tmp_path, 4, chief=False) is None and not (tmp_path / CHECKPOINT_NAME).exists()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: None, "--resume {path}: no such checkpoint"),
        (lambda p: p.mkdir(), "--resume {path} is not a demo training checkpoint (no checkpoint/latest.json"),
        (lambda p: p.write_text("notes"), "--resume {path} is not a demo training checkpoint"),
        (lambda p: p.mkdir() or (p / "latest.json").write_text("{"), "latest.json: "),
        (lambda p: p.mkdir() or (p / "latest.json").write_text('{"folder": "step-9"}'), "names step-9, which is not there"),
        (lambda p: p.mkdir() or (p / "state.json").write_text(json.dumps({"name": "demo"})), "no step, epoch, recipe"),
        (lambda p: p.mkdir() or (p / "state.json").write_text(json.dumps({"name": "bert", "step": 1, "epoch": 0, "recipe": {}})), "it is a checkpoint of bert"),
    ],
    ids=["missing", "empty-folder", "text-file", "torn-pointer", "pointer-to-nothing", "fields-missing", "another-model"],
)  # fmt: skip
def test_the_reader_names_the_flag_the_path_and_the_problem(tmp_path, make, message):
    path = tmp_path / "thing"
    make(path)
    with pytest.raises(UserError) as failure:
        read_state(path, name="demo", what=WHAT)
    assert message.format(path=path) in str(failure.value)

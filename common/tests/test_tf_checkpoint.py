"""zoo.tf's training checkpoint: one atomic writer and one reader for every TensorFlow model.

TensorFlow is in the TensorFlow venv only (`.venv/tensorflow/bin/python -m pytest common/tests/test_tf_checkpoint.py`);
the TensorFlow models' suites exercise the same functions through their train.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="TensorFlow is installed in the TensorFlow venv only")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from zoo.checkpoint_folder import CHECKPOINT_NAME, checkpoint_pointer  # noqa: E402
from zoo.errors import UserError  # noqa: E402
from zoo.tf import load_training_checkpoint, save_training_checkpoint  # noqa: E402

WHAT = "a demo training checkpoint"


def objects(value: float) -> dict:
    """A tiny trained state: a weight vector and a step counter (any trackable objects work)."""
    return {
        "weights": tf.Variable(np.full(4, value, np.float32), name="weights"),
        "counter": tf.Variable(int(value), dtype=tf.int64, name="counter"),
    }


def save(results, value: float, step: int, **options):
    return save_training_checkpoint(
        results / CHECKPOINT_NAME, objects(value), name="demo", step=step, epoch=step // 4,
        recipe={"run": {"seed": 0}}, **options,
    )  # fmt: skip


def test_save_then_load_restores_objects_and_position(tmp_path):
    save(tmp_path, 2.0, step=8, best={"top1": 50.0})
    restored = objects(0.0)
    state = load_training_checkpoint(tmp_path, restored, name="demo", what=WHAT)
    assert state["step"] == 8 and state["epoch"] == 2 and state["recipe"] == {"run": {"seed": 0}}
    assert state["best"] == {"top1": 50.0} and state["folder"].name == "step-8"
    assert np.all(restored["weights"].numpy() == 2.0) and int(restored["counter"].numpy()) == 2
    # the same checkpoint through its pointer file, its checkpoint/ folder and its step folder
    for path in (checkpoint_pointer(tmp_path), tmp_path / CHECKPOINT_NAME, state["folder"]):
        assert load_training_checkpoint(path, name="demo", what=WHAT)["step"] == 8


def test_keep_leaves_the_newest_folders_and_latest_points_at_the_last(tmp_path):
    for step in (4, 8, 12):
        save(tmp_path, float(step), step=step, keep=2)
    folders = sorted(p.name for p in (tmp_path / CHECKPOINT_NAME).iterdir() if p.is_dir())
    assert folders == ["step-12", "step-8"]
    assert load_training_checkpoint(tmp_path, name="demo", what=WHAT)["step"] == 12
    save(tmp_path, 12.5, step=12)  # the same step again: a folder of its own, the others go (keep=1)
    folders = sorted(p.name for p in (tmp_path / CHECKPOINT_NAME).iterdir() if p.is_dir())
    assert folders == ["step-12.1"]


def test_a_save_killed_midway_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    save(tmp_path, 1.0, step=4)
    before = sorted((p.name, p.stat().st_size) for p in (tmp_path / CHECKPOINT_NAME).rglob("*"))

    def killed(self, prefix):
        with open(f"{prefix}.index", "wb") as f:
            f.write(b"half an index")
        raise KeyboardInterrupt  # what a kill looks like to the code around the write

    monkeypatch.setattr(tf.train.Checkpoint, "write", killed)
    with pytest.raises(KeyboardInterrupt):
        save(tmp_path, 2.0, step=8)
    monkeypatch.undo()
    after = sorted((p.name, p.stat().st_size) for p in (tmp_path / CHECKPOINT_NAME).rglob("*"))
    assert after == before
    restored = objects(0.0)
    assert load_training_checkpoint(tmp_path, restored, name="demo", what=WHAT)["step"] == 4
    assert np.all(restored["weights"].numpy() == 1.0)


def test_a_temporary_folder_of_a_killed_process_is_removed_by_the_next_save(tmp_path):
    torn = tmp_path / CHECKPOINT_NAME / ".step-8.k2x9q1.tmp"
    torn.mkdir(parents=True)
    (torn / "variables.index").write_bytes(b"half")
    save(tmp_path, 1.0, step=4)
    assert not torn.exists()


def test_a_non_chief_worker_writes_nothing_that_stays(tmp_path):
    assert save(tmp_path, 1.0, step=4, chief=False) is None
    assert not (tmp_path / CHECKPOINT_NAME).exists()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda d: None, "--resume {path}: no such checkpoint"),
        (lambda d: d.mkdir(), "--resume {path} is not a demo training checkpoint (no checkpoint/latest.json"),
        (lambda d: d.write_text("notes"), "is not a demo training checkpoint"),
        (lambda d: (d / CHECKPOINT_NAME).mkdir(parents=True) or (d / CHECKPOINT_NAME / "latest.json").write_text("{"), "latest.json"),
    ],
    ids=["missing", "empty-folder", "text-file", "torn-pointer"],
)  # fmt: skip
def test_the_reader_refuses_what_is_not_a_checkpoint(tmp_path, make, message):
    path = tmp_path / "thing"
    make(path)
    with pytest.raises(UserError) as failure:
        load_training_checkpoint(path, name="demo", what=WHAT)
    assert message.format(path=path) in str(failure.value)


def test_the_reader_refuses_another_models_checkpoint(tmp_path):
    save(tmp_path, 1.0, step=4)
    with pytest.raises(UserError) as failure:
        load_training_checkpoint(tmp_path, name="bert", what="a BERT training checkpoint", flag="--init")
    assert (
        str(failure.value)
        == f"--init {tmp_path} is not a BERT training checkpoint (it is a checkpoint of demo)"
    )


def test_the_reader_refuses_torn_variables_and_objects_that_do_not_fit(tmp_path):
    folder = save(tmp_path, 1.0, step=4)
    wrong = {"weights": tf.Variable(np.zeros(3, np.float32)), "counter": tf.Variable(0, dtype=tf.int64)}
    with pytest.raises(UserError, match="does not fit this model"):
        load_training_checkpoint(tmp_path, wrong, name="demo", what=WHAT)
    (folder / "variables.index").write_bytes(b"not an index")
    with pytest.raises(UserError, match="is not a demo training checkpoint \\(cannot be read"):
        load_training_checkpoint(tmp_path, name="demo", what=WHAT)
    (folder / "state.json").write_text(json.dumps({"name": "demo"}))
    with pytest.raises(UserError, match="no step, epoch, recipe"):
        load_training_checkpoint(folder, name="demo", what=WHAT)
    (folder / "state.json").write_text("{")
    with pytest.raises(UserError, match="is not a demo training checkpoint \\(cannot be read"):
        load_training_checkpoint(folder, name="demo", what=WHAT)


def test_partial_restores_only_the_objects_given(tmp_path):
    save(tmp_path, 3.0, step=4)
    weights = {"weights": tf.Variable(np.zeros(4, np.float32))}
    load_training_checkpoint(tmp_path, weights, name="demo", what=WHAT, partial=True)
    assert np.all(weights["weights"].numpy() == 3.0)


def test_a_data_file_cut_short_is_refused_from_its_index_before_anything_is_restored(tmp_path):
    """TensorFlow reads a tensor past the end of a cut data file as IndexError ("Read less bytes than
    requested"); the index says where every tensor ends, so the reader refuses the file in one line."""
    from zoo.tf import checkpoint_data_problem

    big = {"weights": tf.Variable(np.ones((64, 64), np.float32)), "bias": tf.Variable(np.ones(8, np.float32))}
    folder = save_training_checkpoint(
        tmp_path / CHECKPOINT_NAME, big, name="demo", step=1, epoch=0, recipe={"run": {}}
    )
    prefix = folder / "variables"
    data = folder / "variables.data-00000-of-00001"
    assert checkpoint_data_problem(prefix) is None
    whole = data.read_bytes()
    data.write_bytes(whole[: len(whole) - 5])
    problem = checkpoint_data_problem(prefix)
    assert problem.startswith(f"variables.data-00000-of-00001 has {len(whole) - 5} bytes, its index places")
    assert problem.endswith(f"up to byte {len(whole)}")
    for restore in (None, big):
        with pytest.raises(UserError) as error:
            load_training_checkpoint(tmp_path, restore, name="demo", what=WHAT)
        assert str(error.value) == f"--resume {tmp_path} is cut short or damaged: {problem}"
    data.unlink()
    assert checkpoint_data_problem(prefix) == "variables.data-00000-of-00001 is missing"

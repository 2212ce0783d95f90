"""zoo.coco's scoring helpers shared by SSD and Mask R-CNN: merging the ranks' detections."""

from zoo.coco import merge_rank_detections


def det(image_id, score):
    return {"image_id": image_id, "category_id": 1, "bbox": [0, 0, 1, 1], "score": score}


def test_merged_detections_keep_each_image_from_the_first_rank_that_has_it():
    # rank 1's shard was padded with image 1 again (distributed samplers repeat images to even out shards)
    rank0 = [det(1, 0.9), det(1, 0.8), det(3, 0.7)]
    rank1 = [det(2, 0.6), det(1, 0.5)]
    merged = merge_rank_detections([rank0, rank1])
    assert [(d["image_id"], d["score"]) for d in merged] == [(1, 0.9), (1, 0.8), (3, 0.7), (2, 0.6)]


def test_one_rank_keeps_all_its_detections():
    part = [det(5, 0.4), det(5, 0.3), det(6, 0.2)]
    assert merge_rank_detections([part]) == part


class Recorder:
    """A MetricsLogger / MLPerfLogger stand-in that keeps every call."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args, **kwargs: self.calls.append((name, args, kwargs))


def evaluation(eval_every, epochs, targets, run_epochs=6, iou_types=("bbox",)):
    from types import SimpleNamespace

    from zoo.coco import Evaluation
    from zoo.recipe import Interval

    every = None if eval_every is None else Interval(eval_every, "epochs")
    run = SimpleNamespace(eval_every=every, epochs=run_epochs)
    env = SimpleNamespace(world_size=1, is_primary=True)
    logger, mlperf = Recorder(), Recorder()
    parts = {"logger": logger, "mlperf": mlperf, "env": env, "device": "cpu"}
    return Evaluation(run, epochs, "ann.json", iou_types=iou_types, targets=targets, **parts)


def test_due_epochs_follow_the_interval_the_list_and_the_end_of_the_run():
    assert [e for e in range(1, 7) if evaluation(2, None, {}).due(e)] == [2, 4, 6]
    assert [e for e in range(1, 7) if evaluation(1, [1, 5], {}).due(e)] == [1, 5]
    assert [e for e in range(1, 7) if evaluation(None, None, {}).due(e)] == [6]  # null: once, at the end
    assert not any(evaluation(1, [], {}).due(e) for e in range(1, 7))


def test_scores_are_logged_in_the_vocabulary_and_every_target_must_be_reached():
    scores = iter([{"map": 0.30, "mask_map": 0.20}, {"map": 0.38, "mask_map": 0.34}])
    run = evaluation(1, None, {"map": 0.377, "mask_map": 0.339}, iou_types=("bbox", "segm"))
    run._score = lambda *args: next(scores)  # pycocotools' numbers, made up
    run.score(1, 10, [])
    assert not run.reached(1)
    run.score(2, 20, [])
    assert run.reached(2)
    logged = [(args[0], args[1]) for name, args, _ in run.logger.calls if name == "log"]
    assert logged == [(10, {"map": 0.30, "mask_map": 0.20}), (20, {"map": 0.38, "mask_map": 0.34})]
    accuracy = [args for name, args, _ in run.mlperf.calls if name == "eval_accuracy"]
    assert accuracy[-1] == ({"BBOX": 0.38, "SEGM": 0.34}, 2)


def test_a_detector_export_keeps_other_models_and_replaces_its_own_only_with_force(tmp_path):
    import pytest
    from zoo.coco import write_repository_models
    from zoo.errors import UserError

    def model(name, text):
        def write(folder):
            (folder / name).mkdir()
            (folder / name / "config.pbtxt").write_text(text)

        return write

    repo = tmp_path / "triton_repo"
    write_repository_models(repo, ["model_a"], model("model_a", "old"))
    write_repository_models(repo, ["other"], model("other", "kept"))
    with pytest.raises(UserError, match="model_a already exists: pass --force"):
        write_repository_models(repo, ["model_a"], model("model_a", "new"))
    assert (repo / "model_a" / "config.pbtxt").read_text() == "old"

    def broken(folder):
        model("model_a", "half")(folder)
        raise RuntimeError("export failed")

    with pytest.raises(RuntimeError):
        write_repository_models(repo, ["model_a"], broken, force=True)
    assert (repo / "model_a" / "config.pbtxt").read_text() == "old"
    write_repository_models(repo, ["model_a"], model("model_a", "new"), force=True)
    assert [p.name for p in tmp_path.iterdir()] == ["triton_repo"]
    assert sorted(p.name for p in repo.iterdir()) == ["model_a", "other"]
    assert (repo / "model_a" / "config.pbtxt").read_text() == "new"
    assert (repo / "other" / "config.pbtxt").read_text() == "kept"


SLOW_SCORE = """
import time


def score(annotation_file, results, image_ids):
    time.sleep(300)
    return {}
"""

TRAINING = """
import time

import slow_score
from zoo.coco import AsyncScorer

scorer = AsyncScorer(slow_score.score)
scorer.submit(1, "instances_val.json", [])
print("scoring", flush=True)
time.sleep(300)
"""


def _children(pid: int) -> list[int]:
    """The live (not zombie) processes whose parent is ``pid``."""
    import pathlib

    found = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    import pathlib

    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def test_the_background_scorer_and_resource_tracker_end_with_a_training_killed_by_sigkill(tmp_path):
    """kill -9 of training (--async-eval) runs no clean-up: its scorer process gets SIGKILL from the kernel
    (PR_SET_PDEATHSIG), and multiprocessing's resource tracker, whose pipe nobody holds then, ends too."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import pytest

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    (tmp_path / "slow_score.py").write_text(SLOW_SCORE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    training = subprocess.Popen(
        [sys.executable, "-c", TRAINING], cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert training.stdout.readline().strip() == "scoring"
        deadline = time.monotonic() + 60
        while len(children := _children(training.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)  # the scorer and the resource tracker
        assert len(children) == 2, children
        time.sleep(2)  # the scorer is past its start-up and sleeping in score()
    finally:
        training.send_signal(signal.SIGKILL)
        training.wait()
    deadline = time.monotonic() + 20
    while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if _alive(pid)]

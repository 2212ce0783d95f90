"""zoo.log.MetricsLogger writes TensorBoard scalars beside metrics.jsonl (read back with tensorboard's reader)."""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pytest
import zoo.log
from zoo.log import MetricsLogger


def _scalars(logdir) -> dict:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(logdir))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)]
        for tag in accumulator.Tags()["scalars"]
    }


def test_log_writes_phase_tagged_scalars(tmp_path):
    path = tmp_path / "results" / "metrics.jsonl"
    with MetricsLogger(str(path), stream=io.StringIO()) as log:
        for step in (10, 20, 30):
            log.log(
                step,
                {"loss": np.float32(3.0 / step), "throughput": 100 * step},
                units={"throughput": "img/s"},
            )
        log.log(30, {"top1": 12.5, "top5": 40.0}, phase="eval")
    logdir = tmp_path / "results" / "tensorboard"
    assert len(list(logdir.glob("events.out.tfevents.*"))) == 1
    scalars = _scalars(logdir)
    assert sorted(scalars) == ["eval/top1", "eval/top5", "train/loss", "train/throughput"]
    assert [step for step, _ in scalars["train/loss"]] == [10, 20, 30]
    assert [value for _, value in scalars["train/loss"]] == pytest.approx([0.3, 0.15, 0.1])
    assert scalars["train/throughput"] == [(10, 1000.0), (20, 2000.0), (30, 3000.0)]
    assert scalars["eval/top1"] == [(30, 12.5)] and scalars["eval/top5"] == [(30, 40.0)]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["phase"] for line in lines] == ["train", "train", "train", "eval"]


def test_scalars_are_on_disk_before_close(tmp_path):
    path = tmp_path / "metrics.jsonl"
    log = MetricsLogger(str(path), stream=io.StringIO())
    log.log(1, {"loss": 2.0})
    assert _scalars(tmp_path / "tensorboard") == {"train/loss": [(1, 2.0)]}
    log.close()


def test_without_tensorboard_one_notice_and_no_events(tmp_path, monkeypatch):
    for module in (
        "tensorboard.compat.proto.event_pb2",
        "tensorboard.compat.proto.summary_pb2",
        "tensorboard.summary.writer.event_file_writer",
    ):
        monkeypatch.setitem(sys.modules, module, None)  # importing it now raises ImportError
    monkeypatch.setattr(zoo.log, "_tensorboard_notice_printed", False)
    stream = io.StringIO()
    for run in ("a", "b"):
        with MetricsLogger(str(tmp_path / run / "metrics.jsonl"), stream=stream) as log:
            log.log(1, {"loss": 1.0})
            log.log(2, {"loss": 0.5})
    notices = [line for line in stream.getvalue().splitlines() if line.startswith("note: no TensorBoard")]
    assert len(notices) == 1 and "pip install tensorboard" in notices[0]
    assert not list(tmp_path.glob("*/tensorboard"))
    assert len((tmp_path / "b" / "metrics.jsonl").read_text().splitlines()) == 2


def test_no_event_files_when_off_disabled_or_without_a_path(tmp_path):
    stream = io.StringIO()
    with MetricsLogger(str(tmp_path / "off" / "metrics.jsonl"), tensorboard=False, stream=stream) as log:
        log.log(1, {"loss": 1.0})
    with MetricsLogger(str(tmp_path / "rank1" / "metrics.jsonl"), enabled=False, stream=stream) as log:
        log.log(1, {"loss": 1.0})
    with MetricsLogger(stream=stream) as log:
        log.log(1, {"loss": 1.0})
    assert (tmp_path / "off" / "metrics.jsonl").exists()
    assert not list(tmp_path.rglob("tensorboard"))

"""zoo.results: the runs table read from metrics.jsonl as zoo.log.MetricsLogger writes it, and the summary
a training run's logger prints as it closes."""

import contextlib
import io
import json
import subprocess
import sys
import time
import types

import pytest
import zoo.log
from zoo.log import MetricsLogger
from zoo.results import end_of_run, main, summarize


@pytest.fixture
def clock(monkeypatch):
    """The logger's wall clock, set by the test: records carry the times it is given."""
    now = types.SimpleNamespace(value=1000.0)
    monkeypatch.setattr(
        zoo.log, "time", types.SimpleNamespace(time=lambda: now.value, monotonic=time.monotonic)
    )
    return now


def write_run(folder, clock, train, evals=(), unit="img/s"):
    """Log ``train`` [(time, step, loss, throughput)] and ``evals`` [(time, step, {metrics})] into
    folder/metrics.jsonl through the logger, in step order."""
    readings = [(t, step, "train", {"loss": loss, "throughput": tp}) for t, step, loss, tp in train]
    readings += [(t, step, "eval", metrics) for t, step, metrics in evals]
    with MetricsLogger(folder / "metrics.jsonl", stream=io.StringIO(), tensorboard=False) as log:
        for when, step, phase, metrics in sorted(readings, key=lambda r: (r[0], r[1])):
            clock.value = when
            units = {"throughput": unit} if "throughput" in metrics else None
            log.log(step, metrics, units=units, phase=phase)
        log.close(summary=False)
    return folder


TRAIN = [
    (1000.0, 10, 2.5, 50.0),
    (1010.0, 20, 1.5, 100.0),
    (1020.0, 30, 1.0, 120.0),
    (3725.5, 40, 0.75, 110.0),
]
EVALS = [
    (1015.0, 20, {"top1": 40.0, "top5": 70.0, "epoch": 1}),
    (1030.0, 30, {"top1": 62.5, "top5": 90.0, "epoch": 2}),
    (3730.0, 40, {"top1": 35.0, "top5": 95.0, "epoch": 3}),
]


def test_a_row_holds_the_best_metric_and_where_loss_throughput_wall_steps_and_files(tmp_path, clock, capsys):
    run = write_run(tmp_path / "r50", clock, TRAIN, EVALS)
    (run / "checkpoint.pt").write_bytes(b"x")
    (run / "best.pt").write_bytes(b"x")
    (run / "mlperf.log").write_text(":::MLLOG {}\n")
    row = summarize(run)
    assert (row.metric, row.best, row.unit, row.best_step, row.best_epoch) == ("top1", 62.5, "%", 30, 2)
    assert row.last_loss == 0.75 and row.steps == 40
    assert row.throughput == 110.0 and row.throughput_unit == "img/s"  # median of 100, 120, 110: 50 warms up
    assert row.wall_seconds == 2730.0  # 1000.0 .. 3730.0
    assert row.checkpoint == str(run / "checkpoint.pt") and row.best_checkpoint == str(run / "best.pt")
    assert row.mlperf_logs == [str(run / "mlperf.log")]

    bare = write_run(tmp_path / "bare", clock, TRAIN[:1])  # one reading, no evaluation, no checkpoint
    main([str(run), str(bare)])
    header, first, second = capsys.readouterr().out.splitlines()
    assert header.split() == [
        "run",
        "best",
        "at",
        "loss",
        "throughput",
        "wall",
        "steps",
        "checkpoint",
        "best.pt",
    ]
    assert first.split() == [str(run), "top1", "62.5%", "epoch", "2,", "step", "30", "0.75", "110.0", "img/s",
                             "0:45:30", "40", "yes", "yes"]  # fmt: skip
    assert second.split() == [str(bare), "-", "-", "2.5", "-", "0:00:00", "10", "no", "no"]
    assert first.index("0.75") == header.index("loss") and second.index("2.5") == header.index("loss")


def test_lower_is_better_the_epoch_from_training_and_folders_as_checkpoints(tmp_path, clock):
    train = [(1000.0, 10, 9.0, 20.0), (1001.0, 20, 8.0, 30.0), (1002.0, 30, 7.0, 40.0)]
    evals = [(1000.5, 10, {"wer": 0.5}), (1001.5, 20, {"wer": 0.25}), (1002.5, 30, {"wer": 0.3})]
    run = write_run(tmp_path / "rnnt", clock, train, evals, unit="utt/s")
    with MetricsLogger(run / "metrics.jsonl", stream=io.StringIO(), tensorboard=False) as log:
        clock.value = 1001.2
        log.log(20, {"epoch": 4})  # a training reading of the epoch, as the detectors log it
    (run / "checkpoint" / "step-30").mkdir(parents=True)
    (run / "checkpoint" / "best" / "x").mkdir(parents=True)
    (run / "mlperf_resume1.log").write_text("")
    row = summarize(run)
    assert (row.metric, row.best, row.unit, row.best_step, row.best_epoch) == ("wer", 0.25, "fraction", 20, 4)
    assert row.throughput == 35.0 and row.throughput_unit == "utt/s"
    assert row.checkpoint == str(run / "checkpoint") and row.best_checkpoint == str(
        run / "checkpoint" / "best"
    )
    assert row.mlperf_logs == [str(run / "mlperf_resume1.log")]
    assert row.cells()["best"] == "wer 0.25" and row.cells()["at"] == "epoch 4, step 20"


def test_the_recipe_kept_in_run_json_or_metric_picks_the_metric(tmp_path, clock, capsys):
    run = write_run(tmp_path / "tf", clock, TRAIN, EVALS)
    assert summarize(run).metric == "top1"  # the first quality metric the evaluations logged
    (run / "run.json").write_text(
        json.dumps({"recipe": {"run": {"target": {"metric": "top5", "value": None}}}})
    )
    row = summarize(run)
    assert (row.metric, row.best, row.best_step) == ("top5", 95.0, 40)
    main([str(run), "--json", "--metric", "top1"])
    (printed,) = json.loads(capsys.readouterr().out)
    assert printed["metric"] == "top1" and printed["best"] == 62.5 and printed["best_epoch"] == 2
    assert printed["throughput"] == 110.0 and printed["throughput_unit"] == "img/s"
    assert printed["wall_seconds"] == 2730.0 and printed["steps"] == 40 and printed["checkpoint"] is None


def test_a_missing_dir_a_dir_without_metrics_and_a_corrupt_line_are_one_line_each(tmp_path, clock):
    with pytest.raises(SystemExit, match=f"^error: results directory {tmp_path / 'nope'} does not exist$"):
        main([str(tmp_path / "nope")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(SystemExit, match=f"^error: {tmp_path / 'empty'} has no metrics.jsonl"):
        main([str(tmp_path / "empty")])
    run = write_run(tmp_path / "cut", clock, TRAIN[:2])
    with open(run / "metrics.jsonl", "a") as lines:
        lines.write('{"time": 1020.0, "step": 30, "pha\n')
    with pytest.raises(SystemExit, match=r"^error: .*cut/metrics.jsonl line 3 is not JSON"):
        main([str(run)])
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    with pytest.raises(SystemExit, match=r"line 1 is not a metric record"):
        main([str(run)])


def test_a_training_logger_prints_the_summary_as_it_closes(tmp_path, clock):
    run = tmp_path / "run"
    stream = io.StringIO()
    log = MetricsLogger(run / "metrics.jsonl", stream=stream, tensorboard=False)
    for when, step, loss, throughput in TRAIN:
        clock.value = when
        log.log(step, {"loss": loss, "throughput": throughput}, units={"throughput": "img/s"})
    clock.value = 3730.0
    log.log(40, {"top1": 62.5, "epoch": 3}, phase="eval")
    (run / "checkpoint.pt").write_bytes(b"x")
    (run / "mlperf.log").write_text("")
    log.close()
    log.close()  # once
    summary = stream.getvalue().split("run summary: ", 1)[1].splitlines()
    assert summary == [
        "best top1 62.5% at epoch 3, step 40, wall 0:45:30, 40 steps, steady 110.0 img/s",
        f"  outputs in {run}/: metrics.jsonl, checkpoint.pt, mlperf.log",
        f"  python -m zoo.results {run}  (the runs table)",
    ]

    for name, phase in (("failed", "train"), ("evaluated", "eval"), ("rank1", "train")):
        quiet = io.StringIO()
        with pytest.raises(RuntimeError) if name == "failed" else contextlib.nullcontext():
            with MetricsLogger(
                tmp_path / name / "metrics.jsonl", stream=quiet, enabled=name != "rank1"
            ) as log:
                log.log(1, {"loss": 1.0}, phase=phase)
                if name == "failed":
                    raise RuntimeError("a crash: no summary")
        assert "run summary" not in quiet.getvalue(), name


def test_end_of_run_never_raises(tmp_path):
    stream = io.StringIO()
    end_of_run(tmp_path / "gone", stream)
    assert (
        stream.getvalue() == f"note: no run summary: results directory {tmp_path / 'gone'} does not exist\n"
    )


def test_help_answers_without_a_framework():
    code = (
        "import sys\nfrom zoo.results import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
    )
    code += "print(sorted({'torch', 'tensorflow', 'mxnet'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "--json" in done.stdout and done.stdout.strip().endswith("[]"), done.stderr

"""zoo.plot: a run's metrics.jsonl -> one PNG; bad inputs are one-line errors."""

from __future__ import annotations

import io
import json
import struct

import pytest
from zoo.log import MetricsLogger
from zoo.plot import collect_series, main, plot_run, read_records

pytest.importorskip("matplotlib")


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def _write_run(results):
    """A run as the models log it: train steps, a per-epoch summary, val evaluations, an event."""
    lines = []
    start = 1_700_000_000.0
    for step in range(1, 41):
        metrics = {"loss": 4.0 / step, "lr": 0.1}
        if step % 10 == 0:
            metrics["throughput"] = 900.0 + step
        units = {"throughput": "img/s"} if "throughput" in metrics else {}
        lines.append(
            {"time": start + 6 * step, "step": step, "phase": "train", "metrics": metrics, "units": units}
        )
        if step % 20 == 0:
            lines.append(
                {
                    "time": start + 6 * step + 1,
                    "step": step,
                    "phase": "eval",
                    "metrics": {
                        "top1": 30.0 + step,
                        "top5": 60.0 + step / 2,
                        "loss": 3.0 / step,
                        "epoch": step // 20,
                    },
                    "units": {"top1": "%", "top5": "%", "loss": "", "epoch": ""},
                }
            )
    lines.insert(0, {"time": start, "key": "run_start", "value": None, "metadata": {}})
    results.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(line) + "\n" for line in lines)
    (results / "metrics.jsonl").write_text(text + '{"time": 1700000300, "step": 41, "pha')  # killed mid-line


def test_series_sort_metrics_into_panels(tmp_path):
    _write_run(tmp_path)
    records, unreadable = read_records(tmp_path / "metrics.jsonl")
    assert unreadable == 1 and len(records) == 42
    panels = collect_series(records)
    assert list(panels) == ["loss", "quality", "throughput"]
    assert sorted(panels["loss"]) == ["eval/loss", "train/loss"]
    assert sorted(panels["quality"]) == ["eval/top1", "eval/top5"]  # the epoch counter is no curve
    assert sorted(panels["throughput"]) == ["train/throughput"]
    top1 = panels["quality"]["eval/top1"]
    assert top1.steps == [20, 40] and top1.values == [50.0, 70.0] and top1.unit == "%"
    assert top1.times == [1_700_000_121.0, 1_700_000_241.0]
    assert panels["throughput"]["train/throughput"].values == [910.0, 920.0, 930.0, 940.0]
    assert panels["throughput"]["train/throughput"].unit == "img/s"
    assert panels["loss"]["train/loss"].values[:2] == [4.0, 2.0]


def test_plot_writes_a_png(tmp_path, capsys):
    results = tmp_path / "results"
    _write_run(results)
    main([str(results)])
    png = results / "metrics.png"
    assert capsys.readouterr().out.strip() == f"wrote {png}"
    width, height = _png_size(png)
    assert width == 1200 and 900 <= height <= 1100  # 2 columns x 3 rows at 100 dpi
    assert png.stat().st_size > 20_000  # curves, not an empty canvas
    assert not list(results.glob(".*.tmp"))  # the atomic write left no temp file


def test_output_flag_and_a_loss_only_run(tmp_path):
    results = tmp_path / "results"
    with MetricsLogger(str(results / "metrics.jsonl"), stream=io.StringIO(), tensorboard=False) as log:
        for step in range(1, 6):
            log.log(step, {"loss": 1.0 / step})
    output = plot_run(results, tmp_path / "plots" / "run.png")
    assert output == tmp_path / "plots" / "run.png"
    width, height = _png_size(output)
    assert width == 1200 and 300 <= height <= 400  # one row


def test_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    assert "RESULTS_DIR" in capsys.readouterr().out


def test_bad_inputs_are_one_line_errors(tmp_path):
    with pytest.raises(SystemExit, match=f"^error: results folder {tmp_path / 'none'} does not exist$"):
        main([str(tmp_path / "none")])
    with pytest.raises(SystemExit, match=f"^error: {tmp_path} has no metrics.jsonl"):
        main([str(tmp_path)])
    (tmp_path / "metrics.jsonl").write_text(
        json.dumps({"time": 1.0, "key": "run_start", "value": None, "metadata": {}})
        + "\n"
        + json.dumps({"time": 2.0, "step": 1, "phase": "train", "metrics": {"lr": 0.1}, "units": {}})
        + "\nnot json\n"
    )
    with pytest.raises(SystemExit) as failure:
        main([str(tmp_path)])
    message = str(failure.value.code)
    assert message.startswith(f"error: {tmp_path / 'metrics.jsonl'} has no numeric") and "\n" not in message
    assert not (tmp_path / "metrics.png").exists()

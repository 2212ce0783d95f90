"""A run's curves as one PNG, from the metrics.jsonl that zoo.log.MetricsLogger writes.

    python -m zoo.plot RESULTS_DIR [--output FILE.png]     # default: RESULTS_DIR/metrics.png

Rows (each drawn where the log has it), against the step on the left and wall-clock time since the
first record on the right:

- loss: ``loss`` and its ``loss_*`` parts, of both phases (train/loss, eval/loss);
- quality: the quality metrics of the evaluation phase (zoo.metrics.quality_metrics: eval/top1, eval/map, ...);
- throughput: ``throughput``, in the unit the run logged it in.

Names and phases are zoo.metrics' vocabulary, the same in every model and framework.

Event lines (with "key") and lines that are not JSON (a run killed mid-write) are skipped. Needs
matplotlib (headless: the Agg backend); the PNG is written atomically.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

from zoo.cli import entry_point
from zoo.errors import UserError
from zoo.metrics import LOSS_PART_PREFIX, quality_metrics

METRICS_FILE = "metrics.jsonl"
PANELS = ("loss", "quality", "throughput")


class Series:
    """One curve: ``label`` ("<phase>/<name>"), its ``unit`` and parallel lists of steps, times, values."""

    def __init__(self, label: str, unit: str):
        self.label, self.unit = label, unit
        self.steps: list[float] = []
        self.times: list[float] = []  # Unix seconds
        self.values: list[float] = []


def read_records(path) -> tuple[list[dict], int]:
    """The metric lines of a metrics.jsonl (dicts with step, phase, metrics), and how many lines were skipped
    as not JSON."""
    records, unreadable = [], 0
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                unreadable += 1
                continue
            if isinstance(record, dict) and "key" not in record and isinstance(record.get("metrics"), dict):
                records.append(record)
    return records, unreadable


def panel_of(phase: str, name: str) -> str | None:
    """Which of PANELS a metric belongs to, or None for one no panel shows."""
    if name == "throughput":
        return "throughput"
    if name == "loss" or name.startswith(LOSS_PART_PREFIX):
        return "loss"
    if phase == "eval" and name in quality_metrics():
        return "quality"
    return None


def collect_series(records: list[dict]) -> dict[str, dict[str, Series]]:
    """{panel: {label: Series}} for the numeric metrics of ``records``, in file order; empty panels absent."""
    panels: dict[str, dict[str, Series]] = {}
    for record in records:
        phase = str(record.get("phase", "train"))
        step, when = record.get("step"), record.get("time")
        if not _is_number(step) or not _is_number(when):
            continue
        units = record.get("units") or {}
        for name, value in record["metrics"].items():
            panel = panel_of(phase, name)
            if panel is None or not _is_number(value):
                continue
            label = f"{phase}/{name}"
            series = panels.setdefault(panel, {}).setdefault(
                label, Series(label, str(units.get(name, "")).strip())
            )
            series.steps.append(step)
            series.times.append(when)
            series.values.append(value)
    return {panel: panels[panel] for panel in PANELS if panel in panels}


def plot_run(results_dir, output=None) -> pathlib.Path:
    """Draw RESULTS_DIR/metrics.jsonl to ``output`` (default RESULTS_DIR/metrics.png); return its path.

    Raises UserError for a missing folder, a missing metrics.jsonl, or a file without numeric metrics.
    """
    results_dir = pathlib.Path(results_dir)
    if not results_dir.is_dir():
        raise UserError(f"results folder {results_dir} does not exist")
    metrics_path = results_dir / METRICS_FILE
    if not metrics_path.is_file():
        raise UserError(f"{results_dir} has no {METRICS_FILE} (write it with zoo.log.MetricsLogger)")
    records, unreadable = read_records(metrics_path)
    panels = collect_series(records)
    if not panels:
        raise UserError(f"{metrics_path} has no numeric loss, quality or throughput metrics to plot")
    if unreadable:
        print(f"note: skipped {unreadable} line(s) of {metrics_path} that are not JSON", file=sys.stderr)
    output = pathlib.Path(output) if output else results_dir / "metrics.png"
    _draw(panels, output, title=str(results_dir))
    return output


def _draw(panels: dict[str, dict[str, Series]], output: pathlib.Path, title: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise UserError("zoo.plot needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")  # headless: no display on training nodes
    from matplotlib import pyplot

    from zoo.io import atomic_write

    start = min(min(series.times) for panel in panels.values() for series in panel.values())
    end = max(max(series.times) for panel in panels.values() for series in panel.values())
    time_unit, seconds_per_unit = _time_unit(end - start)
    figure, axes = pyplot.subplots(len(panels), 2, figsize=(12, 3.4 * len(panels)), squeeze=False)
    for row, (panel, curves) in enumerate(panels.items()):
        by_step, by_time = axes[row]
        for series in curves.values():
            label = f"{series.label} ({series.unit})" if series.unit else series.label
            marker = "o" if len(series.values) < 30 else None  # sparse evaluations stay visible
            by_step.plot(series.steps, series.values, marker=marker, markersize=3, label=label)
            elapsed = [(when - start) / seconds_per_unit for when in series.times]
            by_time.plot(elapsed, series.values, marker=marker, markersize=3, label=label)
        by_step.set_xlabel("step")
        by_time.set_xlabel(f"wall-clock time ({time_unit})")
        for axis in (by_step, by_time):
            axis.set_title(f"{panel} vs {'step' if axis is by_step else 'time'}")
            axis.grid(True, alpha=0.3)
            axis.legend(fontsize="small")
    figure.suptitle(title)
    figure.tight_layout()
    with atomic_write(output) as tmp:
        figure.savefig(tmp, format="png", dpi=100)
    pyplot.close(figure)


def _time_unit(span_seconds: float) -> tuple[str, float]:
    if span_seconds < 120:
        return "s", 1.0
    if span_seconds < 120 * 60:
        return "min", 60.0
    return "h", 3600.0


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and not math.isinf(value)


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.plot",
        description="Draw a run's loss, quality and throughput curves (vs step and vs wall-clock time) "
        "from RESULTS_DIR/metrics.jsonl to one PNG.",
    )
    parser.add_argument("results_dir", metavar="RESULTS_DIR", help="the run's folder, holding metrics.jsonl")
    parser.add_argument(
        "--output", metavar="FILE.png", help="where to write (default: RESULTS_DIR/metrics.png)"
    )
    args = parser.parse_args(argv)
    print(f"wrote {plot_run(args.results_dir, args.output)}")


if __name__ == "__main__":
    main()

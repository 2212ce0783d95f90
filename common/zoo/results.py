"""Runs at a glance: one row per results directory, and the summary a training run prints as it ends.

    python -m zoo.results RESULTS_DIR [RESULTS_DIR ...] [--metric NAME] [--json]

A row is read from the directory's ``metrics.jsonl`` (the records ``zoo.log.MetricsLogger`` writes:
``time``, ``step``, ``phase``, ``metrics``, ``units``, names from ``zoo.metrics``) and the files beside it:

- the quality metric: ``--metric``, else the run's ``run.target.metric`` where the directory keeps its
  recipe (``run.json``'s ``recipe``), else the first quality metric (``zoo.metrics.quality_metrics``
  order) its evaluations logged; its best evaluation in the metric's direction (lower is better for
  ``zoo.metrics.LOWER_IS_BETTER``), with the step and epoch it was reached at;
- the last training loss; the steady throughput: the median of the training ``throughput`` readings after
  the first (which compiles and warms up), in the unit the run logged; the wall time from the first
  record's time to the last; the steps (the highest step logged);
- the outputs: ``checkpoint.pt`` or ``checkpoint/``, the best checkpoint (``best.pt``, ``best/``,
  ``checkpoint/best/``: zoo.retention), the MLPerf logs (``mlperf.log``, ``mlperf_resume<N>.log``).

A directory that is missing or has no metrics.jsonl, or a line of it that is not a metric record, is one
line naming it (and the line's number). ``MetricsLogger.close()`` prints :func:`end_of_run` for the run it
logged, so every training run ends with the same row on its console.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import pathlib
import statistics
import sys

from zoo.cli import entry_point
from zoo.errors import UserError, one_line
from zoo.log import _fmt, _unit_suffix
from zoo.metrics import LOWER_IS_BETTER, quality_metrics

METRICS_FILE = "metrics.jsonl"
RUN_FILE = "run.json"  # where a run keeps its recipe beside the metrics (TensorFlow's models)
CHECKPOINTS = ("checkpoint.pt", "checkpoint")  # PyTorch's file; a sharded or a TensorFlow/MXNet folder
BEST_CHECKPOINTS = ("best.pt", "best", "checkpoint/best")  # zoo.retention's copies
MLPERF_LOGS = ("mlperf.log", "mlperf_resume*.log")  # zoo.mlperf.log_path
COLUMNS = ("run", "best", "at", "loss", "throughput", "wall", "steps", "checkpoint", "best.pt")


@dataclasses.dataclass
class Run:
    """One results directory, summed up. A value the log does not have is None."""

    dir: str
    metric: str | None = None
    best: float | None = None
    unit: str = ""
    best_step: int | None = None
    best_epoch: float | None = None
    last_loss: float | None = None
    throughput: float | None = None
    throughput_unit: str = ""
    wall_seconds: float | None = None
    steps: int | None = None
    checkpoint: str | None = None
    best_checkpoint: str | None = None
    metrics_file: str = ""
    mlperf_logs: list[str] = dataclasses.field(default_factory=list)

    def cells(self) -> dict[str, str]:
        """The table's cells of this run (COLUMNS), '-' where the log has nothing."""
        best = "-" if self.best is None else f"{self.metric} {_fmt(self.best)}{_unit_suffix(self.unit)}"
        at = [f"epoch {_fmt(self.best_epoch)}"] if self.best_epoch is not None else []
        at += [f"step {self.best_step}"] if self.best_step is not None else []
        throughput = (
            "-" if self.throughput is None else f"{self.throughput:,.1f} {self.throughput_unit}".strip()
        )
        return {
            "run": self.dir,
            "best": best,
            "at": ", ".join(at) if self.best is not None and at else "-",
            "loss": "-" if self.last_loss is None else _fmt(self.last_loss),
            "throughput": throughput,
            "wall": "-" if self.wall_seconds is None else duration(self.wall_seconds),
            "steps": "-" if self.steps is None else str(self.steps),
            "checkpoint": "yes" if self.checkpoint else "no",
            "best.pt": "yes" if self.best_checkpoint else "no",
        }


def read_records(path) -> list[dict]:
    """The metric records of a metrics.jsonl, in file order. A line that is not a JSON object with a
    ``metrics`` mapping is a UserError naming the file and the line's number; blank lines are skipped."""
    records = []
    with open(path, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as error:
                raise UserError(
                    f"{path} line {number} is not JSON ({error.msg}): a run cut mid-write?"
                ) from None
            if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
                raise UserError(f"{path} line {number} is not a metric record (no 'metrics' mapping)")
            records.append(record)
    return records


def summarize(results_dir, metric: str | None = None) -> Run:
    """The row of ``results_dir`` (see the module's doc). UserError for a missing directory, a missing
    metrics.jsonl or a corrupt line of it."""
    folder = pathlib.Path(results_dir)
    if not folder.is_dir():
        raise UserError(f"results directory {folder} does not exist")
    path = folder / METRICS_FILE
    if not path.is_file():
        raise UserError(f"{folder} has no {METRICS_FILE} (not a training run's results directory?)")
    records = read_records(path)
    run = Run(dir=str(results_dir), metrics_file=str(path))
    _quality(run, records, metric or _recipe_metric(folder))
    _training(run, records)
    times = [r["time"] for r in records if _is_number(r.get("time"))]
    run.wall_seconds = max(times) - min(times) if times else None
    steps = [r["step"] for r in records if _is_number(r.get("step"))]
    run.steps = int(max(steps)) if steps else None
    run.checkpoint = _first_present(folder, CHECKPOINTS)
    run.best_checkpoint = _first_present(folder, BEST_CHECKPOINTS)
    run.mlperf_logs = [str(p) for pattern in MLPERF_LOGS for p in sorted(folder.glob(pattern))]
    return run


def _quality(run: Run, records: list[dict], metric: str | None) -> None:
    """The best evaluation of the run's quality metric, and the step and epoch it was reached at."""
    evaluations = [r for r in records if r.get("phase") == "eval"]
    logged = {name for r in evaluations for name, value in r["metrics"].items() if _is_number(value)}
    if metric not in logged:
        metric = next((name for name in quality_metrics() if name in logged), None)
    if metric is None:
        return
    lower = metric in LOWER_IS_BETTER
    best = None
    for record in evaluations:
        value = record["metrics"].get(metric)
        if _is_number(value) and (best is None or (value < best[0] if lower else value > best[0])):
            best = (value, record)
    value, record = best
    run.metric, run.best = metric, value
    run.unit = str((record.get("units") or {}).get(metric, ""))
    run.best_step = int(record["step"]) if _is_number(record.get("step")) else None
    run.best_epoch = record["metrics"].get("epoch")
    if not _is_number(run.best_epoch):  # the epoch of the last training reading at or before that step
        epochs = [
            r["metrics"]["epoch"]
            for r in records
            if _is_number(r["metrics"].get("epoch"))
            and (run.best_step is None or (_is_number(r.get("step")) and r["step"] <= run.best_step))
        ]
        run.best_epoch = epochs[-1] if epochs else None


def _training(run: Run, records: list[dict]) -> None:
    """The last training loss and the steady throughput (median of the readings after the first)."""
    training = [r for r in records if r.get("phase", "train") == "train"]
    losses = [r["metrics"]["loss"] for r in training if _is_number(r["metrics"].get("loss"))]
    run.last_loss = losses[-1] if losses else None
    readings = [r for r in training if _is_number(r["metrics"].get("throughput"))]
    if len(readings) > 1:
        run.throughput = statistics.median(r["metrics"]["throughput"] for r in readings[1:])
        run.throughput_unit = str((readings[-1].get("units") or {}).get("throughput", ""))


def _recipe_metric(folder: pathlib.Path) -> str | None:
    """``run.target.metric`` of the recipe the run keeps in RESULTS_DIR/run.json, where it keeps one."""
    try:
        saved = json.loads((folder / RUN_FILE).read_text())
        return saved["recipe"]["run"]["target"]["metric"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _first_present(folder: pathlib.Path, names) -> str | None:
    for name in names:
        path = folder / name
        if path.is_file() or (path.is_dir() and any(path.iterdir())):
            return str(path)
    return None


def table(runs: list[Run]) -> str:
    """The runs as a text table: a header of COLUMNS and one aligned row each."""
    rows = [dict(zip(COLUMNS, COLUMNS, strict=True))] + [run.cells() for run in runs]
    widths = {c: max(len(row[c]) for row in rows) for c in COLUMNS}
    return "\n".join("  ".join(row[c].ljust(widths[c]) for c in COLUMNS).rstrip() for row in rows)


def end_of_run(results_dir, stream=None) -> None:
    """Print a finished run's summary to ``stream`` (default stderr): its best quality metric and where,
    wall time, steady throughput and steps, and where its outputs are. ``zoo.log.MetricsLogger.close()``
    calls it on the rank that writes metrics.jsonl. It never raises: a log it cannot read is one note."""
    stream = sys.stderr if stream is None else stream
    try:
        run = summarize(results_dir)
    except Exception as error:  # noqa: BLE001 - the run has finished: a summary never fails it
        stream.write(f"note: no run summary: {one_line(error)}\n")
        return
    cells = run.cells()
    quality = "no evaluation" if run.best is None else f"best {cells['best']} at {cells['at']}"
    facts = [quality, f"wall {cells['wall']}", f"{cells['steps']} steps"]
    facts += [f"steady {cells['throughput']}"] if run.throughput is not None else []
    outputs = [METRICS_FILE] + [
        pathlib.Path(path).relative_to(results_dir).as_posix()
        for path in (run.checkpoint, run.best_checkpoint, *run.mlperf_logs)
        if path
    ]
    stream.write(
        f"run summary: {', '.join(facts)}\n"
        f"  outputs in {pathlib.Path(results_dir)}/: {', '.join(outputs)}\n"
        f"  python -m zoo.results {results_dir}  (the runs table)\n"
    )
    stream.flush()


def duration(seconds: float) -> str:
    """Seconds as h:mm:ss."""
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@entry_point
def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.results",
        description="One row per results directory, from its metrics.jsonl: the best quality metric and "
        "the epoch/step it was reached at, the last training loss, the steady throughput (median of the "
        "readings after the first), wall time, steps, and whether a checkpoint and a best checkpoint exist.",
    )
    parser.add_argument(
        "results_dirs", nargs="+", metavar="RESULTS_DIR", help="a run's folder, holding metrics.jsonl"
    )
    parser.add_argument(
        "--metric",
        choices=quality_metrics(),
        help="the quality metric to rank evaluations by (default: the recipe's run.target.metric where the "
        "directory keeps it, else the first quality metric the evaluations logged)",
    )
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    args = parser.parse_args(argv)
    runs = [summarize(folder, args.metric) for folder in args.results_dirs]
    if args.json:
        print(json.dumps([dataclasses.asdict(run) for run in runs], indent=1))
    else:
        print(table(runs))


if __name__ == "__main__":
    main()

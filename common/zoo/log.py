"""Metrics logging: JSON lines to a file, TensorBoard scalars, a readable console line, a progress bar.

    with MetricsLogger("results/metrics.jsonl", total_steps=len(loader), desc="epoch 1",
                       enabled=is_primary()) as logger:
        for step, (x, y) in enumerate(loader, 1):
            ...
            logger.progress(step, items=len(x), metrics={"loss": loss.item()})
        logger.log(step, {"top1": 76.1, "loss": 0.97}, phase="eval")

Every JSON line is an object with ``time`` (Unix seconds), ``step``, ``phase``, ``metrics``, ``units``.
Phases and metric names are the vocabulary's (``zoo.metrics``): ``train`` or ``eval``, and a listed name,
whose unit the logger fills in (``throughput`` takes its unit from ``units``); anything else is a
ValueError, so every model's metrics.jsonl speaks the same language.
When a training run's logger closes (a ``train`` reading went into a ``metrics.jsonl``; not on an
exception), it prints the run's summary on its stream, so on the rank that logs: the best quality metric
and where, wall time, steady throughput and the outputs (``zoo.results.end_of_run``; the same row for
many runs: ``python -m zoo.results DIR ...``).
MLPerf events are not this logger's: ``zoo.mlperf.MLPerfLogger`` writes them through
``mlperf_logging.mllog``.

TensorBoard: every ``log()`` also writes each metric as a scalar tagged ``<phase>/<name>`` (e.g.
``train/loss``, ``eval/top1``) at ``step`` into ``tensorboard/`` beside the metrics file
(``results/tensorboard/events.out.tfevents.*``), the same for PyTorch, TensorFlow and MXNet runs:
``tensorboard --logdir results/tensorboard``. It uses the ``tensorboard`` package's event-file writer
(as ``torch.utils.tensorboard`` does); where that package is missing, one notice is printed and no
event files are written. ``tensorboard=False`` turns it off; a logger without ``path`` writes none.
"""

from __future__ import annotations

import json
import os
import sys
import time

from zoo.metrics import check_phase, units_for

_TENSORBOARD_DIR = "tensorboard"
_METRICS_FILE = "metrics.jsonl"  # the name zoo.results reads a results directory's records from
_tensorboard_notice_printed = False  # the missing-package notice is printed once per process


class MetricsLogger:
    """One logger per run. On non-primary ranks pass ``enabled=False``: every method is then a no-op."""

    def __init__(
        self,
        path: str | None = None,
        *,
        enabled: bool = True,
        total_steps: int | None = None,
        desc: str = "",
        stream=None,
        tensorboard: bool = True,
    ):
        self.enabled = enabled
        self.total_steps = total_steps
        self.desc = desc
        # Resolved per logger, not at import: a replaced sys.stderr (pytest, notebooks) is honoured.
        self.stream = stream = sys.stderr if stream is None else stream
        self._file = None
        self._results_dir = None  # where metrics.jsonl is: close() prints the run's summary of it
        self._trained = False  # a training reading was logged: this logger's run is a training run
        self._tensorboard_dir = None
        self._tensorboard = None  # the event-file writer, opened at the first log()
        self._bar_open = False  # a progress line without its newline is on the stream
        self._last_step = None
        self._last_time = time.monotonic()
        self._last_drawn = 0.0
        self._ema_seconds = self._ema_items = None
        if not enabled:
            return
        if path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._file = open(path, "a", buffering=1)
            if os.path.basename(path) == _METRICS_FILE:
                self._results_dir = os.path.dirname(str(path)) or "."
            if tensorboard:
                self._tensorboard_dir = os.path.join(os.path.dirname(os.path.abspath(path)), _TENSORBOARD_DIR)
        self._tty = hasattr(stream, "isatty") and stream.isatty()

    def log(self, step: int, metrics: dict, *, units: dict | None = None, phase: str = "train") -> None:
        """Append {"time","step","phase","metrics","units"} as one JSON line; print one readable line;
        write each metric as the TensorBoard scalar ``<phase>/<name>`` at ``step``. ``phase`` and the
        names must be zoo.metrics' (ValueError otherwise); ``units`` is needed only for ``throughput``."""
        check_phase(phase)
        units = units_for(metrics, units)  # checked on every rank: a wrong name fails in any process
        if not self.enabled:
            return
        metrics = {k: _number(v) for k, v in metrics.items()}
        now = time.time()
        self._trained = self._trained or phase == "train"
        self._write_json({"time": now, "step": step, "phase": phase, "metrics": metrics, "units": units})
        self._write_scalars(now, step, phase, metrics)
        of = f"/{self.total_steps}" if self.total_steps and phase == "train" else ""
        values = "  ".join(f"{k} {_fmt(v)}{_unit_suffix(units[k])}" for k, v in metrics.items())
        self._print_line(f"[{phase}] step {step}{of}  {values}")

    def progress(self, step: int, items: int, metrics: dict | None = None) -> None:
        """Redraw the progress bar: step/total, items/s (EMA), ETA.

        ``step`` counts finished steps (1-based); ``items`` is the samples in this step. A step number
        lower than the last one (a new epoch) restarts the timing. Off a terminal, a line is printed
        at most every 10 s and at the last step.
        """
        if not self.enabled:
            return
        now = time.monotonic()
        if self._last_step is not None and step > self._last_step:
            steps, seconds = step - self._last_step, now - self._last_time
            self._ema_seconds = _ema(self._ema_seconds, seconds / steps)
            self._ema_items = _ema(self._ema_items, items)
        self._last_step, self._last_time = step, now

        last = self.total_steps is not None and step >= self.total_steps
        if not last and now - self._last_drawn < (0.1 if self._tty else 10.0):
            return
        self._last_drawn = now
        line = self._bar(step, metrics or {})
        if self._tty:
            self.stream.write("\r\033[K" + line + ("\n" if last else ""))
            self._bar_open = not last
            self.stream.flush()
        else:
            self._print_line(line)

    def close(self, *, summary: bool = True) -> None:
        """Close the files. A training run's logger (a ``train`` reading logged into a metrics.jsonl) then
        prints the run's summary (``zoo.results.end_of_run``: best metric and where, wall time, steady
        throughput, the outputs) once; ``summary=False``, or leaving a ``with`` block on an exception, skips it."""
        summarize = summary and self._file is not None and self._trained and self._results_dir is not None
        if self._tensorboard is not None:
            self._tensorboard.close()
            self._tensorboard = None
        if self._bar_open:
            self.stream.write("\n")
            self._bar_open = False
        if self._file is not None:
            self._file.close()
            self._file = None
        if summarize:
            from zoo.results import end_of_run

            end_of_run(self._results_dir, self.stream)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self.close(summary=exc_type is None)

    def _bar(self, step: int, metrics: dict) -> str:
        total = self.total_steps
        parts = [self.desc] if self.desc else []
        if total:
            filled = min(20, 20 * step // total)
            parts.append(f"[{'#' * filled}{'.' * (20 - filled)}] {step}/{total}")
        else:
            parts.append(f"step {step}")
        if self._ema_seconds:
            parts.append(f"{self._ema_items / self._ema_seconds:,.1f} items/s")
            if total:
                parts.append(f"ETA {_duration(max(total - step, 0) * self._ema_seconds)}")
        parts += [f"{k} {_fmt(_number(v))}" for k, v in metrics.items()]
        return "  ".join(parts)

    def _print_line(self, line: str) -> None:
        if self._bar_open:
            self.stream.write("\n")
            self._bar_open = False
        self.stream.write(line + "\n")
        self.stream.flush()

    def _write_json(self, record: dict) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, default=_jsonable) + "\n")

    def _write_scalars(self, wall_time: float, step: int, phase: str, metrics: dict) -> None:
        if self._tensorboard is None and self._tensorboard_dir is not None:
            self._tensorboard = _open_tensorboard(self._tensorboard_dir, self._print_line)
            self._tensorboard_dir = None  # opened (or found missing) once
        if self._tensorboard is None:
            return
        self._tensorboard.write(
            wall_time, step, {f"{phase}/{name}": value for name, value in metrics.items()}
        )


class _ScalarEventWriter:
    """Scalars as TensorBoard summary events through tensorboard's EventFileWriter and protos."""

    def __init__(self, logdir: str, writer_class, event_pb2, summary_pb2):
        self._event_pb2, self._summary_pb2 = event_pb2, summary_pb2
        self._writer = writer_class(logdir)

    def write(self, wall_time: float, step: int, scalars: dict) -> None:
        summary = self._summary_pb2.Summary(
            value=[
                self._summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()
            ]
        )
        self._writer.add_event(self._event_pb2.Event(wall_time=wall_time, step=step, summary=summary))
        self._writer.flush()  # log() runs every N steps: a crash loses no curve

    def close(self) -> None:
        self._writer.close()


def _open_tensorboard(logdir: str, print_line) -> _ScalarEventWriter | None:
    """A scalar writer into ``logdir``; None, with one notice per process, where tensorboard is missing."""
    global _tensorboard_notice_printed
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as error:
        if not _tensorboard_notice_printed:
            _tensorboard_notice_printed = True
            print_line(f"note: no TensorBoard scalars ({error}); pip install tensorboard to get them")
        return None
    return _ScalarEventWriter(logdir, EventFileWriter, event_pb2, summary_pb2)


def _ema(previous, value, alpha=0.1):
    return value if previous is None else (1 - alpha) * previous + alpha * value


def _number(value):
    """Plain float/int from a Python, numpy or framework scalar (anything with .item())."""
    if hasattr(value, "item"):
        value = value.item()
    return value if isinstance(value, int | float) else float(value)


def _jsonable(value):
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def _unit_suffix(unit: str) -> str:
    """How a unit follows its value on the console: "76.1%", "2,350 img/s", "0.72" (a fraction, a plain number)."""
    if unit in ("", "fraction"):
        return ""
    return unit if unit == "%" else f" {unit}"


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"

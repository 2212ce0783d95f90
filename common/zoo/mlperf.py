"""MLPerf training logs through ``mlperf_logging.mllog``, and the compliance checker that verifies them.

One logger per run, on the primary rank only; it writes ``:::MLLOG {...}`` lines to ``path`` (appended:
give every run its own file, the checker accepts one run per file), and to stdout only where the script
runs with ``--verbose`` (``zoo.console``)::

    from zoo.mlperf import MLPerfLogger, check_log

    with MLPerfLogger(results_dir / "mlperf.log", "resnet", enabled=is_primary) as mlperf:
        mlperf.cache_clear()                                   # after dropping the page cache
        mlperf.init_start()
        mlperf.seed(seed)
        mlperf.global_batch_size(batch_size * world_size)
        mlperf.gradient_accumulation_steps(1)
        mlperf.train_samples(len(train_set))
        mlperf.eval_samples(len(val_set))
        mlperf.hyperparameters(opt_name="sgd", sgd_opt_base_learning_rate=lr, ...)  # the benchmark's opt_* keys
        ...build the model, compile, warm up...
        mlperf.init_stop()
        mlperf.run_start()
        for epoch in range(1, epochs + 1):                     # epoch numbers are the caller's (1-based here)
            mlperf.epoch_start(epoch)
            ...train one epoch...
            mlperf.epoch_stop(epoch)
            mlperf.eval_start(epoch)
            top1 = ...
            mlperf.eval_stop(epoch)
            mlperf.eval_accuracy(top1 / 100, epoch)            # a fraction in 0..1, not percent
            if top1 / 100 >= target:
                break
        mlperf.run_stop("success" if top1 / 100 >= target else "aborted")
    check_log(results_dir / "mlperf.log", "resnet")           # raises MLPerfComplianceError on a failure

The constructor logs the ``submission_*`` keys (org "zoo", platform from the GPUs found, status
"onprem", the division). An exception inside the ``with`` block after ``run_start`` logs
``run_stop`` with status "aborted". ``enabled=False`` makes every method a no-op (other ranks).
From the shell: ``python -m zoo.mlperf RESULTS_DIR/mlperf.log [--benchmark resnet]``.

Division. The closed division's rules demand the published quality (``CLOSED_TARGETS``) and the
reference's hyper-parameters; a short or tiny run cannot pass them. The open division accepts any
``eval_accuracy`` below 1.0 (``dlrm_dcnv2``: up to 1.0) and needs none of the benchmark's opt_* keys,
so ``division="open"`` is the default; pass ``division="closed"`` for a full-length run with the
reference recipe. Exception: transformer's 0.7.0 open rules keep the closed target (BLEU >= 25, logged
as 0.25), so no transformer run below that target passes in either division.

Rulesets (``RULESETS``: why each benchmark is checked against the ruleset it is), the keys every benchmark
must log and the keys and quality target each benchmark adds in the closed division: docs/MLPERF.md.

Keys a ruleset does not know are allowed, so a model may log the closed keys in an open run.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import logging
import os
import pathlib
import subprocess
import sys
import tempfile

from zoo.errors import UserError

RULESETS = {
    "resnet": "4.0.0",
    "bert": "5.0.0",
    "ssd": "1.0.0",
    "maskrcnn": "3.1.0",
    "transformer": "0.7.0",
    "dlrm_dcnv2": "6.0.0",
    "gpt3": "4.1.0",
    "llama31_8b": "5.1.0",
    "unet3d": "4.0.0",
    "retinanet": "5.1.0",
    "rnnt": "3.1.0",  # the last round with the RNN-T
}
# The closed division's quality targets, in eval_accuracy's unit (fractions; maskrcnn: both mAPs).
CLOSED_TARGETS = {
    "resnet": 0.759,
    "bert": 0.720,
    "ssd": 0.23,
    "maskrcnn": {"BBOX": 0.377, "SEGM": 0.339},
    "transformer": 0.25,
    "dlrm_dcnv2": 0.80275,
    "gpt3": 2.69,
    "llama31_8b": 3.3,
    "unet3d": 0.908,
    "retinanet": 0.34,
    "rnnt": 0.058,  # word error rate on dev-clean: at or below
}
DIVISIONS = ("open", "closed")
STATUSES = ("onprem", "cloud", "preview", "research")
RUN_STATUSES = ("success", "aborted")
_PACKAGE = "mlperf-logging==4.1.68"
# Frames between mllog's caller lookup and the model's call: _log_helper, start/end/event, _log, the method.
_STACK_OFFSET = 3


LOG_NAME = "mlperf.log"


def log_path(results_dir, resumed: bool) -> pathlib.Path:
    """Where a run writes its MLPerf log, the same in every model and framework: ``RESULTS_DIR/mlperf.log``
    for a new run (a previous run's file is removed), ``mlperf_resume1.log``, ``mlperf_resume2.log``, ...
    for each resumed one (the compliance checker reads one run per file)."""
    results_dir = pathlib.Path(results_dir)
    if not resumed:
        (results_dir / LOG_NAME).unlink(missing_ok=True)
        return results_dir / LOG_NAME
    index = 1
    while (results_dir / f"mlperf_resume{index}.log").exists():
        index += 1
    return results_dir / f"mlperf_resume{index}.log"


class MLPerfComplianceError(Exception):
    """A log the MLPerf compliance checker rejects; the message ends with the checker's output."""


class MLPerfLogger:
    """Writes one run's MLPerf events through ``mllog`` to ``path`` (appended), and to stdout where
    ``stdout`` is True (default: ``zoo.console.verbose()``, the script's ``--verbose``).

    ``benchmark`` is a key of RULESETS; ``division`` "open" (default) or "closed"; ``platform``
    defaults to the GPUs found (e.g. "8xNVIDIA H100 80GB HBM3"), else "cpu". Every method's
    ``epoch`` is written as metadata ``epoch_num`` and ``samples`` (optional) as ``samples_count``.
    Values may be Python, numpy or framework scalars. ``enabled=False``: every method is a no-op.
    """

    def __init__(
        self,
        path,
        benchmark: str,
        *,
        division: str = "open",
        enabled: bool = True,
        org: str = "zoo",
        platform: str | None = None,
        status: str = "onprem",
        stdout: bool | None = None,
    ):
        if benchmark not in RULESETS:
            raise UserError(f"MLPerf benchmark {benchmark!r} is not one of {', '.join(RULESETS)}")
        if division not in DIVISIONS:
            raise UserError(f"MLPerf division {division!r} is not one of {', '.join(DIVISIONS)}")
        if status not in STATUSES:
            raise UserError(f"MLPerf submission status {status!r} is not one of {', '.join(STATUSES)}")
        self.benchmark = benchmark
        self.division = division
        self.enabled = enabled
        self.path = None if path is None else os.fspath(path)
        self._run_open = False
        self._mllogger = None
        if not enabled:
            return
        try:
            from mlperf_logging.mllog import constants
            from mlperf_logging.mllog.mllog import MLLogger
        except ImportError as e:
            raise UserError(f"zoo.mlperf needs {_PACKAGE} (pip install {_PACKAGE}): {e}") from None

        # A logger of our own, not registered with logging: its handlers close with this object.
        logger = logging.Logger(f"zoo.mlperf.{id(self)}", level=logging.INFO)
        if self.path is not None:
            os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
            logger.addHandler(logging.FileHandler(self.path, mode="a", encoding="utf-8"))
        if stdout is None:
            from zoo.console import verbose

            stdout = verbose()
        if stdout:
            logger.addHandler(logging.StreamHandler(sys.stdout))
        self._mllogger = MLLogger(logger=logger, default_stack_offset=_STACK_OFFSET)
        for key, value in (
            (constants.SUBMISSION_BENCHMARK, benchmark),
            (constants.SUBMISSION_ORG, org),
            (constants.SUBMISSION_DIVISION, division),
            (constants.SUBMISSION_STATUS, status),
            (constants.SUBMISSION_PLATFORM, platform or detect_platform()),
        ):
            self._log("event", key, value)

    def event(self, key: str, value=None, metadata: dict | None = None) -> None:
        """Log any key as a point-in-time event (e.g. ``max_sequence_length`` with its ``method``)."""
        self._log("event", key, value, metadata)

    def hyperparameters(self, **values) -> None:
        """Log each ``key=value`` as one event, in order: ``opt_name="sgd", opt_base_learning_rate=2.0``."""
        for key, value in values.items():
            self._log("event", key, value)

    def cache_clear(self, cleared: bool = True) -> None:
        """Log that the page cache was dropped before initialisation (the checker needs the record)."""
        self._log("event", "cache_clear", cleared)

    def init_start(self) -> None:
        self._log("start", "init_start")

    def init_stop(self) -> None:
        self._log("end", "init_stop")

    def run_start(self) -> None:
        """Start of the timed run: after init_stop, before the first training step."""
        self._log("start", "run_start")
        self._run_open = self.enabled

    def run_stop(self, status: str = "success") -> None:
        """End of the timed run; ``status`` "success" (target reached) or "aborted"."""
        if status not in RUN_STATUSES:
            raise UserError(f"MLPerf run status {status!r} is not one of {', '.join(RUN_STATUSES)}")
        self._log("end", "run_stop", None, {"status": status})
        self._run_open = False

    def seed(self, value: int) -> None:
        self._log("event", "seed", value)

    def global_batch_size(self, value: int) -> None:
        """Samples per optimizer step over all ranks (times gradient accumulation)."""
        self._log("event", "global_batch_size", value)

    def gradient_accumulation_steps(self, value: int = 1) -> None:
        self._log("event", "gradient_accumulation_steps", value)

    def train_samples(self, value: int) -> None:
        self._log("event", "train_samples", value)

    def eval_samples(self, value: int) -> None:
        self._log("event", "eval_samples", value)

    def epoch_start(self, epoch: int, samples: int | None = None) -> None:
        self._log("start", "epoch_start", None, _progress(epoch_num=epoch, samples=samples))

    def epoch_stop(self, epoch: int, samples: int | None = None) -> None:
        self._log("end", "epoch_stop", None, _progress(epoch_num=epoch, samples=samples))

    def block_start(self, first_epoch: int, epoch_count: int = 1, samples: int | None = None) -> None:
        """Start of ``epoch_count`` epochs trained between two evaluations (instead of epoch_start)."""
        metadata = _progress(first_epoch_num=first_epoch, samples=samples)
        self._log("start", "block_start", None, {**metadata, "epoch_count": epoch_count})

    def block_stop(self, first_epoch: int, samples: int | None = None) -> None:
        self._log("end", "block_stop", None, _progress(first_epoch_num=first_epoch, samples=samples))

    def eval_start(self, epoch: int, samples: int | None = None) -> None:
        self._log("start", "eval_start", None, _progress(epoch_num=epoch, samples=samples))

    def eval_stop(self, epoch: int, samples: int | None = None) -> None:
        self._log("end", "eval_stop", None, _progress(epoch_num=epoch, samples=samples))

    def eval_accuracy(self, value, epoch: int, samples: int | None = None) -> None:
        """The quality metric in the benchmark's unit (see the module docstring), e.g. top-1 as 0.761."""
        self._log("event", "eval_accuracy", value, _progress(epoch_num=epoch, samples=samples))

    def close(self) -> None:
        if self._mllogger is not None:
            for handler in list(self._mllogger.logger.handlers):
                handler.close()
                self._mllogger.logger.removeHandler(handler)
            self._mllogger = None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, traceback):
        if exc_type is not None and self._run_open:
            self._log("end", "run_stop", None, {"status": "aborted"})
            self._run_open = False
        self.close()

    def _log(self, kind: str, key: str, value=None, metadata: dict | None = None) -> None:
        if self._mllogger is None:
            return
        log = {"start": self._mllogger.start, "end": self._mllogger.end, "event": self._mllogger.event}[kind]
        log(key=key, value=_plain(value), metadata=_plain(metadata))


def detect_platform() -> str:
    """This host's GPUs from nvidia-smi as "<count>x<name>" (e.g. "8xNVIDIA H100 80GB HBM3"), else "cpu".

    It counts every GPU of the host; a run on some of them, or on several nodes, passes ``platform``."""
    try:
        names = subprocess.run(
            ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.SubprocessError):
        return "cpu"
    counts = collections.Counter(name.strip() for name in names if name.strip())
    return "+".join(f"{count}x{name}" for name, count in counts.items()) or "cpu"


def check_log(path, benchmark: str | None = None, ruleset: str | None = None) -> str:
    """Run ``python -m mlperf_logging.compliance_checker --usage training --ruleset R path``.

    ``benchmark`` defaults to the log's submission_benchmark; ``ruleset`` to RULESETS[benchmark].
    Returns the checker's output on success; raises MLPerfComplianceError (first line: the file, the
    benchmark and the ruleset; then the checker's output) when the checker rejects the log.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise MLPerfComplianceError(f"{path}: no such MLPerf log")
    benchmark = benchmark or logged_benchmark(path)
    if benchmark is None:
        raise MLPerfComplianceError(f"{path}: no submission_benchmark line; name the benchmark")
    if benchmark not in RULESETS:
        raise MLPerfComplianceError(
            f"{path}: MLPerf benchmark {benchmark!r} is not one of {', '.join(RULESETS)}"
        )
    ruleset = ruleset or RULESETS[benchmark]
    if importlib.util.find_spec("mlperf_logging") is None:
        raise MLPerfComplianceError(
            f"{path}: the compliance checker needs {_PACKAGE} (pip install {_PACKAGE})"
        )
    with tempfile.TemporaryDirectory() as scratch:
        # The checker also writes its report to --log_output (default: the current directory).
        result = subprocess.run(
            [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training"]
            + ["--ruleset", ruleset, "--log_output", os.path.join(scratch, "checker.log"), path],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            check=False,
        )
    # Its pointer to the report file would name the deleted scratch folder.
    output = "".join(
        line for line in result.stdout.splitlines(True) if not line.startswith("** Logging output")
    )
    if result.returncode != 0:
        raise MLPerfComplianceError(
            f"{path} fails the MLPerf training {ruleset} compliance check for {benchmark}:\n{output}"
        )
    return output


def logged_benchmark(path) -> str | None:
    """The value of the log's submission_benchmark line, or None where it has none."""
    marker = ":::MLLOG "
    with open(path, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if marker not in line:
                continue
            try:
                record = json.loads(line.split(marker, 1)[1])
            except json.JSONDecodeError:
                continue
            if record.get("key") == "submission_benchmark":
                return record.get("value")
    return None


def _progress(samples: int | None = None, **metadata) -> dict:
    return metadata if samples is None else {**metadata, "samples_count": samples}


def _plain(value):
    """JSON-ready: Python scalars from numpy or framework scalars, lists from arrays and tuples."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if hasattr(value, "tolist"):  # numpy and framework arrays and scalars
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    return value


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m zoo.mlperf", description="Check an MLPerf training log with the compliance checker."
    )
    parser.add_argument("log", help="the :::MLLOG file, e.g. RESULTS_DIR/mlperf.log")
    parser.add_argument(
        "--benchmark", choices=sorted(RULESETS), help="default: the log's submission_benchmark"
    )
    parser.add_argument("--ruleset", help="default: the benchmark's entry in zoo.mlperf.RULESETS")
    args = parser.parse_args(argv)
    try:
        output = check_log(args.log, args.benchmark, args.ruleset)
    except MLPerfComplianceError as error:
        raise SystemExit(f"error: {error}") from None
    print(output, end="")


if __name__ == "__main__":
    main()

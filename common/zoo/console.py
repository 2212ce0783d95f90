"""A script's console: quiet by default, everything with ``--verbose`` (``zoo.cli.add_run_args``).

Quiet, the default: MLPerf's ``:::MLLOG`` lines go to the run's log file only (``zoo.mlperf``), and the
deprecation, future and user warnings of the frameworks and their libraries (torch, TensorFlow, MXNet, ...)
are not shown, nor TensorFlow's C++ and Python log lines below errors. The console keeps the start-up
summary, the progress bar and the readable metric lines (``zoo.log``). ``--verbose`` leaves every one of
them on. ``zoo.cli.parse_args`` calls :func:`configure` for every parser that has ``--verbose``, before
the framework is imported.
"""

from __future__ import annotations

import logging
import os
import warnings

QUIET_CATEGORIES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, UserWarning)
# Loggers of third-party libraries that print warnings through Python's logging.
QUIET_LOGGERS = ("tensorflow", "absl", "mxnet", "h5py", "numexpr")

_verbose = False


def configure(verbose: bool) -> None:
    """Set this process's console: ``verbose`` shows everything; otherwise the filters above apply
    (and reach the processes it starts: data-loader workers, torchrun's, through the environment)."""
    global _verbose
    _verbose = bool(verbose)
    if _verbose:
        return
    for category in QUIET_CATEGORIES:
        warnings.filterwarnings("ignore", category=category)
    warnings.filterwarnings("default", module=r"zoo(\.|$)")  # the zoo's own warnings still show
    os.environ.setdefault(
        "PYTHONWARNINGS", ",".join(f"ignore::{category.__name__}" for category in QUIET_CATEGORIES)
    )
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ side: errors only
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def verbose() -> bool:
    """Whether this process shows everything (``--verbose``); False until :func:`configure` says so."""
    return _verbose

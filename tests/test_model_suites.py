"""Each model's own tests, run in its framework's venv (their pins conflict, so one process each).

The suites run side by side, ``ZOO_SUITE_WORKERS`` at a time (default 2, one per core of the CI
machine), each with one OpenMP thread: their tests are small and mostly single-threaded work plus
process start-ups, so two suites on two cores take about the time of one. Each test of this file
waits for its own suite, so a failure is reported under the model's name.

Time limits agree from the inside out: one test of a suite may take TEST_SECONDS, a whole suite
SUITE_SECONDS, and this test (the outer pytest's limit for it) a minute more than the suite, so the
innermost limit that is hit is the one that reports. Each suite's time and slowest tests are printed
at the end of the run (tests/conftest.py's terminal summary).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from zoo_tree import ROOT, SUITE_TIMES, model_dirs, model_env, model_id, venv_bin

TEST_SECONDS = 600
SUITE_SECONDS = 1200
SLOW_TEST_SECONDS = 30  # tests at least this long are listed under their suite's time
WORKERS = int(os.environ.get("ZOO_SUITE_WORKERS", "2"))


@dataclass
class Suite:
    returncode: int | None  # None: timed out
    stdout: str
    stderr: str
    seconds: float


def slowest_tests(stdout: str) -> list[str]:
    """The lines of pytest's --durations section ("41.20s call  path::test")."""
    return [
        line.strip() for line in stdout.splitlines() if re.match(r"^\d+\.\d+s (call|setup|teardown) ", line)
    ]


class SuiteRunner:
    """Runs model suites in subprocesses, WORKERS at a time; stops the running ones when closed."""

    def __init__(self):
        self.pool = ThreadPoolExecutor(max_workers=WORKERS)
        self.running: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.closed = False

    def submit(self, model_dir: Path):
        return self.pool.submit(self.run, model_dir)

    def run(self, model_dir: Path) -> Suite:
        python = venv_bin(model_dir) / "python"
        command = [
            str(python),
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--timeout={TEST_SECONDS}",
        ]
        command += ["--durations=5", f"--durations-min={SLOW_TEST_SECONDS}", str(model_dir / "tests")]
        env = model_env(model_dir)
        env["OMP_NUM_THREADS"] = "1"
        started = time.monotonic()
        with self.lock:
            if self.closed:
                return Suite(-1, "", "not run: the session stopped", 0.0)
            proc = subprocess.Popen(
                command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            self.running.add(proc)
        try:
            stdout, stderr = proc.communicate(timeout=SUITE_SECONDS)
            returncode = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            returncode = None
        finally:
            with self.lock:
                self.running.discard(proc)
        return Suite(returncode, stdout, stderr, time.monotonic() - started)

    def close(self):
        with self.lock:
            self.closed = True
            for proc in self.running:
                proc.kill()
        self.pool.shutdown(cancel_futures=True)


@pytest.fixture(scope="module")
def suites(request):
    """{model id: Future of its Suite}: every selected suite submitted at once, in the tests' order."""
    selected = [
        item.callspec.params["model_dir"]
        for item in request.session.items
        if getattr(item, "callspec", None)
        and "model_dir" in item.callspec.params
        and item.module.__name__ == __name__
    ]
    python_missing = [model_id(d) for d in selected if not (venv_bin(d) / "python").exists()]
    assert not python_missing, f"no venv for {python_missing}: run `make setup`"
    runner = SuiteRunner()
    yield {model_id(d): runner.submit(d) for d in selected}
    runner.close()


@pytest.mark.timeout(SUITE_SECONDS * len(model_dirs()))  # the suite waits in the queue before it runs
@pytest.mark.parametrize("model_dir", model_dirs(), ids=model_id)
def test_model_suite(model_dir, suites):
    suite = suites[model_id(model_dir)].result()
    if suite.returncode is None:
        summary = f"timed out after {SUITE_SECONDS} s"
    else:
        summary = (suite.stdout.strip().splitlines() or ["(no output)"])[-1]
    SUITE_TIMES[model_id(model_dir)] = (suite.seconds, summary, slowest_tests(suite.stdout))
    print(f"{model_id(model_dir)}: {summary}")
    sys.stdout.flush()
    assert suite.returncode == 0, (
        f"{model_id(model_dir)} tests failed:\n{suite.stdout[-6000:]}\n{suite.stderr[-3000:]}"
    )

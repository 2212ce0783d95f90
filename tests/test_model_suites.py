"""Each model's own tests, run in its framework's venv (their pins conflict, so one process each).

Time limits agree from the inside out: one test of a suite may take TEST_SECONDS, a whole suite
SUITE_SECONDS, and this test (the outer pytest's limit for it) a minute more than the suite, so the
innermost limit that is hit is the one that reports. Each suite's time is printed at the end of the
run (tests/conftest.py's terminal summary).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest
from zoo_tree import ROOT, SUITE_TIMES, model_dirs, model_env, model_id, venv_bin

TEST_SECONDS = 600
SUITE_SECONDS = 1200
SLOW_TEST_SECONDS = 30  # tests at least this long are listed under their suite's time


def slowest_tests(stdout: str) -> list[str]:
    """The lines of pytest's --durations section ("41.20s call  path::test")."""
    return [
        line.strip() for line in stdout.splitlines() if re.match(r"^\d+\.\d+s (call|setup|teardown) ", line)
    ]


@pytest.mark.timeout(SUITE_SECONDS + 60)
@pytest.mark.parametrize("model_dir", model_dirs(), ids=model_id)
def test_model_suite(model_dir):
    python = venv_bin(model_dir) / "python"
    assert python.exists(), f"{python} missing: run `make setup`"
    command = [str(python), "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", f"--timeout={TEST_SECONDS}"]
    command += ["--durations=5", f"--durations-min={SLOW_TEST_SECONDS}"]
    started = time.monotonic()
    try:
        proc = subprocess.run(
            [*command, str(model_dir / "tests")],
            cwd=ROOT,
            env=model_env(model_dir),
            capture_output=True,
            text=True,
            timeout=SUITE_SECONDS,
        )
    except subprocess.TimeoutExpired as e:
        outcome = f"timed out after {SUITE_SECONDS} s"
        SUITE_TIMES[model_id(model_dir)] = (time.monotonic() - started, outcome, [])
        output = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        pytest.fail(f"{model_id(model_dir)} suite {outcome}:\n{output[-6000:]}")
    summary = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    SUITE_TIMES[model_id(model_dir)] = (time.monotonic() - started, summary, slowest_tests(proc.stdout))
    print(f"{model_id(model_dir)}: {summary}")
    sys.stdout.flush()
    assert proc.returncode == 0, (
        f"{model_id(model_dir)} tests failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    )

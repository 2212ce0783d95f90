"""Each model's own tests, run in its framework's venv (their pins conflict, so one process each), and
each README's CPU quick start, run verbatim as a user pastes it.

The suites start as soon as collection ends, one at a time beside the repo-wide checks that run
before this file, then ``ZOO_SUITE_WORKERS`` at a time (default 2, one per core of the CI machine)
once this file's tests begin. Each runs with one OpenMP thread: their tests are small and mostly
single-threaded work plus process start-ups. Each test of this file waits for its own job, so a
failure is reported under the model's name.

A README's quick start is the ```bash block after the line ``<!-- quick-start: cpu -->``. It runs in
the model directory under ``bash -euo pipefail`` with the venv first on PATH, as the README says, and
must leave nothing in the checkout that ``git status`` would show. Its CPU time (user + system, the
block's processes together; unlike wall time it hardly depends on the load) must agree within a factor
of 2 with the README's "It needs about N s of CPU time".

Time limits agree from the inside out: one test of a suite may take TEST_SECONDS, a whole suite
SUITE_SECONDS, and this test (the outer pytest's limit for it) a minute more than the suite, so the
innermost limit that is hit is the one that reports. Each suite's time and slowest tests are printed
at the end of the run (tests/conftest.py's terminal summary).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from zoo_tree import ROOT, SUITE_TIMES, model_dirs, model_env, model_id, venv_bin

TEST_SECONDS = 600
SUITE_SECONDS = 1800  # ResNet-50 took 1,165 s beside SSD on a fresh clone (2026-11-27)
SLOW_TEST_SECONDS = 30  # tests at least this long are listed under their suite's time
WORKERS = int(os.environ.get("ZOO_SUITE_WORKERS", "2"))
QUICK_START_SECONDS = 600  # a block is meant to take 1-3 minutes; the limit allows for a busy machine
QUICK_START = re.compile(r"^<!-- quick-start: cpu -->\n```bash\n(.*?)^```$", re.M | re.S)


def quick_start(model_dir: Path) -> str | None:
    """The README's CPU quick start block, or None."""
    found = QUICK_START.findall((model_dir / "README.md").read_text())
    assert len(found) <= 1, f"{model_id(model_dir)}/README.md has {len(found)} quick-start blocks"
    return found[0] if found else None


def untracked(model_dir: Path) -> set[str]:
    """What `git status` shows under the model directory."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--", str(model_dir)], cwd=ROOT, capture_output=True, text=True
    )
    return set(done.stdout.splitlines())


@dataclass
class Suite:
    returncode: int | None  # None: timed out
    stdout: str
    stderr: str
    seconds: float
    cpu_seconds: float | None = None  # user + system time of the job's processes (None: not reported)


# Each job runs under a bash that reports its children's CPU time (bash's `times`) after this line on
# stderr: CPU time, unlike wall time, barely depends on what else the machine runs.
CPU_MARK = "::cpu-times"
WITH_CPU_TIMES = f'"$@"; code=$?; {{ echo; echo {CPU_MARK}; times; }} >&2; exit $code'
QUICK_START_CPU = re.compile(r"needs about (\d+) s of CPU time")
QUICK_START_CPU_FACTOR = 2.0  # the stated CPU time holds within this factor either way


def split_cpu_times(stderr: str) -> tuple[str, float | None]:
    """(stderr without the CPU report, the children's user + system seconds)."""
    head, mark, tail = stderr.rpartition(f"\n{CPU_MARK}\n")
    if not mark:
        return stderr, None
    lines = tail.splitlines()  # the shell's own "user sys", then its children's
    times = re.findall(r"(\d+)m([\d.]+)s", lines[1]) if len(lines) > 1 else []
    return head, sum(60 * int(m) + float(sec) for m, sec in times) if times else None


def stated_cpu_seconds(model_dir: Path) -> int | None:
    """The quick start's CPU time as its README states it ("needs about N s of CPU time")."""
    found = QUICK_START_CPU.findall((model_dir / "README.md").read_text())
    assert len(found) <= 1, (
        f"{model_id(model_dir)}/README.md states the quick start's CPU time {len(found)} times"
    )
    return int(found[0]) if found else None


def slowest_tests(stdout: str) -> list[str]:
    """The lines of pytest's --durations section ("41.20s call  path::test")."""
    return [
        line.strip() for line in stdout.splitlines() if re.match(r"^\d+\.\d+s (call|setup|teardown) ", line)
    ]


class SuiteRunner:
    """Runs model suites in subprocesses, WORKERS at a time; stops the running ones when closed."""

    def __init__(self, slots: int):
        self.pool = ThreadPoolExecutor(max_workers=WORKERS)
        self.running: set[subprocess.Popen] = set()
        self.lock = threading.Lock()
        self.closed = False
        self.slots = slots  # jobs allowed to run at once; widen() raises it to WORKERS
        self.busy = 0
        self.free = threading.Condition()

    def widen(self):
        with self.free:
            self.slots = WORKERS
            self.free.notify_all()

    def submit(self, fn, model_dir: Path):
        return self.pool.submit(self._in_a_slot, fn, model_dir)

    def _in_a_slot(self, fn, model_dir: Path) -> Suite:
        with self.free:
            self.free.wait_for(lambda: self.busy < self.slots or self.closed)
            self.busy += 1
        try:
            return fn(model_dir)
        finally:
            with self.free:
                self.busy -= 1
                self.free.notify_all()

    def suite(self, model_dir: Path) -> Suite:
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
        return self.run(command, ROOT, model_dir, SUITE_SECONDS)

    def quick_start(self, model_dir: Path) -> Suite:
        before = untracked(model_dir)
        block = quick_start(model_dir)
        # its `mktemp -d` lands in a folder removed afterwards: each quick start leaves ~0.5 GB of data,
        # results and model repository, and CI's machine keeps /tmp between runs
        with tempfile.TemporaryDirectory(prefix=f"quick-start-{model_dir.name}-") as scratch:
            command = ["bash", "-euo", "pipefail", "-c", block]
            done = self.run(command, model_dir, model_dir, QUICK_START_SECONDS, {"TMPDIR": scratch})
        left = sorted(untracked(model_dir) - before)
        if left and done.returncode == 0:
            done.returncode, done.stderr = 1, done.stderr + f"\nleft in the checkout: {left}"
        return done

    def run(self, command: list[str], cwd: Path, model_dir: Path, seconds: float, extra_env=None) -> Suite:
        env = model_env(model_dir) | (extra_env or {})
        env["OMP_NUM_THREADS"] = "1"  # two jobs on 2 cores: more threads than cores made tests 3-14x slower
        env["TF_NUM_INTRAOP_THREADS"] = "1"
        env["TF_ENABLE_ONEDNN_OPTS"] = "1"  # as the TensorFlow scripts set it: 7x faster CPU training steps
        env["OMP_WAIT_POLICY"] = "PASSIVE"  # a test that asks for 2 threads: idle ones sleep, not spin
        started = time.monotonic()
        with self.lock:
            if self.closed:
                return Suite(-1, "", "not run: the session stopped", 0.0)
            proc = subprocess.Popen(  # its own process group: a kill reaches the trainings it started
                ["bash", "-c", WITH_CPU_TIMES, "bash", *command],
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            self.running.add(proc)
        try:
            stdout, stderr = proc.communicate(timeout=seconds)
            returncode = proc.returncode
        except subprocess.TimeoutExpired:
            kill_group(proc)
            stdout, stderr = proc.communicate()
            returncode = None
        finally:
            with self.lock:
                self.running.discard(proc)
        stderr, cpu = split_cpu_times(stderr)
        return Suite(returncode, stdout, stderr, time.monotonic() - started, cpu)

    def close(self):
        with self.lock:
            self.closed = True
            for proc in self.running:
                kill_group(proc)
        with self.free:
            self.free.notify_all()
        self.pool.shutdown(cancel_futures=True)


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to the job and every process it started (they share its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


RUNNER: SuiteRunner | None = None
JOBS: dict = {}  # (test name, model id) -> Future of its Suite


def start(items) -> None:
    """Submit every selected suite and quick start, in the tests' order, one at a time until this module's
    tests begin (then WORKERS at a time): called when collection ends (tests/conftest.py), so the suites
    start beside the repo-wide checks that run before them."""
    global RUNNER
    selected = [
        (item.originalname, item.callspec.params["model_dir"])
        for item in items
        if getattr(item, "callspec", None)
        and "model_dir" in item.callspec.params
        and item.originalname in ("test_model_suite", "test_readme_quick_start")
        and item.module.__name__ == __name__
    ]
    if not selected or RUNNER is not None:
        return
    missing = [model_id(d) for _, d in selected if not (venv_bin(d) / "python").exists()]
    assert not missing, f"no venv for {missing}: run `make setup`"
    RUNNER = SuiteRunner(slots=1)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _stop_on_sigterm)
    kinds = {"test_model_suite": RUNNER.suite, "test_readme_quick_start": RUNNER.quick_start}
    JOBS.update({(name, model_id(d)): RUNNER.submit(kinds[name], d) for name, d in selected})


def _stop_on_sigterm(signum, frame) -> None:
    """A terminated session (CI's limit, kill) takes its running suites and their trainings with it."""
    stop()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def stop() -> None:
    """Kill what still runs (a failed session stops early)."""
    if RUNNER is not None:
        RUNNER.close()


@pytest.fixture(scope="module")
def jobs(request):
    """The submitted jobs; from here on they run WORKERS at a time."""
    start(request.session.items)  # when collection did not pass through tests/conftest.py
    RUNNER.widen()
    return JOBS


@pytest.mark.timeout(SUITE_SECONDS * len(model_dirs()))  # the suite waits in the queue before it runs
@pytest.mark.parametrize("model_dir", model_dirs(), ids=model_id)
def test_model_suite(model_dir, jobs):
    suite = jobs["test_model_suite", model_id(model_dir)].result()
    if suite.returncode is None:
        summary = f"timed out after {SUITE_SECONDS} s"
    else:
        summary = (suite.stdout.strip().splitlines() or ["(no output)"])[-1]
    cpu = f" ({suite.cpu_seconds:.0f} s of CPU)" if suite.cpu_seconds is not None else ""
    SUITE_TIMES[model_id(model_dir)] = (suite.seconds, summary + cpu, slowest_tests(suite.stdout))
    print(f"{model_id(model_dir)}: {summary}")
    sys.stdout.flush()
    assert suite.returncode == 0, (
        f"{model_id(model_dir)} tests failed:\n{suite.stdout[-6000:]}\n{suite.stderr[-3000:]}"
    )


@pytest.mark.timeout(SUITE_SECONDS * len(model_dirs()))  # the block waits in the queue before it runs
@pytest.mark.parametrize("model_dir", [d for d in model_dirs() if quick_start(d)], ids=model_id)
def test_readme_quick_start(model_dir, jobs):
    done = jobs["test_readme_quick_start", model_id(model_dir)].result()
    cpu = f", {done.cpu_seconds:.0f} s of CPU" if done.cpu_seconds is not None else ""
    SUITE_TIMES[f"{model_id(model_dir)} quick start"] = (done.seconds, f"exit {done.returncode}{cpu}", [])
    assert done.returncode == 0, (
        f"{model_id(model_dir)}/README.md quick start failed (exit {done.returncode}, {done.seconds:.0f} s):\n"
        f"{done.stdout[-4000:]}\n{done.stderr[-3000:]}"
    )
    stated = stated_cpu_seconds(model_dir)
    assert stated is not None, f"{model_id(model_dir)}/README.md does not say 'needs about N s of CPU time'"
    assert done.cpu_seconds is not None, "the job reported no CPU time"
    assert stated / QUICK_START_CPU_FACTOR <= done.cpu_seconds <= stated * QUICK_START_CPU_FACTOR, (
        f"{model_id(model_dir)}/README.md says the quick start needs about {stated} s of CPU time; "
        f"it took {done.cpu_seconds:.0f} s ({done.seconds:.0f} s wall)"
    )


@pytest.mark.parametrize("model_dir", model_dirs(), ids=model_id)
def test_every_readme_has_a_cpu_quick_start(model_dir):
    assert quick_start(model_dir), (
        f"{model_id(model_dir)}/README.md has no CPU quick start: a ```bash block after <!-- quick-start: cpu -->"
    )


def test_cpu_times_are_read_from_the_job_shell():
    """The runner's wrapper reports the CPU time of what it ran (a child that computes for about 0.5 s),
    keeps the exit status and leaves the job's own stderr as it was."""
    busy = (
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\nraise SystemExit(3)"
    )
    done = subprocess.run(
        ["bash", "-c", WITH_CPU_TIMES, "bash", sys.executable, "-c", busy], capture_output=True, text=True
    )
    stderr, cpu = split_cpu_times(done.stderr)
    assert done.returncode == 3 and stderr == "" and 0.5 <= cpu < 5, (done.returncode, done.stderr)
    assert split_cpu_times("no report\n") == ("no report\n", None)

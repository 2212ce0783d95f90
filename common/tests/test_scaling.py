"""zoo.scaling, the scaling mode behind every PyTorch benchmark.sh --gpus: one launch per GPU count
through launch_torch.sh, the same steps on every rank, replicas compared, scaling against 1 GPU."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent


def run_demo(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("OMP_NUM_THREADS", None)
    return subprocess.run(
        [sys.executable, "-m", "scaling_demo", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.mark.timeout(300)
def test_two_processes_against_one_in_the_same_call(tmp_path):
    report = tmp_path / "scaling.json"
    flags = ["--window-seconds", "0.3", "--windows", "2", "--warmup", "1"]
    done = run_demo("--gpus", "2", *flags, "--batch-size", "8", "--output", str(report))
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(report.read_text())["results"]
    assert [row["gpus"] for row in rows] == [1, 2]
    assert all(row["replicas_agree"] is (row["gpus"] > 1 or None) for row in rows)
    assert all(row["batch_per_gpu"] == 8 and row["throughput"] > 0 for row in rows)
    assert rows[0]["scaling"] == pytest.approx(1.0)
    assert rows[1]["scaling"] == pytest.approx(rows[1]["throughput"] / (2 * rows[0]["throughput"]))
    assert all(len(row["window_seconds"]) == 2 and min(row["window_seconds"]) >= 0.3 for row in rows)
    progress = [line for line in done.stderr.splitlines() if line.startswith("== ") and "first step" in line]
    assert [line.split(" GPU(s): ")[0] for line in progress] == ["== 1", "== 2"]  # each count as it ends
    assert f"{rows[1]['throughput']:,.1f}" in progress[1]
    table = done.stdout
    assert "scaling" in table and "scripts/benchmark.sh --gpus 2" in table and "equal" in table


def test_bad_gpu_counts_end_in_one_line():
    done = run_demo("--gpus", "two")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "error: --gpus 'two': expected GPU counts such as 1,2,4"

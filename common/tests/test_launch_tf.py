"""common/scripts/launch_tf.sh, the launcher of the TensorFlow models' train.sh: the device list and
the command it replaces the shell with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[1] / "scripts" / "launch_tf.sh"
LAUNCH_ENV = ("NGPU", "CUDA_VISIBLE_DEVICES", "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK")


@pytest.fixture
def launch(tmp_path):
    """launch(*args, env={...}, before="") -> (returncode, [CUDA_VISIBLE_DEVICES, argv...], stderr)."""
    fake_python = tmp_path / "python"
    fake_python.write_text(
        '#!/usr/bin/env bash\necho "${CUDA_VISIBLE_DEVICES:-unset}"\nprintf "%s\\n" "$@"\n'
    )
    fake_python.chmod(0o755)

    def run(*args, env=None, before=""):
        base = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
        base["PATH"] = f"{tmp_path}:{base['PATH']}"  # horovodrun, where a test writes one
        script = f'set -euo pipefail; source "{LAUNCHER}"; {before} launch_tf demo.train "$@"'
        done = subprocess.run(
            ["bash", "-c", script, "train.sh", *args],
            capture_output=True,
            text=True,
            env={**base, "PY": str(fake_python), **(env or {})},
            timeout=60,
        )
        return done.returncode, done.stdout.splitlines(), done.stderr

    return run


def test_one_process_gets_every_other_argument_and_the_visible_devices(launch):
    assert launch("--recipe", "r.yaml", "--amp", "bf16") == (
        0, ["unset", "-m", "demo.train", "--recipe", "r.yaml", "--amp", "bf16"], "",
    )  # fmt: skip
    assert launch("--gpus", "3", "--synthetic")[1] == ["0,1,2", "-m", "demo.train", "--synthetic"]
    given = {"CUDA_VISIBLE_DEVICES": "4,5,6"}
    assert launch("--gpus=2", env=given)[1][0] == "4,5"
    assert launch(env={**given, "NGPU": "1"})[1][0] == "4"
    assert launch("--gpus", "2", env={**given, "NGPU": "1"})[1][0] == "4,5"  # the flag wins


@pytest.mark.parametrize(
    "args, env, line",
    [
        (["--gpus", "two"], {}, "error: --gpus/NGPU must be a number >= 1, got 'two'"),
        ([], {"NGPU": "0"}, "error: --gpus/NGPU must be a number >= 1, got '0'"),
        (["--gpus"], {}, "error: --gpus needs a number"),
        (["--gpus", "3"], {"CUDA_VISIBLE_DEVICES": "4,5"}, "error: --gpus 3 but CUDA_VISIBLE_DEVICES has 2"),
    ],
)
def test_bad_device_requests_end_in_one_line(launch, args, env, line):
    code, printed, stderr = launch(*args, env=env)
    assert (code, printed, stderr.strip().splitlines()) == (2, [], [line])


def test_horovod_runs_n_processes_under_horovodrun_outside_a_horovod_job(launch, tmp_path):
    code, printed, stderr = launch("--distribution", "horovod", "--gpus", "2")
    assert (code, stderr.strip()) == (2, "error: --distribution horovod needs horovodrun (Horovod) installed")
    horovodrun = tmp_path / "horovodrun"
    horovodrun.write_text('#!/usr/bin/env bash\necho horovodrun "$@"\n')
    horovodrun.chmod(0o755)
    code, printed, _ = launch("--distribution=horovod", "--gpus", "2")
    assert (code, printed) == (
        0,
        [f"horovodrun -np 2 {tmp_path / 'python'} -m demo.train --distribution=horovod"],
    )
    # inside the job horovodrun started, each process runs the module itself
    code, printed, _ = launch("--distribution", "horovod", env={"HOROVOD_RANK": "1"})
    assert printed == ["unset", "-m", "demo.train", "--distribution", "horovod"]
    # "horovod" as the value of another flag starts no horovodrun
    assert launch("--results-dir", "horovod")[1] == ["unset", "-m", "demo.train", "--results-dir", "horovod"]


def test_help_prints_the_usage_then_the_module_help(launch):
    code, printed, _ = launch("--recipe", "r.yaml", "--help", before='usage() { echo "usage: train.sh"; };')
    assert (code, printed) == (0, ["usage: train.sh", "unset", "-m", "demo.train", "--help"])
    helper = 'usage() { echo "usage: train.sh"; }; launch_tf_module_help() { echo "both modules"; };'
    assert launch("-h", before=helper)[:2] == (0, ["usage: train.sh", "both modules"])

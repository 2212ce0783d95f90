"""common/scripts/launch_torch.sh, the launcher of the PyTorch models' train.sh: the command it
replaces the shell with, for each way of asking for processes and nodes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

LAUNCHER = Path(__file__).resolve().parents[1] / "scripts" / "launch_torch.sh"
LAUNCH_ENV = ("NGPU", "NNODES", "NODE_RANK", "RDZV_ENDPOINT", "LAUNCH_TORCH_DEFAULT_GPUS")


@pytest.fixture
def launch(tmp_path):
    """launch(*args, env={...}) -> (returncode, argv the fake python got, stderr)."""
    fake_python = tmp_path / "python"
    # Prints its command line, one item a line; a python -c (a query the launcher must not make) fails.
    fake_python.write_text('#!/usr/bin/env bash\nif [[ "$1" == -c ]]; then exit 9; fi\nprintf "%s\\n" "$@"\n')
    fake_python.chmod(0o755)
    # A host with three GPUs, as nvidia-smi -L lists them (one MIG slice under the first).
    (tmp_path / "bin").mkdir()
    fake_smi = tmp_path / "bin" / "nvidia-smi"
    gpus = "GPU 0: NVIDIA H100 (UUID: GPU-a)\n  MIG 1g.10gb Device 0: (UUID: MIG-a)\n"
    gpus += "GPU 1: NVIDIA H100 (UUID: GPU-b)\nGPU 2: NVIDIA H100 (UUID: GPU-c)\n"
    fake_smi.write_text(f'#!/usr/bin/env bash\n[[ "$1" == -L ]] && printf "{gpus}"\n')
    fake_smi.chmod(0o755)

    def run(*args, env=None, before=""):
        base = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV + ("CUDA_VISIBLE_DEVICES",)}
        base["PATH"] = f"{tmp_path / 'bin'}:{base['PATH']}"
        script = f'set -euo pipefail; source "{LAUNCHER}"; {before} launch_torch demo.train "$@"'
        done = subprocess.run(
            ["bash", "-c", script, "train.sh", *args],
            capture_output=True,
            text=True,
            env={**base, "PYTHON": str(fake_python), **(env or {})},
            timeout=60,
        )
        return done.returncode, done.stdout.splitlines(), done.stderr

    return run


def torchrun(nproc, nnodes="1", rank="0", endpoint="127.0.0.1:29500"):
    return [
        *["-m", "torch.distributed.run", "--nproc_per_node", nproc, "--nnodes", nnodes],
        *["--node_rank", rank, "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint],
    ]


def test_one_process_runs_the_module_with_every_other_argument(launch):
    assert launch("--recipe", "r.yaml", "--set", "a=1") == (
        0,
        ["-m", "demo.train", "--recipe", "r.yaml", "--set", "a=1"],
        "",
    )
    assert launch("--gpus", "1", "--amp", "bf16", env={"NGPU": "8"})[1] == [
        "-m",
        "demo.train",
        "--amp",
        "bf16",
    ]


def test_more_gpus_or_nodes_run_torchrun_without_the_launcher_flags(launch):
    code, argv, _ = launch("--gpus", "2", "--recipe", "r.yaml")
    assert (code, argv) == (0, [*torchrun("2"), "-m", "demo.train", "--recipe", "r.yaml"])
    assert launch("--recipe", "r.yaml", "--gpus=4")[1] == [
        *torchrun("4"),
        "-m",
        "demo.train",
        "--recipe",
        "r.yaml",
    ]
    assert launch(env={"NGPU": "8"})[1] == [*torchrun("8"), "-m", "demo.train"]
    nodes = {"NGPU": "8", "NNODES": "2", "NODE_RANK": "1", "RDZV_ENDPOINT": "node0:29400"}
    assert launch("--x", env=nodes)[1] == [*torchrun("8", "2", "1", "node0:29400"), "-m", "demo.train", "--x"]
    flags = ["--nnodes", "4", "--node-rank", "3", "--rdzv-endpoint", "head:1234"]
    assert launch(*flags, env=nodes)[1] == [*torchrun("8", "4", "3", "head:1234"), "-m", "demo.train"]


def test_visible_gpus_default_counts_the_gpus_when_no_count_is_given(launch):
    visible = {"LAUNCH_TORCH_DEFAULT_GPUS": "visible"}
    assert launch(env=visible)[1] == [*torchrun("3"), "-m", "demo.train"]  # nvidia-smi's GPUs, not MIGs
    assert launch("--gpus", "1", env=visible)[1] == ["-m", "demo.train"]
    assert launch(env={**visible, "NGPU": "2"})[1] == [*torchrun("2"), "-m", "demo.train"]
    # CUDA_VISIBLE_DEVICES wins; as CUDA reads it, its list ends at the first negative entry
    for devices, count in [("1,2", "2"), ("GPU-a,GPU-b,GPU-c,GPU-d", "4"), ("0,-1,2", None), ("", None)]:
        expected = [*torchrun(count), "-m", "demo.train"] if count else ["-m", "demo.train"]
        assert launch(env={**visible, "CUDA_VISIBLE_DEVICES": devices})[1] == expected, devices


def test_visible_gpus_with_no_driver_is_one_process(launch, tmp_path):
    (tmp_path / "bin" / "nvidia-smi").write_text(
        "#!/usr/bin/env bash\necho 'NVIDIA-SMI has failed' >&2; exit 9\n"
    )
    assert launch(env={"LAUNCH_TORCH_DEFAULT_GPUS": "visible"})[1] == ["-m", "demo.train"]


@pytest.mark.parametrize(
    "args, env, message",
    [
        (["--gpus", "two"], {}, "error: --gpus/NGPU must be a whole number >= 1, got 'two'"),
        ([], {"NGPU": "0"}, "error: --gpus/NGPU must be a whole number >= 1, got '0'"),
        (["--nnodes", "-1"], {}, "error: --nnodes/NNODES must be a whole number >= 1, got '-1'"),
        (["--node-rank", "x"], {}, "error: --node-rank/NODE_RANK must be a whole number >= 0, got 'x'"),
        (["--recipe", "r.yaml", "--gpus"], {}, "error: --gpus needs a value"),
    ],
)
def test_a_bad_count_is_one_line_before_anything_starts(launch, args, env, message):
    code, argv, stderr = launch(*args, env=env)
    assert (code, argv, stderr.strip()) == (2, [], message)


def test_help_prints_the_usage_then_the_module_help(launch):
    code, printed, _ = launch("--recipe", "r.yaml", "--help")
    assert code == 0
    assert printed[0].startswith("usage: train.sh [--gpus N]")
    text = "\n".join(printed)
    for item in ("--gpus N", "--nnodes N", "--node-rank R", "--rdzv-endpoint HOST:PORT", "NGPU", "NNODES"):
        assert item in text
    assert printed[-3:] == ["-m", "demo.train", "--help"]
    code, printed, _ = launch("-h", before='usage() { echo "usage: train.sh [model lines]"; };')
    assert (code, printed) == (0, ["usage: train.sh [model lines]", "", "-m", "demo.train", "--help"])


def test_two_processes_start_under_the_real_torchrun(tmp_path):
    (tmp_path / "probe.py").write_text(
        # each rank writes its own file: the two processes' stdout lines may interleave in the pipe
        "import os, pathlib, sys\n"
        "line = ' '.join(['rank', os.environ['RANK'], 'of', os.environ['WORLD_SIZE'], *sys.argv[1:]])\n"
        f"pathlib.Path({str(tmp_path)!r}, 'rank' + os.environ['RANK']).write_text(line)\n"
    )
    with socket.socket() as free:  # the rendezvous port: one nobody else holds now
        free.bind(("127.0.0.1", 0))
        endpoint = f"127.0.0.1:{free.getsockname()[1]}"
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV}
    env.update(PYTHON=sys.executable, PYTHONPATH=str(tmp_path), OMP_NUM_THREADS="1")
    script = f'set -euo pipefail; source "{LAUNCHER}"; launch_torch probe "$@"'
    done = subprocess.run(
        ["bash", "-c", script, "train.sh", "--gpus", "2", "--rdzv-endpoint", endpoint, "--recipe", "r.yaml"],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = sorted(path.read_text() for path in tmp_path.glob("rank*"))
    assert printed == ["rank 0 of 2 --recipe r.yaml", "rank 1 of 2 --recipe r.yaml"], done.stdout

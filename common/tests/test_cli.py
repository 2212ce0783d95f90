"""The shared command-line vocabulary (zoo.cli) and the PyTorch set-up helpers (zoo.torch)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest
from zoo.cli import add_run_args, add_target_arg, parse_args, recipe_from_args, resolve_resume
from zoo.errors import UserError


def _parser(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text(
        "run:\n  precision: bf16\n  batch_per_gpu: 8\n  accumulation: 1\n  epochs: 1\n  steps: null\n"
        "  log_every: 1\n  eval_every: null\n  checkpoint_every: null\n  keep_checkpoints: 1\n  seed: 0\n"
        "  target: {metric: top1, value: null, unit: '%'}\ndata:\n  batch_size: 8\n"
    )
    parser = argparse.ArgumentParser(prog="x")
    add_run_args(parser, default_recipe=recipe)
    add_target_arg(parser, "top1", unit="%", example=75.9)
    parser.add_argument("--batch-size", type=int)
    return parser


def test_flags_override_the_recipe_and_set_items(tmp_path):
    args = parse_args(
        _parser(tmp_path), ["--amp", "fp16", "--set", "data.batch_size=4", "--target-top1", "75"]
    )
    recipe = recipe_from_args(args, {"batch_size": "data.batch_size"})
    assert recipe["run"]["precision"] == "fp16" and recipe["run"]["target"]["value"] == 75.0
    assert recipe["data"] == {"batch_size": 4} and recipe["run"]["batch_per_gpu"] == 8
    assert args.target_top1 == 75.0
    args = parse_args(_parser(tmp_path), ["--set", "data.batch_size=4", "--batch-size", "2"])
    assert recipe_from_args(args, {"batch_size": "data.batch_size"})["data"]["batch_size"] == 2


@pytest.mark.parametrize(
    "argv, new",
    [
        (["--config", "x.yaml"], "--recipe"),
        (["--precision=fp16"], "--amp"),
        (["--no-resume"], "--resume none"),
        (["--target-accuracy", "75"], "--target-top1"),
        (["--amp", "none"], "--amp fp32"),
        (["--amp=none"], "--amp fp32"),
    ],
)
def test_old_spellings_name_the_new_one(tmp_path, argv, new):
    with pytest.raises(UserError) as e:
        parse_args(_parser(tmp_path), argv)
    assert str(e.value).endswith(f"use {new}")


def test_resume_default_refuses_to_overwrite_a_checkpoint(tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    assert resolve_resume(None, checkpoint) is None
    assert resolve_resume("auto", checkpoint) is None
    checkpoint.write_bytes(b"x")
    with pytest.raises(UserError, match="--resume auto"):
        resolve_resume(None, checkpoint)
    assert resolve_resume("auto", checkpoint) == checkpoint
    assert resolve_resume("none", checkpoint) is None
    assert resolve_resume(str(checkpoint), tmp_path / "other.pt") == checkpoint
    with pytest.raises(UserError, match="no such checkpoint"):
        resolve_resume(str(tmp_path / "missing.pt"), checkpoint)


def test_resume_removes_what_a_killed_checkpoint_write_left(tmp_path, capsys):
    checkpoint = tmp_path / "checkpoint.pt"
    checkpoint.write_bytes(b"ten steps of work")
    stale = tmp_path / ".checkpoint.pt.k3j9x2ab.tmp"  # the name zoo.io.atomic_write gives
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / "notes.tmp"  # not atomic_write's: kept
    other.write_text("mine")
    assert resolve_resume("auto", checkpoint) == checkpoint
    assert not stale.exists() and other.exists() and checkpoint.read_bytes() == b"ten steps of work"
    assert str(stale) in capsys.readouterr().err


def test_parameter_groups_exempt_biases_and_norms():
    torch = pytest.importorskip("torch")
    from zoo.torch import parameter_groups

    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    model[2].weight.requires_grad_(False)
    decay, plain = parameter_groups(model, 0.1, adapt=True)
    assert [p.shape for p in decay["params"]] == [torch.Size([4, 3])]
    assert len(plain["params"]) == 4 and plain["weight_decay"] == 0.0
    assert decay["adapt"] is True and plain["adapt"] is False


def test_autocast_and_scaler_follow_amp():
    torch = pytest.importorskip("torch")
    from zoo.torch import autocast, grad_scaler

    x = torch.randn(2, 3)
    with autocast("cpu", "bf16"):
        assert torch.nn.functional.linear(x, torch.randn(4, 3)).dtype == torch.bfloat16
    with autocast("cpu", "fp32"):
        assert torch.nn.functional.linear(x, torch.randn(4, 3)).dtype == torch.float32
    assert not grad_scaler("cpu", "bf16").is_enabled()
    with pytest.raises(UserError, match="amp must be one of"):
        autocast("cpu", "none")


def test_help_shows_a_percent_unit(tmp_path):
    assert "(%, e.g. 75.9)" in _parser(tmp_path).format_help()


def test_ctrl_c_ends_an_entry_point_in_one_line(capsys):
    from zoo.cli import entry_point

    @entry_point
    def main():
        raise KeyboardInterrupt

    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 130
    assert capsys.readouterr().err == "interrupted (Ctrl-C)\n"


def test_a_recipe_number_set_to_a_word_is_one_line(tmp_path):
    from zoo.recipe import load_recipe

    recipe = tmp_path / "r.yaml"
    recipe.write_text("optimizer:\n  lr: 0.1\n  fused: true\nmodel:\n  width: 64\n")
    with pytest.raises(UserError, match=r"optimizer.lr is a number in .*r.yaml, not 'fast'"):
        load_recipe(recipe, {"optimizer.lr": "fast"})
    with pytest.raises(UserError, match=r"model is a section"):
        load_recipe(recipe, {"model": "3"})
    loaded = load_recipe(recipe, {"optimizer.lr": "2e-3", "optimizer.fused": "false", "model.width": "null"})
    assert loaded["optimizer"] == {"lr": 0.002, "fused": False} and loaded["model"]["width"] is None


def test_a_results_dir_under_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(UserError, match=r"results dir .*f/run is under .*f, which is a file"):
        resolve_resume(None, tmp_path / "f" / "run" / "checkpoint.pt")
    with pytest.raises(UserError, match=r"results dir .*f is a file"):
        resolve_resume("auto", tmp_path / "f" / "checkpoint.pt")
    assert resolve_resume("auto", tmp_path / "new" / "run" / "checkpoint.pt") is None


SIGTERM_PROGRAM = r"""
import os, pathlib, sys, time
from multiprocessing import get_context
from zoo.cli import entry_point

def child(path):
    pathlib.Path(path).write_text(str(os.getpid()))
    time.sleep(60)

@entry_point
def main():
    work = pathlib.Path(sys.argv[1])
    scratch = work / "scratch.tmp"
    scratch.write_text("half")
    worker = get_context("fork").Process(target=child, args=(str(work / "child.pid"),))
    worker.start()
    try:
        print("ready", flush=True)
        time.sleep(60)
    finally:
        scratch.unlink()
        worker.join()  # the child ends on the same SIGTERM, by its default action

main()
"""


def test_sigterm_runs_the_cleanup_and_ends_in_one_line(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_PROGRAM, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "ready"
    deadline = time.monotonic() + 30
    pid_file = tmp_path / "child.pid"
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)  # the child may have created the file and not yet written it
    child = int(pid_file.read_text())
    proc.send_signal(signal.SIGTERM)
    os.kill(child, signal.SIGTERM)  # a scheduler signals every process of the job
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 143, err
    assert (
        err.strip().splitlines()[-1]
        == "terminated (SIGTERM): --resume auto continues from the last checkpoint"
    )
    assert "Traceback" not in err
    assert not (tmp_path / "scratch.tmp").exists()  # the finally block ran


WORKER_PROGRAM = r"""
import time
from multiprocessing import get_context
from zoo.cli import Preemption, entry_point

def worker(conn):
    conn.send("started")
    time.sleep(1.0)  # loading the step's batch while the signal comes
    conn.send("batch")

@entry_point
def main():
    with Preemption() as preemption:
        receive, send = get_context("fork").Pipe()
        loader = get_context("fork").Process(target=worker, args=(send,))
        loader.start()
        send.close()  # a worker that dies ends the wait below (EOFError)
        assert receive.recv() == "started"
        print(loader.pid, flush=True)
        print(receive.recv(), flush=True)
        loader.join()
        print("worker exit", loader.exitcode, flush=True)
        if preemption.requested(1):
            preemption.stop()

main()
"""


def test_a_sigterm_to_every_process_leaves_a_checkpointing_loop_its_data_workers():
    """A scheduler signals every process of the job: a worker forked inside a Preemption keeps loading,
    so that the step in progress ends and is checkpointed before the run stops (exit 143)."""
    import os
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER_PROGRAM], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    worker = int(proc.stdout.readline())
    proc.send_signal(signal.SIGTERM)
    os.kill(worker, signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert out.split("\n")[:2] == ["batch", "worker exit 0"], (out, err)
    assert proc.returncode == 143 and "Traceback" not in err, err


def test_an_entry_point_called_in_process_leaves_sigterm_as_it_found_it():
    import signal

    from zoo.cli import entry_point

    seen = []

    @entry_point
    def main():
        seen.append(signal.getsignal(signal.SIGTERM))

    session = signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the test session may hold its own handler
    try:
        main()
        assert seen[0] is not signal.SIG_DFL  # SIGTERM raised Terminated while main ran
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

        def own(signum, frame):
            pass

        signal.signal(signal.SIGTERM, own)
        main()  # a program's own handler is kept
        assert seen[1] is own and signal.getsignal(signal.SIGTERM) is own
    finally:
        signal.signal(signal.SIGTERM, session)


PREEMPTED_RANKS = """
import os, signal, sys
import torch.distributed as dist
from zoo.cli import Preemption, entry_point

@entry_point
def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    with Preemption(2, "cpu", every=4) as preemption:
        for step in range(1, 13):
            if rank == 1 and step == 2:
                os.kill(os.getpid(), signal.SIGTERM)  # one rank only, between two agreed checks
            if preemption.requested(step):
                print(f"rank {rank} stops after step {step}", flush=True)
                preemption.stop()
    print(f"rank {rank} ran to the end", flush=True)

main()
"""


def test_a_sigterm_to_one_rank_stops_every_rank_after_the_same_step(tmp_path):
    import socket
    import subprocess
    import sys

    script = tmp_path / "ranks.py"
    script.write_text(PREEMPTED_RANKS)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(port),
         "--tee", "3", str(script)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    said = sorted(line.split("]:", 1)[-1].strip() for line in done.stdout.splitlines() if "rank " in line)
    assert said == ["rank 0 stops after step 4", "rank 1 stops after step 4"], (
        done.stdout + done.stderr[-3000:]
    )
    assert done.stderr.count("terminated (SIGTERM)") == 2, done.stderr[-3000:]


def test_ranks_of_another_framework_agree_through_its_collective():
    """``agree`` stands for TensorFlow's or MXNet's collective: asked at the same steps on every process,
    once more as the barrier in stop; another rank's flag stops this one too."""
    import pytest
    from zoo.cli import Preemption, Terminated

    asked = []

    def agree(flag):  # the other rank was signalled before step 8
        asked.append(flag)
        return flag or len(asked) >= 2

    with Preemption(2, every=4, agree=agree) as preemption:
        stops = [step for step in range(1, 13) if preemption.requested(step)]
        assert asked == [False, False, True] and stops == [8, 12]  # steps 4, 8, 12; the flag stays set
        with pytest.raises(Terminated):
            preemption.stop()
    assert asked[-1] is True and len(asked) == 4


@pytest.mark.parametrize(
    ("environ", "devices", "expected"),
    [
        ({}, [], "PASSIVE"),  # no GPU: idle OpenMP threads sleep
        ({}, ["nvidia0", "nvidiactl"], None),  # a GPU: OpenMP's own default
        ({"CUDA_VISIBLE_DEVICES": ""}, ["nvidia0"], "PASSIVE"),  # GPUs hidden
        ({"CUDA_VISIBLE_DEVICES": "-1"}, ["nvidia0"], "PASSIVE"),
        ({"CUDA_VISIBLE_DEVICES": "1"}, ["nvidia0", "nvidia1"], None),
        ({"CUDA_VISIBLE_DEVICES": "0"}, ["nvidiactl"], "PASSIVE"),  # a driver node, no GPU
        ({"OMP_WAIT_POLICY": "ACTIVE"}, [], "ACTIVE"),  # the caller's choice stays
    ],
)
def test_openmp_threads_sleep_on_a_machine_without_gpu(tmp_path, environ, devices, expected):
    from zoo.cli import cpu_thread_defaults

    for name in devices:
        (tmp_path / name).touch()
    environ = dict(environ)
    cpu_thread_defaults(environ, dev=tmp_path)
    assert environ.get("OMP_WAIT_POLICY") == expected


def test_an_entry_point_sets_the_wait_policy_before_main_runs():
    script = """
import os
from zoo.cli import entry_point

@entry_point
def main():
    print(os.environ.get("OMP_WAIT_POLICY"))

main()
"""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    env["CUDA_VISIBLE_DEVICES"] = ""  # as on a machine without a GPU, here and on the GPU machine
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "PASSIVE"
